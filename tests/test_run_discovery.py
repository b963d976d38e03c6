"""``crawl run`` with discovery inside the fetch (the link-following crawl of issue #10):
across overlapping segments no URL is fetched twice, no host gets more than its budgets,
and every host keeps its spacing.

The run generates segment k+1 when k's fetch ends, before k is updated, while k-1's update
has just added k-1's discoveries to the crawl DB; a big host is in every segment. A page k
fetched by discovery was then listed by k+1 and fetched again, and k+1's discovery fetched
again what k had (bench_crawl found 39 such repeats in 5,364 requests; the fix:
cycles/tables/leases.py, cycles/tables/assign.py ``write_seen_set``). The fast-tier test of the
pieces is tests/generate/test_pending_fetched.py; this one asks the server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import load_config
from cycles.commands.inject import inject
from cycles.commands.run import RunState, run_crawl
from cycles.storage.store import Store
from cycles.urls import url_host
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.processes import toml_config
from tests.support.fetching import assert_polite, crawldb_rows, fast_config
from tests.support.processes import crawldb_urls, wait_for

HOSTS, PAGES = 12, 60
LISTED, INLINE = 2, 3
"""Per host and segment: URLs generate lists, URLs discovery may add."""


@pytest.fixture(scope="module", params=[False, True], ids=["after-fetch", "ahead"])
def followed(tmp_path_factory, request):
    """A 50 s run; ``ahead``: each segment generated while the one before is fetched, its
    hosts included (cycles/commands/run.py ``coordinate``)."""
    tmp = tmp_path_factory.mktemp("run-discovery")
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=1500, special=False, tail=True, max_seconds=150) as web:
        store = Store(tmp / "data")
        config = fast_config(web, processes=2)
        config.fetch.follow_outlinks_depth = 3
        config.fetch.follow_outlinks_per_host = INLINE
        config.fetch.flush_s = 0.5
        config.fetch.max_duration_s = 4.0  # short segments: the big hosts are in every one
        config.generate.max_urls_per_host = LISTED
        config.generate.host_budget_max_factor = 1.0  # (ranking by links would raise it for big hosts)
        config.db.buckets = 2
        inject(store, config, write_seeds(tmp / "seeds.txt", [web.url("h0"), web.url("h1"), web.url("h5")]))
        state = RunState()
        log = list(run_crawl(store, config, seconds=50, state=state, generate_ahead=request.param))
        yield {"web": web, "store": store, "log": log, "state": state, "requests": web.requests(),
               "ahead": request.param}


def page_requests(requests: list[dict]) -> list[dict]:
    return [r for r in requests if r["path"] != "/robots.txt"]


def answered(requests: list[dict]) -> list[dict]:
    """Page requests the server answered whole: not the ones the crawler hung up on (a transfer
    cut at a segment's end is handed back without a row, docs/segments.md)."""
    return [r for r in page_requests(requests) if not r.get("client_closed")]


@pytest.mark.web
def test_segments_overlapped_and_discovery_fetched_inside_them(followed):
    store, state = followed["store"], followed["state"]
    assert len(state.fetched) >= 5, followed["log"]
    if followed["ahead"]:
        assert sum("while fetching" in line for line in followed["log"]) >= 3, followed["log"]
    listed = {u for s in state.fetched for f in seg.files(store, s, seg.FETCHLIST)
              for u in store.read_table(f)["url"].to_pylist()}
    asked = {followed["web"].url(r["host"], r["path"]) for r in page_requests(followed["requests"])}
    # Found and fetched inside the fetch, in no fetch list (what a fetch found and did not
    # reach may be listed by the next segment: segment.LEFTOVER).
    assert len(asked - listed) > 10


@pytest.mark.web
def test_no_url_is_fetched_twice_across_overlapping_segments(followed):
    asked = Counter((r["host"], r["path"]) for r in page_requests(followed["requests"]))
    assert max(asked.values()) == 1, [k for k, n in asked.items() if n > 1]
    rows = crawldb_rows(followed["store"])
    assert len(crawldb_urls(followed["store"])) == len(rows)  # one row per URL


@pytest.mark.web
def test_no_host_gets_more_than_its_budgets_in_a_segment(followed):
    store, state = followed["store"], followed["state"]
    def urls(segment: str, folder: str) -> list[str]:
        return [u for f in seg.files(store, segment, folder) for u in store.read_table(f)["url"].to_pylist()]

    for segment in state.fetched:
        listed = urls(segment, seg.FETCHLIST)
        assert max(Counter(url_host(u) for u in listed).values(), default=0) <= LISTED
        inline = Counter(url_host(u) for u in set(urls(segment, seg.FETCHED)) - set(listed))
        assert max(inline.values(), default=0) <= INLINE, (segment, inline)


@pytest.mark.web
def test_spacing_holds_across_overlapping_segments(followed):
    assert assert_polite(followed["requests"]) > 100


# --- killed in the middle of an overlapped run, then resumed --------------------------------
def run_process(store: Store, config_path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(config_path),
                             "run", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd())


def all_committed(store: Store) -> list[dict]:
    return [r for s in seg.segment_ids(store) for f in seg.files(store, s, seg.FETCHED)
            for r in store.read_table(f).to_pylist()]


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run-discovery-kill")
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=1500, special=False, tail=True, max_seconds=150) as web:
        store = Store(tmp / "data")
        config_path = tmp / "crawl.toml"
        toml_config(web, config_path)
        with open(config_path, "a") as fh:
            fh.write(f"follow_outlinks_depth = 3\nfollow_outlinks_per_host = {INLINE}\nmax_duration_s = 4.0\n"
                     f"\n[generate]\nmax_urls_per_host = {LISTED}\nhost_budget_max_factor = 1.0\n\n[db]\nbuckets = 2\n")
        config = load_config(config_path)
        inject(store, config, write_seeds(tmp / "seeds.txt", [web.url("h0"), web.url("h1"), web.url("h5")]))
        first = run_process(store, config_path)
        try:
            # Killed with segments generated ahead, fetched and being fetched.
            wait_for(first, lambda: len(seg.segment_ids(store)) >= 4 and len(all_committed(store)) >= 40)
            first.send_signal(signal.SIGKILL)
            first.wait()
        finally:
            first.kill()
        states_at_kill = seg.states(store)
        before = all_committed(store)
        second = run_process(store, config_path, "--seconds", "40")
        try:
            out, err = second.communicate(timeout=90)
        finally:
            second.kill()
        yield {"web": web, "store": store, "states_at_kill": states_at_kill, "before": before,
               "second": (second.returncode, out, err), "requests": web.requests()}


