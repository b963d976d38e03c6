"""The hostile hosts (testweb/hostile.py): they serve what they promise, and a crawl of
them ends on time, fetches nothing it must not, and counts what went wrong.
"""

from __future__ import annotations

import http.client
import json
import time
from collections import Counter

import duckdb
import pytest

from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from testweb.hostile import HUGE_ROBOTS_BYTES, InternalService, robots_blocked_hosts
from tests.conftest import config_for, write_seeds


def _get(web, host: str, target: str, read: int | None = None):
    conn = http.client.HTTPConnection(web.resolve_map()[f"{host}.web.test"], web.port, timeout=10)
    conn.request("GET", target, headers={"Host": f"{host}.web.test"})
    response = conn.getresponse()
    body = response.read(read) if read else response.read()
    conn.close()
    return response, body


@pytest.mark.web
def test_hostile_hosts_serve_what_they_promise():
    with TestWeb(hosts=0, special=False, hostile=True, internal_port=9, pages=2, max_seconds=60) as web:
        response, body = _get(web, "robots-huge", "/robots.txt")
        assert int(response.getheader("Content-Length")) == len(body) > HUGE_ROBOTS_BYTES - 200
        assert body.startswith(b"User-agent: *\nDisallow: /\n")
        response, body = _get(web, "robots-utf16", "/robots.txt")
        assert body.startswith(b"\xff\xfeUser-agent")
        response, body = _get(web, "robots-gzip", "/robots.txt")
        assert response.getheader("Content-Encoding") == "gzip" and not body.startswith(b"\x1f\x8b")
        response, _ = _get(web, "throttle", "/")
        assert response.status == 429 and response.getheader("Retry-After") == "1"
        response, body = _get(web, "endless", "/endless", read=300_000)
        assert response.getheader("Transfer-Encoding") == "chunked" and len(body) == 300_000
        response, _ = _get(web, "linker", "/go-internal")
        assert response.status == 302 and response.getheader("Location") == "http://127.0.0.1:9/redirected"
        assert web.resolve_map()["smuggle.web.test"] == "127.0.0.1"


@pytest.mark.web
def test_a_crawl_of_the_hostile_web_ends_and_fetches_nothing_it_must_not(tmp_path):
    started = time.monotonic()
    with InternalService(max_seconds=180) as internal:
        with TestWeb(hosts=0, special=False, hostile=True, internal_port=internal.port, pages=2,
                     page_bytes=2000, max_seconds=180) as web:
            store = Store(tmp_path / "data")
            config = config_for(web)
            config.fetch.processes = 1
            config.fetch.progress_s = 0.0
            config.fetch.max_page_bytes = 200_000  # the endless body is cut here
            config.fetch.low_speed_time_s = 2  # the drip is cut after this
            config.fetch.allowed_networks = ["127.0.60.0/24"]  # 127.0.0.1 is "inside"
            inject(store, config, write_seeds(tmp_path / "seeds.txt", web.seeds()))
            log = list(run_cycles(store, config, cycles=2))
            requests = web.requests()
        inside = list(internal.requests)
    assert time.monotonic() - started < 150, log
    assert inside == []
    for host in robots_blocked_hosts():
        pages = [r["path"] for r in requests if r["host"] == host and r["path"] != "/robots.txt"]
        assert pages == [], (host, pages)
    outcomes = dict(duckdb.sql(
        f"SELECT regexp_extract(url, '/[a-z-]+$'), outcome FROM read_parquet('{store.root}/segments/*/fetched/*.parquet') "
        "WHERE regexp_matches(url, '/(endless|drip|many-headers|huge-header)$')").fetchall())
    assert outcomes["/endless"] == "too_large"
    assert outcomes["/drip"] == "network_error"
    assert outcomes["/huge-header"] == "network_error"
    assert outcomes["/many-headers"] in ("network_error", "ok")
    counters = Counter()
    for path in (store.root / "segments").glob("*/stats/fetch-part-*.json"):
        counters.update(json.loads(path.read_text())["counters"])
    assert counters["robots/unreadable"] >= 2 and counters["robots/truncated"] >= 1
    assert counters["fetch/blocked_address"] >= 1
    assert counters["fetch/status/429"] >= 1 and counters["fetch/backoff"] >= 1
