"""Segments sized by plan (issue 29, docs/segments.md): a segment's fetch ends at its planned
length whatever its hosts do, and the crawl goes on in the next one.

- a host whose robots.txt asks a Crawl-delay of 30 s, and a server dripping its page a byte a
  second, do not hold a segment open: the fetch ends at the plan, the URLs it did not reach
  and the transfer still dripping are handed back without a result row, and the next
  generate gives each such host no more than fits its spacing (the server's log and the
  crawl DB say so; a host beside them with a 1 s delay shows pages could be fetched);
- without a plan the same drip is fetched to its end (the positive control);
- ``crawl run`` with the default configuration on a hostile long-tail web updates several
  segments, and ``crawl cycle`` repeated completes its cycles.

No assertion is on a timing: what the server saw and what was written.
"""

from __future__ import annotations

import time
from collections import Counter
from http.server import BaseHTTPRequestHandler

import pytest

from cycles.tables import segment as seg
from cycles.config import Config
from cycles.commands.cycle import run_cycles
from cycles.fetch.fetch import fetch_segment
from cycles.commands.inject import inject
from cycles.commands.run import RunState, run_crawl
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import loopback_servers, write_seeds
from tests.support.fetching import assert_polite, crawldb_rows, make_segment

pytestmark = pytest.mark.web

ADDRESSES = {"slow.plan.test": "127.77.2.1", "drip.plan.test": "127.77.2.2", "fast.plan.test": "127.77.2.3"}
CRAWL_DELAY_S = 30
DRIP = b"<html><body>drip</body></html>"
"""Sent one byte a second: 30 s for the page."""
PLANNED_S = 6.0


