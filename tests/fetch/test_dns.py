"""DNS through a real DNS server: the fetcher looks each name up once per TTL, backs failing
names off, records why, and the SSRF guard judges the addresses DNS answered.

The crawler runs as ``crawl fetch`` inside a private mount namespace whose
``/etc/resolv.conf`` names the test web's DNS server (testweb/namespace.py, testweb/dns.py):
its normal resolver, no ``fetch.resolve``, no test-only path. Every assertion on lookups is
on the DNS server's query log; every "no lookup" has a positive control that shows one.
Scrapy asks again on every retry of a failing name (42 queries for one SERVFAIL name in
30 s, issue 28); here a failing name costs one lookup per back-off period.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cycles.storage.store import Store
from testweb.dns import FAILING_NAMES, TestDNS, idn_name, zone_for
from testweb.harness import REPO_ROOT, TestWeb
from testweb.hostile import InternalService
from testweb.namespace import crawl_namespace, namespace_available
from tests.support.fetching import make_segment

pytestmark = [pytest.mark.web,
              pytest.mark.skipif(namespace_available() is not None, reason=str(namespace_available()))]

SHORT_TTL = f"short-ttl.web.test"
"""A name of h3's address with a 1 s TTL (the positive control of "no lookup while it stands")."""


@pytest.fixture(scope="module")
def realweb():
    """The test web, its DNS server and the namespace prefix (one for the module's tests)."""
    with TestWeb(hosts=4, pages=4, page_bytes=2000, special=False, max_seconds=600) as web:
        resolve = web.resolve_map()
        zone = zone_for(resolve, overrides={SHORT_TTL: {"a": [resolve["h3.web.test"]], "ttl": 1}})
        with TestDNS(zone, max_seconds=600) as dns, crawl_namespace(dns.address, names=zone["names"]) as prefix:
            yield web, dns, prefix


