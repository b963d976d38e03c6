"""On a small multi-host web, a page many hosts link to is fetched earlier when ranked by
links than by depth (issue #13 §1).

The web: t.test's home links to six pages (depth 1); six hub hosts each link, from their
page /a (depth 1), to t.test/deep (depth 2). Two URLs a host a cycle. By depth, t.test/deep
waits until the six shallow pages are fetched (cycle 5); by links, six hosts link to it, and
it goes first as soon as it is known (cycle 3). The server records what it was asked, in
order; a few lines of http.server on loopback, stopped by the test.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cycles.config import Config
from cycles.executor import InProcess
from cycles.fetch.fetch import fetch_segment
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store
from cycles.commands.compact import compact
from cycles.update.update import update_segment

pytestmark = pytest.mark.web

ADDRESS = "127.0.0.1"
HUBS = [f"hub{i}.test" for i in range(6)]
SHALLOW = [f"/p{i}" for i in range(6)]
MAX_SECONDS = 120


def page(links: list[str]) -> bytes:
    anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    return f"<html><head><title>t</title></head><body><p>{anchors}</p></body></html>".encode()


def site(port: int) -> dict[str, dict[str, bytes]]:
    """host -> path -> body (robots.txt and anything else: 404)."""
    pages = {"t.test": {"/": page(SHALLOW), "/deep": page([]), **{p: page([]) for p in SHALLOW}}}
    for hub in HUBS:
        pages[hub] = {"/": page(["/a"]), "/a": page([f"http://t.test:{port}/deep"])}
    return pages


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        host = self.headers.get("Host", "").rsplit(":", 1)[0]
        self.server.seen.append((host, self.path))
        body = self.server.pages.get(host, {}).get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def linked_web():
    server = ThreadingHTTPServer((ADDRESS, 0), _Handler)
    server.seen = []
    server.pages = site(server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    timer = threading.Timer(MAX_SECONDS, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        yield server
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()


def crawl_until_deep(server, tmp_path, ranking: str, max_cycles: int) -> int | None:
    """Cycles until t.test/deep is fetched (None: not within ``max_cycles``)."""
    port = server.server_address[1]
    config = Config()
    config.fetch.resolve = {host: ADDRESS for host in ["t.test", *HUBS]}
    config.fetch.allowed_networks = ["127.0.0.0/8"]
    config.fetch.processes = 1
    config.fetch.delay_factor = 0.0
    config.db.buckets = 2
    config.db.duckdb_memory_limit = "1GB"
    config.generate.max_urls_per_host = 2
    config.generate.ranking = ranking
    config.fetch.follow_outlinks_depth = 0  # the order generate chooses, not what the fetch finds inline
    # The link DB merged and ranked after every update, as `crawl compact` does when due
    # (docs/incremental.md; by default every 6 h): here the ranking is under test, not its schedule.
    config.update.link_rank_interval_s = 0
    # The ranking alone is compared: an important host's larger budget would help too.
    config.generate.host_budget_max_factor = 1.0
    store = Store(tmp_path / ranking)
    seeds = tmp_path / f"seeds-{ranking}.txt"
    seeds.write_text("".join(f"http://{h}:{port}/\n" for h in ["t.test", *HUBS]))
    inject(store, config, seeds)
    server.seen.clear()
    for cycle in range(1, max_cycles + 1):
        segment = generate(store, config).segment
        assert segment, f"nothing due in cycle {cycle}"
        fetch_segment(store, config, segment, executor=InProcess())  # no worker process to start a cycle
        update_segment(store, config, segment)
        compact(store, config)
        if ("t.test", "/deep") in server.seen:
            return cycle
    return None


def test_a_page_many_hosts_link_to_is_fetched_earlier_by_links_than_by_depth(linked_web, tmp_path):
    by_links = crawl_until_deep(linked_web, tmp_path, "links", max_cycles=5)
    t_order_links = [path for host, path in linked_web.seen if host == "t.test" and path != "/robots.txt"]
    by_depth = crawl_until_deep(linked_web, tmp_path, "depth", max_cycles=5)
    t_order_depth = [path for host, path in linked_web.seen if host == "t.test" and path != "/robots.txt"]
    assert by_links == 3  # known after cycle 2, first of its host in cycle 3
    assert by_depth == 5  # after all six depth-1 pages, two a cycle
    # What the server saw: by links, /deep before most shallow pages; by depth, after all.
    assert t_order_links.index("/deep") == 3 and set(t_order_links[1:3]) <= set(SHALLOW)
    assert t_order_depth[-1] == "/deep" and set(t_order_depth[1:7]) == set(SHALLOW)
