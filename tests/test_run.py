"""``crawl run`` (cycles/commands/run.py): overlapping cycles keep the crawl exact and polite.

- generate with ``RunMode(exclude_hosts_in_flight=True)`` leaves out whole hosts of segments not fetched
  yet (fast tier, no web);
- an in-process run on a small web generates segments while another is fetched, never puts
  a host in two segments in flight, fetches every reachable URL exactly once, writes one
  crawl DB row per URL, and keeps every host's spacing across segments;
- a run stopped by SIGTERM exits 4, one killed by SIGKILL mid-way is finished by the next
  ``crawl run``: no URL lost, no duplicate row, spacing held across the kill; ``--seconds``
  ends a run on time with exit 0.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from cycles.tables import segment as seg
from cycles.config import Config
from cycles.generate.generate import generate
from cycles.generate.mode import RunMode
from cycles.commands.inject import inject
from cycles.commands.run import RunState, run_crawl
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.processes import committed, toml_config
from tests.support.fetching import assert_polite, crawldb_rows, fast_config
from tests.support.processes import crawldb_urls, fetchlist_hosts, wait_for


def fetchlist_urls(store: Store, segment: str) -> set[str]:
    return {r["url"] for f in seg.files(store, segment, seg.FETCHLIST) for r in store.read_table(f).to_pylist()}


def test_generate_leaves_out_every_host_of_a_segment_in_flight(store, tmp_path):
    config = Config()
    hosts = {f"h{h}.test" for h in range(6)}
    urls = [f"http://{h}/p/{k}.html" for h in sorted(hosts) for k in range(3)]
    inject(store, config, write_seeds(tmp_path / "seeds.txt", urls))
    first = generate(store, config, top_n=4)
    in_first = fetchlist_hosts(store, first.segment)
    # Some host of the first segment has URLs left (4 URLs cannot take 3 each of 2 hosts).
    left = {u for u in urls if u not in fetchlist_urls(store, first.segment)}
    assert {u.split("/")[2] for u in left} & in_first
    second = generate(store, config, top_n=100, mode=RunMode(exclude_hosts_in_flight=True))
    assert fetchlist_hosts(store, second.segment) == hosts - in_first
    # A segment fetched (not yet updated) is no longer in flight: its hosts come back, not its URLs.
    for segment in (first.segment, second.segment):
        seg.write_marker(store, seg.Fetched(segment))
    third = generate(store, config, top_n=100, mode=RunMode(exclude_hosts_in_flight=True))
    assert fetchlist_urls(store, third.segment) == left - fetchlist_urls(store, second.segment)


# --- one small crawl, in process ----------------------------------------------------------
HOSTS, PAGES = 6, 3


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    with TestWeb(hosts=HOSTS, pages=PAGES, page_bytes=2000, special=False, max_seconds=150) as web:
        store = Store(tmp / "data")
        # One process: spawning a pool per segment costs seconds on a loaded machine.
        config = fast_config(web, processes=1)
        config.fetch.flush_s = 1.0
        config.db.buckets = 2
        inject(store, config, write_seeds(tmp / "seeds.txt", web.seeds()))
        state = RunState()
        # Small segments (top_n) leave hosts out of each, for the next one to take while it
        # is fetched (generate_ahead: the mode in which two segments are in flight at once).
        started = time.monotonic()
        log = list(run_crawl(store, config, seconds=120, top_n=8, state=state, generate_ahead=True))
        yield {"web": web, "store": store, "log": log, "state": state, "requests": web.requests(),
               "seconds": time.monotonic() - started}


@pytest.mark.web
def test_the_run_ends_when_nothing_is_due_and_everything_is_updated(overlapped):
    store, state = overlapped["store"], overlapped["state"]
    assert state.stopped_by == "nothing due", overlapped["log"]
    assert {s for s, st in seg.states(store)} == set(state.generated)
    assert all(st == seg.State.UPDATED for _, st in seg.states(store)), seg.states(store)
    assert state.updated == sorted(state.updated) == sorted(state.generated)  # applied in generation order


@pytest.mark.web
def test_segments_were_generated_and_updated_while_another_was_fetched(overlapped):
    store = overlapped["store"]
    ids = seg.segment_ids(store)
    fetched = {s: seg.read_marker(store, s, seg.Fetched) for s in ids}
    overlaps = updates = 0
    for k, nxt in zip(ids, ids[1:]):
        generated = seg.read_marker(store, nxt, seg.Generated)
        if parse_time(generated.generated_at) < parse_time(fetched[k].fetched_at):
            overlaps += 1
    for prev, k in zip(ids, ids[1:]):
        # Updated while k was in flight: after k was generated, before k's fetch ended
        # (the marker is the update's last write; its updated_at is when it began).
        updated = dt.datetime.fromtimestamp(os.path.getmtime(store.root / seg.SEGMENTS / prev / seg.Updated.FILE),
                                            dt.timezone.utc)
        if parse_time(seg.read_marker(store, k, seg.Generated).generated_at) < updated < parse_time(fetched[k].fetched_at):
            updates += 1
    assert overlaps >= 2 and updates >= 1, (overlaps, updates, overlapped["log"])
    assert any("while fetching" in line for line in overlapped["log"])


@pytest.mark.web
def test_no_host_was_fetched_by_two_segments_at_once(overlapped):
    """A segment generated while another is in flight may hold its hosts (generate_ahead
    goes on with them), and is then fetched only once that one has ended."""
    store = overlapped["store"]
    ids = seg.segment_ids(store)
    shared = 0
    for i, earlier in enumerate(ids):
        done = parse_time(seg.read_marker(store, earlier, seg.Fetched).fetched_at)
        for later in ids[i + 1:]:
            if parse_time(seg.read_marker(store, later, seg.Generated).generated_at) < done:
                if fetchlist_hosts(store, earlier) & fetchlist_hosts(store, later):
                    shared += 1
                    assert parse_time(seg.read_marker(store, later, seg.Fetching).started_at) >= done, (earlier, later)
    assert shared >= 1


@pytest.mark.web
def test_every_reachable_url_was_fetched_once_and_has_one_row(overlapped):
    web, store = overlapped["web"], overlapped["store"]
    asked = Counter(web.url(r["host"], r["path"]) for r in overlapped["requests"] if r["path"] != "/robots.txt")
    assert set(asked) == web.expected_reachable()
    assert max(asked.values()) == 1, [u for u, n in asked.items() if n > 1]
    rows = crawldb_rows(store)
    assert len(crawldb_urls(store)) == len(rows)  # no URL has two rows
    assert all(rows[u]["last_fetched"] is not None for u in web.expected_reachable())


@pytest.mark.web
def test_host_spacing_held_across_overlapping_segments(overlapped):
    assert assert_polite(overlapped["requests"]) >= HOSTS * PAGES


# --- stopped by SIGTERM, killed by SIGKILL, finished by the next run ----------------------
KILL_HOSTS, KILL_PAGES = 6, 3


def crawl(store: Store, config, *args) -> subprocess.Popen:
    # One link level a segment (no discovery inside the fetch): the crawl then takes several
    # segments, so that updates overlap later fetches and the kill finds segments in several states.
    return subprocess.Popen([sys.executable, "-m", "cycles", "--data", str(store.root), "--config", str(config),
                             "-s", "fetch.follow_outlinks_depth=0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd())


def committed_rows(store: Store) -> list[dict]:
    return [r for s in seg.segment_ids(store) for r in committed(store, s)]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run-crash")
    with TestWeb(hosts=KILL_HOSTS, pages=KILL_PAGES, page_bytes=2000, special=False, max_seconds=170) as web:
        store = Store(tmp / "data")
        config = tmp / "crawl.toml"
        toml_config(web, config)
        # Two fetch processes: the run's one pool (cycles/commands/run.py FetchPool) is killed and signalled too.
        with open(config, "a") as fh:
            fh.write("\n[db]\nbuckets = 2\n")
        cfg = Config()
        cfg.db.buckets = 2
        inject(store, cfg, write_seeds(tmp / "seeds.txt", web.seeds()))
        # 1. SIGTERM once the first pages are committed: commits, exits 4.
        first = crawl(store, config, "run", "--top-n", "12")
        try:
            wait_for(first, lambda: len(committed_rows(store)) >= 3)
            first.send_signal(signal.SIGTERM)
            term_out, term_err = first.communicate(timeout=60)
        finally:
            first.kill()
        # 2. SIGKILL in the middle of a later fetch, with segments in several states.
        second = crawl(store, config, "run", "--top-n", "12")
        try:
            wait_for(second, lambda: len(seg.segment_ids(store)) >= 3 and len(committed_rows(store)) >= 12)
            second.send_signal(signal.SIGKILL)
            second.wait()
        finally:
            second.kill()
        states_at_kill = seg.states(store)
        before = committed_rows(store)
        # 3. The next run finishes the crawl.
        third = crawl(store, config, "run", "--top-n", "12", "--seconds", "120")
        try:
            out, err = third.communicate(timeout=150)
        finally:
            third.kill()
        # 4. A bounded run on a crawl with nothing due: exit 3 at once.
        idle = crawl(store, config, "run", "--seconds", "30")
        idle_out, idle_err = idle.communicate(timeout=60)
        yield {"web": web, "store": store, "term": (first.returncode, term_out, term_err),
               "states_at_kill": states_at_kill, "before": before, "third": (third.returncode, out, err),
               "idle": (idle.returncode, idle_err), "requests": web.requests()}


@pytest.mark.web
def test_sigterm_commits_and_exits_4(crashed):
    code, out, err = crashed["term"]
    assert code == 4, err
    assert "Traceback" not in err and "stopped by SIGTERM" in err, err


@pytest.mark.web
def test_the_run_after_a_kill_completes_the_crawl(crashed):
    code, out, err = crashed["third"]
    assert code == 0, err
    assert "stopped (nothing due)" in out, out
    assert any(st in seg.PENDING for _, st in crashed["states_at_kill"]), crashed["states_at_kill"]
    store = crashed["store"]
    # Nothing pending; a generate killed midway leaves an incomplete folder that leases nothing.
    assert not [s for s, st in seg.states(store) if st in seg.PENDING], seg.states(store)
    code, err = crashed["idle"]
    assert code == 3, err


@pytest.mark.web
def test_segments_were_updated_while_the_next_was_fetched(crashed):
    store = crashed["store"]
    ids = [s for s, st in seg.states(store) if st == seg.State.UPDATED]
    overlapped = 0
    for k, nxt in zip(ids, ids[1:]):
        updated = dt.datetime.fromtimestamp(os.path.getmtime(store.root / seg.SEGMENTS / k / seg.Updated.FILE),
                                            dt.timezone.utc)
        if parse_time(seg.read_marker(store, nxt, seg.Fetching).started_at) < updated:
            overlapped += 1
    assert overlapped >= 2, (overlapped, ids)


@pytest.mark.web
def test_no_url_lost_and_no_duplicate_row_after_the_kill(crashed):
    web, store = crashed["web"], crashed["store"]
    urls = crawldb_urls(store)
    assert len(urls) == len(set(urls))
    rows = crawldb_rows(store)
    assert web.expected_reachable() <= set(rows)
    assert all(rows[u]["last_fetched"] is not None and rows[u]["status"] == "fetched"
               for u in web.expected_reachable()), [u for u in web.expected_reachable() if rows[u]["status"] != "fetched"]
    # Asked again only if not committed before the kill (in flight or not yet flushed).
    asked = Counter(web.url(r["host"], r["path"]) for r in crashed["requests"] if r["path"] != "/robots.txt")
    assert set(asked) == web.expected_reachable()
    assert all(asked[r["url"]] == 1 for r in crashed["before"] if r["outcome"] == "ok")
    assert max(asked.values()) <= 2


@pytest.mark.web
def test_host_spacing_held_across_the_kill_and_the_segments(crashed):
    assert assert_polite(crashed["requests"]) >= KILL_HOSTS * KILL_PAGES


def test_a_long_tail_web_has_a_few_big_hosts_and_links_only_to_pages_that_exist():
    from testweb.web import Web

    web = Web(hosts=40, pages=200, page_bytes=500, special=False, tail=True)
    sizes = [web.pages_of(i) for i in range(40)]
    assert sizes[0] == 200 and sizes == sorted(sizes, reverse=True) and sizes[-1] <= 10
    reachable = web.expected_reachable()
    assert len(reachable) >= sum(sizes)  # every page of every host, and nothing beyond them
    assert all(int(u.rsplit("/", 1)[1][:-5]) < web.pages_of(int(u.split("//h")[1].split(".")[0]))
               for u in reachable if "/p/" in u)


def test_crawl_run_has_help_with_an_example():
    from typer.testing import CliRunner

    from cycles.commands.cli import app

    result = CliRunner().invoke(app, ["run", "--help"])
    assert result.exit_code == 0 and "Example: crawl run --seconds" in result.output
    assert "--generate-ahead" in result.output


def test_a_thin_segment_is_fetched_only_while_the_update_before_it_runs(store):
    """A segment with few hosts, generated before the fetched one's update, is cut at about
    the update's duration (cycles/commands/run.py ``thin_segment_seconds``); any other keeps the limit."""
    from cycles.commands.run import fetch_config, thin_segment_seconds

    def marker(hosts: int) -> str:
        segment = store_new_id()
        store.segment_dir(segment, must_exist=False).mkdir(parents=True)
        seg.write_marker(store, seg.Generated(segment, generated_at="2026-01-01T00:00:00+00:00", urls=hosts,
                                              hosts=hosts, partitions=1, lease_until="2999-01-01T00:00:00+00:00"))
        return segment

    from cycles.storage.store import new_id as store_new_id

    fetched = marker(200)
    seg.write_marker(store, seg.Fetched(fetched))
    thin, wide = marker(4), marker(120)
    state = RunState()
    assert thin_segment_seconds(store, thin, state) is None  # no update measured yet
    state.update_seconds += [3.0, 6.5, 4.0]
    assert thin_segment_seconds(store, thin, state) == 6.5
    assert thin_segment_seconds(store, wide, state) is None
    config = Config()
    config.fetch.max_duration_s = 15.0
    cut, note = fetch_config(store, config, thin, state)
    # Ended by the coordinator when the update ends (tests/test_run_coordinator.py), at most twice 6.5 s.
    assert cut.fetch.max_duration_s == 13.0 and "thin" in note and config.fetch.max_duration_s == 15.0
    state.update_seconds.append(0.1)
    assert thin_segment_seconds(store, thin, state) == 4.0
    # Once the fetched segment is updated, nothing is waiting: no segment is thin.
    seg.write_marker(store, seg.Updated(fetched))
    assert fetch_config(store, config, thin, state)[0] is config