def plan_pages() -> dict[str, dict[str, tuple[int, dict[str, str], bytes]]]:
    html = b"<html><head><title>t</title></head><body><p>a page</p></body></html>"
    page = (200, {"Content-Type": "text/html"}, html)
    no_robots = (404, {"Content-Type": "text/plain"}, b"")
    return {
        "slow.plan.test": {"/robots.txt": (200, {"Content-Type": "text/plain"},
                                           f"User-agent: *\nCrawl-delay: {CRAWL_DELAY_S}\n".encode()),
                           **{f"/p{k}": page for k in range(10)}},
        "drip.plan.test": {"/robots.txt": no_robots, "/drip": (200, {"Content-Type": "text/html"}, DRIP),
                           **{f"/p{k}": page for k in range(5)}},
        "fast.plan.test": {"/robots.txt": no_robots, **{f"/p{k}": page for k in range(20)}},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        started = time.time()
        host = self.headers.get("Host", "").rsplit(":", 1)[0]
        # Logged when asked: a dripping response may never end (the client cuts it).
        entry = {"host": host, "path": self.path, "t_start": started, "t_end": None}
        self.server.seen.append(entry)
        status, headers, body = self.server.pages.get(host, {}).get(self.path, (404, {}, b""))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if self.path == "/drip":
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(1.0)
            else:
                self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return  # cut by the client
        entry["t_end"] = time.time()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def plan_web():
    seen: list[dict] = []
    with loopback_servers(ADDRESSES.values(), _Handler, 240, seen=seen) as (port, servers):
        for server in servers:
            server.pages = plan_pages()
        yield port, seen


def plan_config() -> Config:
    config = Config()
    config.fetch.resolve = dict(ADDRESSES)
    config.fetch.allowed_networks = ["127.0.0.0/8"]  # the test server is on loopback
    config.fetch.processes = 1
    config.fetch.progress_s = 0.0
    config.fetch.flush_s = 1.0
    # A drip fast enough for the low-speed guard (1 KB/s) holds a transfer up to timeout_s:
    # with the guard off this drip is that case, at one byte a second.
    config.fetch.low_speed_bytes_per_s = 0
    config.fetch.timeout_s = 120.0
    config.generate.segment_s = PLANNED_S
    config.db.buckets = 2
    return config


def urls_of(port: int, host: str) -> list[str]:
    return [f"http://{host}:{port}{path}" for path in plan_pages()[host] if path != "/robots.txt"]


def fetched_rows(store: Store, segment: str) -> list[dict]:
    return [r for f in seg.files(store, segment, seg.FETCHED) for r in store.read_table(f).to_pylist()]


def listed(store: Store, segment: str) -> Counter:
    return Counter(r["host"] for f in seg.files(store, segment, seg.FETCHLIST) for r in store.read_table(f).to_pylist())


@pytest.fixture(scope="module")
def planned(plan_web, tmp_path_factory):
    port, seen = plan_web
    tmp = tmp_path_factory.mktemp("plan")
    store, config = Store(tmp / "data"), plan_config()
    seeds = [u for host in ADDRESSES for u in urls_of(port, host)]
    inject(store, config, write_seeds(tmp / "seeds.txt", seeds))
    log = list(run_cycles(store, config, cycles=2, processes=1))
    return {"store": store, "port": port, "seen": list(seen), "log": log, "segments": seg.segment_ids(store)}


def test_a_crawl_delay_of_30s_does_not_hold_the_segment(planned):
    store, port, seen = planned["store"], planned["port"], planned["seen"]
    first, second = planned["segments"][:2]
    slow = sorted((r for r in seen if r["host"] == "slow.plan.test"), key=lambda r: r["t_start"])
    # Its robots.txt was read, and no page asked within its Crawl-delay (30 s: past the plan).
    assert slow[0]["path"] == "/robots.txt", slow
    assert all(r["t_start"] >= slow[0]["t_end"] + CRAWL_DELAY_S for r in slow[1:]), slow
    # Positive control: a host with a 1 s delay had its pages fetched in the same segment.
    assert sum(r["host"] == "fast.plan.test" and r["path"] != "/robots.txt" for r in seen) >= 3
    stats = store.read_json(seg.stats_file(seg.segment_dir(store, first), "fetch"))
    assert stats.get("fetch/time_limit_stop", 0) + stats.get("fetch/tail_stop", 0) >= 1, stats
    # Handed back, without a result row: still unfetched in the crawl DB, due again.
    assert not [r for r in fetched_rows(store, first) if r["host"] == "slow.plan.test"]
    rows = crawldb_rows(store)
    assert all(rows[u]["status"] == "unfetched" for u in urls_of(port, "slow.plan.test"))
    # The next plan knows its spacing: at most one URL (the first request needs no spacing),
    # none while its not-before time is past the planned end; the 1 s host gets what fits.
    assert listed(store, second)["slow.plan.test"] <= 1
    assert 1 <= listed(store, second)["fast.plan.test"] <= int(PLANNED_S)
    assert listed(store, first)["fast.plan.test"] == int(PLANNED_S)  # 20 due, 6 fit a 6 s plan at 1 s


def test_a_dripping_server_does_not_hold_the_segment(planned):
    store, port, seen = planned["store"], planned["port"], planned["seen"]
    first = planned["segments"][0]
    drips = [r for r in seen if r["host"] == "drip.plan.test" and r["path"] == "/drip"]
    assert drips and all(r["t_end"] is None for r in drips), drips  # asked, and cut before its end
    stats = store.read_json(seg.stats_file(seg.segment_dir(store, first), "fetch"))
    assert stats["fetch/cut_at_end"] >= 1, stats
    drip_url = f"http://drip.plan.test:{port}/drip"
    assert drip_url not in {r["url"] for s in planned["segments"] for r in fetched_rows(store, s)}
    assert crawldb_rows(store)[drip_url]["status"] == "unfetched"
    # Every segment was updated: nothing held a cycle open.
    assert all(state == seg.State.UPDATED for _, state in seg.states(store)), seg.states(store)


def test_without_a_plan_the_drip_is_fetched_to_its_end(plan_web, tmp_path):
    """The positive control of the drip test: a segment with no planned length (a fetch list
    made before plans, no ``fetch.max_duration_s``) waits for the whole page."""
    port, seen = plan_web
    store, config = Store(tmp_path / "data"), plan_config()
    drip_url = f"http://drip.plan.test:{port}/drip"
    segment = make_segment(store, [drip_url])
    fetch_segment(store, config, segment, 1)
    rows = fetched_rows(store, segment)
    assert [(r["url"], r["outcome"]) for r in rows] == [(drip_url, "ok")]


# --- the defaults on a hostile long-tail web ----------------------------------------------
def hostile_web() -> TestWeb:
    return TestWeb(hosts=40, pages=120, page_bytes=2000, special=True, traps=True, hostile=True, tail=True,
                   max_seconds=240)


def hostile_config(web: TestWeb) -> Config:
    """The test web's config (its addresses) and nothing else: the defaults a user gets. The
    internal service its hostile links lead to stays refused (SSRF guard), as in bench_crawl."""
    config = Config()
    config.fetch.resolve = dict(web.resolve_map())
    config.fetch.allowed_networks = sorted({f"{ip}/32" for ip in web.resolve_map().values()} - {"127.0.0.1/32"})
    config.fetch.progress_s = 0.0
    return config


@pytest.mark.parametrize("verb", ["run", "cycle"])
def test_the_defaults_update_segment_after_segment_on_a_hostile_web(verb, tmp_path):
    with hostile_web() as web:
        store, config = Store(tmp_path / "data"), hostile_config(web)
        seeds = [web.url(f"h{i}", "/") for i in (0, 1, 2, 5, 9, 20)]
        inject(store, config, write_seeds(tmp_path / "seeds.txt", seeds))
        if verb == "run":
            state = RunState()
            # 90 s: three 15 s segments and their updates fit in 60 s on a quiet machine; under
            # load 9-10 (four test workers on 2 cores beside other work) the run updated two.
            log = list(run_crawl(store, config, seconds=90, state=state))
            updated = state.updated
        else:
            # crawl cycle plans its segments for generate.segment_s (cron's minutes); a test
            # has seconds, so the plan is shortened: nothing else differs from the defaults.
            config.generate.segment_s = 10.0
            log = list(run_cycles(store, config, cycles=3))
            updated = [s for s, state in seg.states(store) if state == seg.State.UPDATED]
        requests = web.requests()
    assert len(updated) >= 3, log
    by_url = crawldb_rows(store)
    fetched = [r for r in by_url.values() if r["status"] != "unfetched"]
    # The crawl DB holds what the segments fetched: every page an updated segment got is a row
    # fetched, and the server answered it.
    answered = sum(1 for r in requests if r["status"] == 200 and r["path"] != "/robots.txt")
    in_updated = {r["url"] for s in updated for r in fetched_rows(store, s) if r["outcome"] == "ok"}
    assert 0 < len(in_updated) <= answered
    assert all(by_url[u]["status"] != "unfetched" for u in in_updated)
    assert len(fetched) > len(seeds) * 3, len(fetched)
    # Several segments each fetched pages: the crawl did not sit in one.
    assert sum(1 for s in updated if any(r["outcome"] == "ok" for r in fetched_rows(store, s))) >= 3
    assert_polite([r for r in requests if r["host"] in {f"h{i}" for i in range(40)}])