def crawl_fetch(prefix: list[str], store: Store, segment: str, **settings) -> dict:
    """``crawl fetch SEGMENT`` in the namespace; returns the segment's stats/fetch.json."""
    sets = {"fetch.processes": 1, "fetch.allowed_networks": ["127.0.0.0/8"], "fetch.connect_timeout_s": 2.0,
            "fetch.timeout_s": 10.0, "fetch.dns_timeout_s": 2.0, "fetch.follow_outlinks_depth": 0,
            "fetch.progress_s": 0.0, **settings}
    args = []
    for key, value in sets.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(prefix + [sys.executable, "-m", "cycles", "--data", str(store.root), "-q", *args,
                                      "fetch", segment], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads((Path(store.root) / "segments" / segment / "stats" / "fetch.json").read_text())


def rows(store: Store, segment: str) -> dict[str, dict]:
    return {r["url"]: r for r in pq.read_table(Path(store.root) / "segments" / segment / "fetched").to_pylist()}


def host_rows(store: Store, segment: str) -> dict[str, dict]:
    return {r["host"]: r for r in pq.read_table(Path(store.root) / "segments" / segment / "hosts").to_pylist()}


def lookups(dns: TestDNS, name: str, since: float, qtype: str = "A") -> list[dict]:
    return [q for q in dns.queries(name, qtype) if q["t"] >= since]


def test_each_name_is_looked_up_once_and_its_answer_holds_across_segments(realweb, tmp_path):
    web, dns, prefix = realweb
    store = Store(tmp_path / "data")
    idn = idn_name("bücher")  # h0's second name, on the wire as xn--bcher-kva.web.test
    urls = [web.url(f"h{i}.web.test", f"/p/{k}.html") for i in range(3) for k in range(3)]
    urls += [f"http://{idn}:{web.port}/p/{k}.html" for k in range(2)]
    since = time.time()
    first = make_segment(store, urls)
    stats = crawl_fetch(prefix, store, first)
    assert {r["outcome"] for r in rows(store, first).values()} == {"ok"}
    names = [f"h{i}.web.test" for i in range(3)] + [idn]
    for name in names:  # one lookup: its A and its AAAA query, once
        assert len(lookups(dns, name, since, "A")) == 1, name
        assert len(lookups(dns, name, since, "AAAA")) == 1, name
    assert stats["dns/lookups"] == len(names) and stats["dns/seconds"] > 0
    hosts = host_rows(store, first)
    assert hosts["h1.web.test"]["dns_addresses"] == web.resolve_map()["h1.web.test"]
    assert hosts["h1.web.test"]["dns_error"] is None
    assert hosts["h1.web.test"]["dns_expires_at"].timestamp() > time.time() + 200  # the zone's TTL is 300 s

    # The next segment (the first one not updated yet: its hosts/ rows are read) asks no name
    # again while the TTL stands ...
    second = make_segment(store, [web.url(f"h{i}.web.test", "/p/3.html") for i in range(3)]
                          + [web.url(SHORT_TTL, "/p/0.html")])
    since = time.time()
    stats = crawl_fetch(prefix, store, second, **{"fetch.dns_min_ttl_s": 0})
    assert {r["outcome"] for r in rows(store, second).values()} == {"ok"}
    assert all(not lookups(dns, name, since) for name in names)
    # ... while a name whose TTL (1 s) runs out between two requests (robots.txt, then the
    # page a delay later) is looked up before each (positive control).
    assert len(lookups(dns, SHORT_TTL, since)) == 2
    assert len(server_saw(web, SHORT_TTL)) == 2
    served = {r["host_header"] for r in web.requests()}
    assert f"{idn}:{web.port}" in served  # the IDN name was asked for by its A-label


RETRY_S = 15.0
"""The back-off of the failing-name test: long enough that the next ``crawl fetch`` starts
inside it on a loaded machine (6 s was not, under pytest -n 2 at load ~8), short enough to
wait out for the positive control."""


@pytest.mark.parametrize("kind", ["nxdomain", "servfail", "timeout"])
def test_a_failing_name_costs_one_lookup_per_back_off_period(realweb, tmp_path, kind):
    web, dns, prefix = realweb
    store = Store(tmp_path / "data")
    name = next(n for n, k in FAILING_NAMES.items() if k == kind)
    failing = [f"http://{name}:{web.port}/p/{k}.html" for k in range(6)]
    good = [web.url("h2.web.test", "/p/0.html")]  # positive control: a name that resolves is fetched
    since = time.time()
    first = make_segment(store, failing + good)
    stats = crawl_fetch(prefix, store, first, **{"fetch.dns_retry_s": RETRY_S})
    fetched = rows(store, first)
    assert fetched[good[0]]["outcome"] == "ok"
    for url in failing:
        assert fetched[url]["outcome"] == "deferred"
        assert fetched[url]["error"].startswith(f"dns {kind}: "), fetched[url]["error"]
    host = host_rows(store, first)[name]
    assert host["dns_error"] == kind and host["dns_failures"] == 1 and host["dns_addresses"] is None
    back_off = host["dns_expires_at"].timestamp() - host["dns_checked_at"].timestamp()
    assert back_off == pytest.approx(RETRY_S, abs=0.01)
    assert stats[f"dns/failures/{kind}"] == 1 and stats["dns/lookups"] == 2
    queried = lookups(dns, name, since)
    # One lookup: one A query (a timeout: the resolver's own retries within fetch.dns_timeout_s = 2 s).
    assert len(queried) == (1 if kind != "timeout" else 2), queried
    assert queried[-1]["t"] - queried[0]["t"] < 2.5
    assert not server_saw(web, name)

    # Within the back-off, a new segment defers the host without asking DNS ...
    second = make_segment(store, failing)
    since = time.time()
    stats = crawl_fetch(prefix, store, second)
    assert time.time() < host["dns_expires_at"].timestamp(), "the second fetch ended after the back-off"
    assert not lookups(dns, name, since)
    assert {r["outcome"] for r in rows(store, second).values()} == {"deferred"}
    assert all(r["error"].startswith(f"dns {kind}: ") for r in rows(store, second).values())
    assert stats.get("dns/lookups", 0) == 0 and stats["dns/cached_failure"] == 1
    # ... and once it has passed, looks the name up once more (positive control), backing
    # off twice as long after a second failure in a row.
    time.sleep(max(0.0, host["dns_expires_at"].timestamp() - time.time()) + 0.2)
    third = make_segment(store, failing)
    since = time.time()
    crawl_fetch(prefix, store, third, **{"fetch.dns_retry_s": RETRY_S})
    assert len(lookups(dns, name, since)) == (1 if kind != "timeout" else 2)
    again = host_rows(store, third)[name]
    assert again["dns_failures"] == 2
    assert again["dns_expires_at"].timestamp() - again["dns_checked_at"].timestamp() == pytest.approx(2 * RETRY_S, abs=0.01)


def server_saw(web: TestWeb, name: str) -> list[dict]:
    return [r for r in web.requests() if (r["host_header"] or "").split(":")[0] == name]


def test_the_ssrf_guard_refuses_a_public_looking_name_that_resolves_to_loopback(realweb, tmp_path):
    web, dns, prefix = realweb
    with InternalService(max_seconds=120) as internal:
        url = f"http://static-cdn.web.test:{internal.port}/secret"
        store = Store(tmp_path / "refused")
        since = time.time()
        segment = make_segment(store, [url])
        # The regular hosts' network only: static-cdn.web.test answers 127.0.0.1 and ::1.
        stats = crawl_fetch(prefix, store, segment, **{"fetch.allowed_networks": ["127.1.0.0/16"]})
        row = rows(store, segment)[url]
        assert row["outcome"] == "blocked" and "127.0.0.1" in row["error"] or "::1" in row["error"]
        assert lookups(dns, "static-cdn.web.test", since)  # the name was looked up for real
        assert internal.requests == []
        assert stats["fetch/blocked_address"] == 1

        # Positive control: with loopback allowed, the same name reaches the service.
        store = Store(tmp_path / "allowed")
        segment = make_segment(store, [url])
        crawl_fetch(prefix, store, segment, **{"fetch.allowed_networks": ["127.0.0.0/8", "::1/128"]})
        assert [path for _, _, path, _ in internal.requests] == ["/robots.txt", "/secret"]


def test_a_robots_txt_redirect_target_is_looked_up_by_the_fetcher_not_libcurl(tmp_path):
    """robots.txt of ``alias.web.test`` (h0's address, plain http) redirects to h0's own name over
    https (RFC 9309 §2.3.1.2; the test web sends an HTTPS host's http URLs there). The target
    name goes through the fetcher's resolver like any host's: here it answers SERVFAIL, so the
    host is deferred with the DNS failure's kind (libcurl would have said ``curl 6``), after one
    lookup in the DNS server's log. Positive control: libcurl's own resolver (the curl command
    in the same namespace) asks the server for that name too."""
    with TestWeb(hosts=2, pages=2, page_bytes=1000, special=False, https=1.0, max_seconds=300) as web:
        resolve = web.resolve_map()
        target = "h0.web.test"
        zone = zone_for(resolve, overrides={"alias.web.test": {"a": [resolve[target]]}, target: {"fail": "servfail"}})
        with TestDNS(zone, max_seconds=300) as dns, crawl_namespace(dns.address, names=zone["names"]) as prefix:
            store = Store(tmp_path / "data")
            urls = [f"http://alias.web.test:{web.port}/p/{k}.html" for k in range(2)]
            since = time.time()
            segment = make_segment(store, urls)
            stats = crawl_fetch(prefix, store, segment)
            robots = [r for r in server_saw(web, "alias.web.test") if r["path"] == "/robots.txt"]
            assert [r["status"] for r in robots] == [301]  # the redirect was asked for and answered
            for row in rows(store, segment).values():
                assert row["outcome"] == "deferred" and row["error"].startswith("dns servfail: "), row
            assert len(lookups(dns, target, since, "A")) == 1 and len(lookups(dns, target, since, "AAAA")) == 1
            assert stats["dns/lookups"] == 2 and stats["dns/failures/servfail"] == 1  # alias, then the target

            since = time.time()
            curl = subprocess.run(prefix + ["curl", "-sL", "-o", "/dev/null", "--max-time", "10", robots_of(urls[0])],
                                  capture_output=True, timeout=60)
            assert curl.returncode == 6  # could not resolve the redirect's target
            assert lookups(dns, target, since, "A")


def robots_of(url: str) -> str:
    return url.split("/p/")[0] + "/robots.txt"
