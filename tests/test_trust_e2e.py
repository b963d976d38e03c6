"""Several cycles over a web of mirrored, redirecting, rate-limiting and hostile hosts, judged
by what the servers saw and by every crawl DB version written (the trust issue's "done when").

- no request inside a Retry-After window, across cycle boundaries too;
- no request to a non-public address (an internal service on 127.0.0.1 that the web links to,
  redirects to and smuggles a host name to);
- no page request to a host whose robots.txt could not be read (or forbids everything);
- one row per URL in every crawl DB version;
- no page answered 200 twice (static pages are not due again within a few cycles, and a
  redirect target the crawl DB already holds is not refetched inline).
"""

from __future__ import annotations

import http.client
import ipaddress
from collections import Counter, defaultdict

import pyarrow.parquet as pq
import pytest

from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from testweb.hostile import INTERNAL_IP, InternalService, robots_blocked_hosts
from tests.conftest import config_for, write_seeds

pytestmark = pytest.mark.web

CYCLES = 3


def public_networks(web) -> list[str]:
    """The /24s of the web's hosts, standing in for "the public internet"; 127.0.0.0/24 (the
    internal service) is left out."""
    inside = ipaddress.ip_network(f"{INTERNAL_IP}/24", strict=False)
    nets = {ipaddress.ip_network(f"{ip}/24", strict=False) for ip in web.resolve_map().values()}
    return sorted(str(n) for n in nets if n != inside)


def retry_after(web, host: str, path: str) -> float:
    """The Retry-After the web sends for this URL (asked after the crawl, outside its log)."""
    conn = http.client.HTTPConnection(web.resolve_map()[host], web.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host})
        response = conn.getresponse()
        response.read(1000)
        value = response.getheader("Retry-After")
    finally:
        conn.close()
    return float(value) if value and value.isdigit() else 0.0


def crawldb_versions(store: Store) -> list[list[str]]:
    """The URLs of every crawl DB version folder on disk (one list per version)."""
    versions = []
    for version in store.list_dirs(store.path("crawldb")):
        files = sorted((store.root / "crawldb" / version).glob("bucket-*.parquet"))
        versions.append([u for f in files for u in pq.read_table(f, columns=["url"])["url"].to_pylist()])
    return versions


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trust")
    with InternalService(max_seconds=400) as internal:
        with TestWeb(hosts=4, pages=4, page_bytes=2000, special=True, neardups=True, hostile=True,
                     internal_port=internal.port, max_seconds=400) as web:
            store = Store(tmp / "data")
            config = config_for(web)
            config.fetch.progress_s = 0.0
            config.fetch.max_page_bytes = 200_000
            config.fetch.low_speed_time_s = 2
            config.fetch.allowed_networks = public_networks(web)
            config.db.keep_versions = 10  # every version stays on disk to be checked
            inject(store, config, write_seeds(tmp / "seeds.txt", web.seeds()))
            log = []
            for _ in range(CYCLES):
                log += list(run_cycles(store, config, cycles=1))
            requests = web.requests()
            throttled = {(r["host"], r["path"]) for r in requests if r["status"] in (429, 503)}
            waits = {key: retry_after(web, *key) for key in throttled}
        inside = list(internal.requests)
        # Positive control: the service answers whoever asks, so the crawler could have reached it.
        probe = http.client.HTTPConnection("127.0.0.1", internal.port, timeout=10)
        probe.request("GET", "/probe")
        reachable = probe.getresponse().status == 200
        probe.close()
        yield {"store": store, "requests": requests, "inside": inside, "waits": waits, "log": log,
               "reachable": reachable and len(internal.requests) == len(inside) + 1}


def fetched_outcomes(store: Store) -> Counter:
    """Outcome -> URLs, over every segment's fetched rows."""
    files = sorted(store.root.glob("segments/*/fetched/*.parquet"))
    return Counter(o for f in files for o in pq.read_table(f, columns=["outcome"])["outcome"].to_pylist())


def test_no_request_reached_a_non_public_address(crawl):
    assert crawl["inside"] == []
    # It could have: the service answered the test's own request, and the crawler met the links
    # into it and refused them (outcome blocked), rather than never seeing them.
    assert crawl["reachable"]
    assert fetched_outcomes(crawl["store"])["blocked"] >= 1


def test_no_page_of_a_host_whose_robots_txt_could_not_be_read(crawl):
    asked_robots = {r["host"] for r in crawl["requests"] if r["path"] == "/robots.txt"}
    for host in robots_blocked_hosts():
        pages = [r["path"] for r in crawl["requests"] if r["host"] == host and r["path"] != "/robots.txt"]
        assert pages == [], (host, pages)
        # The host was reached (its robots.txt asked), so its pages could have been requested.
        assert host in asked_robots, host


def test_no_request_inside_a_retry_after_window_even_across_cycles(crawl):
    by_host = defaultdict(list)
    for r in crawl["requests"]:
        by_host[r["host"]].append(r)
    windows = 0
    for host, rows in by_host.items():
        rows.sort(key=lambda r: r["t_start"])
        for i, r in enumerate(rows):
            wait = crawl["waits"].get((host, r["path"]), 0.0) if r["status"] in (429, 503) else 0.0
            if wait <= 0:
                continue
            windows += 1
            later = [n for n in rows[i + 1:] if n["t_start"] < r["t_end"] + wait - 0.005]
            assert later == [], (host, r["path"], wait, [(n["path"], round(n["t_start"] - r["t_end"], 2)) for n in later])
    assert windows >= 2, "the web's rate limits were never met: the test proves nothing"


def test_one_row_per_url_in_every_crawl_db_version(crawl):
    versions = crawldb_versions(crawl["store"])
    assert len(versions) >= CYCLES
    for urls in versions:
        assert len(urls) == len(set(urls)), [u for u, n in Counter(urls).items() if n > 1][:5]


def test_no_page_answered_twice(crawl):
    pages = Counter((r["host"], r["path"]) for r in crawl["requests"]
                    if r["status"] == 200 and r["path"] != "/robots.txt")
    assert pages and max(pages.values()) == 1, [k for k, n in pages.items() if n > 1][:5]