@pytest.mark.web
def test_a_killed_overlapped_run_resumes_and_fetches_nothing_committed_twice(killed_run):
    store = killed_run["store"]
    code, out, err = killed_run["second"]
    assert code == 0 and "Traceback" not in err, err
    assert "run: resuming the fetch of" in out or any(st == seg.State.FETCHED for _, st in killed_run["states_at_kill"])
    asked = Counter(killed_run["web"].url(r["host"], r["path"]) for r in page_requests(killed_run["requests"]))
    # Asked again only if not committed before the kill (in flight, or not flushed yet).
    committed_before = {r["url"] for r in killed_run["before"] if r["outcome"] == "ok"}
    assert all(asked[u] == 1 for u in committed_before), [u for u in committed_before if asked[u] > 1]
    assert max(asked.values()) <= 2
    # Every page the server answered whole is in some segment's committed rows, or is still to
    # fetch: answered just before the kill and not flushed yet, or written whole by the server
    # while the crawler hung up at the run's end (the server's log cannot tell). A request the
    # crawler hung up on (cut at a segment's end) was handed back without a row: it is due again.
    committed = {r["url"] for r in all_committed(store)}
    whole = {killed_run["web"].url(r["host"], r["path"]) for r in answered(killed_run["requests"])}
    rows = crawldb_rows(store)
    assert whole & committed
    not_committed = whole - committed
    # Still to fetch: known to the crawl DB and not fetched, or a committed page's outlink that
    # no update has merged yet.
    linked = {r["url"] for s in seg.segment_ids(store) for f in seg.files(store, s, seg.OUTLINKS)
              for r in store.read_table(f, columns=["url"]).to_pylist()}
    assert all(rows[u]["status"] == schema.DbStatus.UNFETCHED if u in rows else u in linked
               for u in not_committed), [(u, rows.get(u, {}).get("status")) for u in sorted(not_committed)[:5]]
    assert len(crawldb_urls(store)) == len(rows)


@pytest.mark.web
def test_spacing_holds_across_the_kill(killed_run):
    assert assert_polite(killed_run["requests"]) > 50
