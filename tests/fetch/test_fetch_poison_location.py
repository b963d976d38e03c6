"""A hostile server's Location headers: one that urljoin refuses (``http://[a/``: ValueError
"Invalid IPv6 URL") or one with a port of thousands of digits must not crash the fetch
worker (a crash there fails the partition on every retry). The redirect is recorded, its
target is a counted drop, and robots.txt redirecting there fails closed.

The server is a few lines of http.server on its own loopback addresses, bounded in time,
stopped by the test, and logging every request it saw.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import pyarrow.parquet as pq
import pytest

from cycles.config import Config
from cycles.storage.store import Store
from tests.conftest import loopback_servers
from tests.support.fetching import fetch, results

HUGE_PORT = "9" * 5000
PAGES = {  # host -> path -> (status, Location)
    "poison.test": {"/robots.txt": (404, None), "/bracket": (301, "http://[a/"),
                    "/port": (301, f"http://poison.test:{HUGE_PORT}/x"), "/ok": (200, None)},
    "robots-bracket.test": {"/robots.txt": (301, "http://[a/robots.txt"), "/a": (200, None)},
    "robots-port.test": {"/robots.txt": (301, "http://robots-port.test:99999/robots.txt"), "/a": (200, None)},
}
ADDRESSES = {"poison.test": "127.250.10.1", "robots-bracket.test": "127.250.10.2", "robots-port.test": "127.250.10.3"}
MAX_SECONDS = 60


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        host = self.headers.get("Host", "").rsplit(":", 1)[0]
        self.server.seen.append((host, self.path))
        status, location = PAGES.get(host, {}).get(self.path, (404, None))
        body = b"<html><body>ok</body></html>" if status == 200 else b""
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile():
    """One server per loopback address (same port), stopped at the end or after MAX_SECONDS."""
    seen: list[tuple[str, str]] = []
    with loopback_servers(ADDRESSES.values(), _Handler, MAX_SECONDS, seen=seen) as (port, _):
        yield port, seen


@pytest.mark.web
def test_poison_location_headers_are_counted_drops(hostile, tmp_path):
    port, seen = hostile
    config = Config()
    config.fetch.resolve = dict(ADDRESSES)
    config.fetch.allowed_networks = ["127.0.0.0/8"]  # the hostile server is on loopback
    config.fetch.processes = 1
    config.fetch.connect_timeout_s = 2.0
    config.fetch.timeout_s = 5.0
    config.fetch.progress_s = 0.0
    urls = [f"http://poison.test:{port}{p}" for p in ("/bracket", "/port", "/ok")]
    urls += [f"http://robots-bracket.test:{port}/a", f"http://robots-port.test:{port}/a"]
    store = Store(tmp_path / "data")
    segment, result = fetch(store, config, urls)

    rows = results(store, segment)
    assert set(rows) == set(urls)  # every URL has its row: nothing lost, nothing crashed
    bracket, huge = rows[urls[0]], rows[urls[1]]
    assert (bracket["outcome"], bracket["redirect_to"]) == ("redirect", "http://[a/")
    assert (huge["outcome"], huge["redirect_to"]) == ("redirect", f"http://poison.test:{HUGE_PORT}/x")
    assert rows[urls[2]]["outcome"] == "ok"
    assert result.counters["fetch/redirect_filtered"] == 2  # neither target is followed
    # The targets stay outlinks for update, which counts them as unparseable drops.
    outlinks = {o["url"] for o in pq.read_table(store.segment_dir(segment) / "outlinks").to_pylist()}
    assert {"http://[a/", f"http://poison.test:{HUGE_PORT}/x"} <= outlinks
    # robots.txt redirecting to an unusable URL: not followed, the host is not crawled
    # (RFC 9309 §2.3.1.2 past the redirects it will follow: fail closed).
    assert rows[urls[3]]["outcome"] != "ok" and rows[urls[4]]["outcome"] != "ok"
    assert sorted(seen) == sorted([("poison.test", "/robots.txt"), ("poison.test", "/bracket"),
                                   ("poison.test", "/port"), ("poison.test", "/ok"),
                                   ("robots-bracket.test", "/robots.txt"), ("robots-port.test", "/robots.txt")])
