"""A resumed partition keeps its killed run's host state (cycles/fetch/resumed_hosts.py).

The killed run committed its only fetch-list URL (``a.test/go``, a redirect to
``b.test/landing``) and the target's row (429), and its ``hosts/`` file holds ``b.test``'s
Retry-After (``not_before``) and Crawl-delay. Resumed, the partition has nothing left to
fetch — and used to rewrite the file from its (no) slots, so a later segment listing
``b.test`` (``crawl run`` generates one before this segment is updated) could ask it at
once. Now the rows are carried over, and every host the killed run may have asked after
its last flush (its fetch-list hosts, its rows' hosts and redirect targets, its claimed new
hosts) gets "last asked at the resume". No network: nothing is left to request.
"""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.fetch.fetch import fetch_segment
from cycles.tables.newhosts import claim_body, create_if_absent
from cycles.tables.hostdb import load_host_state, read_host_file
from cycles.storage.store import Store
from tests.support.fetching import make_segment

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def fetched_row(url: str, host: str, outcome: str, **values) -> dict:
    row = dict.fromkeys(schema.FETCHED.names)
    row.update(url=url, host=host, outcome=outcome, fetched_at=NOW - dt.timedelta(seconds=20), **values)
    return row


def host_row(host: str, **values) -> dict:
    row = dict.fromkeys(schema.HOSTS.names)
    row.update(host=host, **values)
    return row


def killed_partition(store: Store) -> str:
    """A segment whose one partition committed everything, then was killed (no stats file)."""
    segment = make_segment(store, ["http://a.test/go"])
    seg_dir = store.segment_dir(segment)
    store.write_table(seg_dir / seg.FETCHED / "part-00000-c000001.parquet", pa.Table.from_pylist([
        fetched_row("http://a.test/go", "a.test", "redirect", http_status=301, redirect_to="http://b.test/landing"),
        fetched_row("http://b.test/landing", "b.test", "server_error", http_status=429, error="HTTP 429"),
        fetched_row("http://new.test/x", "new.test", "ok", http_status=200),
    ], schema=schema.FETCHED), schema.FETCHED)
    store.write_table(seg_dir / seg.OUTLINKS / "part-00000-c000001.parquet", schema.OUTLINKS.empty_table(),
                      schema.OUTLINKS)
    store.write_table(seg.hosts_file(seg_dir, 0), pa.Table.from_pylist([
        host_row("a.test", last_request_end=NOW - dt.timedelta(seconds=19), crawl_delay_s=1.0),
        host_row("b.test", last_request_end=NOW - dt.timedelta(seconds=18), not_before=NOW + dt.timedelta(seconds=600),
                 crawl_delay_s=7.0, robots_status=200, robots_fetched_at=NOW - dt.timedelta(seconds=19),
                 robots_body=b"User-agent: *\nCrawl-delay: 7\n"),
    ], schema=schema.HOSTS), schema.HOSTS)
    # A new host this partition claimed and may have asked after the flush (no row of it yet),
    # and one another partition claimed.
    create_if_absent(store, seg.newhost_claim_file(seg_dir, "claimed.test"), claim_body(segment, 0, "claimed.test"))
    create_if_absent(store, seg.newhost_claim_file(seg_dir, "theirs.test"), claim_body(segment, 1, "theirs.test"))
    seg.write_marker(store, seg.Fetching(segment))
    return segment


def test_a_resumed_partition_keeps_the_killed_runs_host_rows_and_marks_what_it_may_have_asked(store):
    segment = killed_partition(store)
    config = Config()
    config.fetch.processes = 1
    config.fetch.progress_s = 0.0
    resumed_at = time.time()
    result = fetch_segment(store, config, segment, 1)
    assert result.counters.get("fetch/requests", 0) == 0
    assert result.counters["fetch/resumed_hosts_carried"] == 4

    rows = {r["host"]: r for r in read_host_file(seg.hosts_file(store.segment_dir(segment), 0), store).to_pylist()}
    assert set(rows) == {"a.test", "b.test", "new.test", "claimed.test"}  # not another partition's claim
    # The killed run's Retry-After, Crawl-delay and robots.txt are kept.
    b = load_host_state(store, {"b.test"}, segment)["b.test"]
    assert b["not_before"] == NOW + dt.timedelta(seconds=600)
    assert b["crawl_delay_s"] == 7.0 and b["robots_body"] == b"User-agent: *\nCrawl-delay: 7\n"
    # Each host it may have asked after its last flush: asked until the resume started.
    for host in rows:
        assert rows[host]["last_request_end"].timestamp() >= resumed_at - 0.001, host


def test_a_partition_that_was_never_killed_writes_only_its_slots(store):
    """The carried rows are a resumed partition's only: a fresh one starts from nothing."""
    segment = make_segment(store, [])
    config = Config()
    config.fetch.processes = 1
    config.fetch.progress_s = 0.0
    result = fetch_segment(store, config, segment, 1)
    assert "fetch/resumed_hosts_carried" not in result.counters
    path = seg.hosts_file(store.segment_dir(segment), 0)
    assert not store.exists(path) or read_host_file(path, store).num_rows == 0


def test_a_hostile_location_the_killed_run_committed_does_not_stop_the_resume(store):
    """A hostile server's Location is recorded as it came (``redirect_to``): a resume that
    reads it back to mark the hosts asked must skip what names no host, not crash on it
    (a crash here would fail the partition on every retry)."""
    segment = killed_partition(store)
    seg_dir = store.segment_dir(segment)
    store.write_table(seg_dir / seg.FETCHED / "part-00000-c000002.parquet", pa.Table.from_pylist([
        fetched_row(f"http://a.test/bad{i}", "a.test", "redirect", http_status=301, redirect_to=location)
        for i, location in enumerate(["http://[a/", "/relative", "", "mailto:x@y.test", "http://"])
    ], schema=schema.FETCHED), schema.FETCHED)
    store.write_table(seg_dir / seg.OUTLINKS / "part-00000-c000002.parquet", schema.OUTLINKS.empty_table(),
                      schema.OUTLINKS)
    config = Config()
    config.fetch.processes = 1
    config.fetch.progress_s = 0.0
    result = fetch_segment(store, config, segment, 1)
    assert result.counters.get("fetch/requests", 0) == 0
    rows = read_host_file(seg.hosts_file(seg_dir, 0), store).to_pylist()
    assert {r["host"] for r in rows} == {"a.test", "b.test", "new.test", "claimed.test"}
