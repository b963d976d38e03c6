"""The whole cycle, end to end, judged by what the test web's server saw and what was written.

One crawl of a multi-host test web (regular hosts plus the robots.txt variants and the odd
host) runs cycle after cycle until nothing is due; the module-scoped fixture does it once
and each test checks one promise against the server's request log or the Parquet files.
"""

from __future__ import annotations

from collections import defaultdict

import duckdb
import pyarrow.parquet as pq
import pytest

from cycles.tables.crawldb import current_buckets, read_crawldb
from cycles.commands.cycle import run_cycles
from cycles.commands.inject import inject
from cycles.storage.store import Store
from testweb.harness import TestWeb
from cycles.update.update import update_segment
from tests.conftest import config_for, write_seeds
from tests.support.webclient import key

pytestmark = pytest.mark.web

# Slack for the clocks of two processes on one machine reading time.time().
CLOCK_SLACK_S = 0.005


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    with TestWeb(hosts=8, pages=6, page_bytes=4000, special=True, max_seconds=240) as web:
        store = Store(tmp / "data")
        config = config_for(web)
        seeds = [u for u in web.seeds()]
        inject(store, config, write_seeds(tmp / "seeds.txt", seeds))
        log = list(run_cycles(store, config, cycles=12))
        requests = web.requests()
        yield {"web": web, "store": store, "config": config, "log": log, "requests": requests, "seeds": seeds}


def requested(requests) -> list[tuple[str, str]]:
    return [(r["host_header"].split(":")[0], r["path"]) for r in requests]


def test_ran_at_least_three_cycles_and_stopped_when_nothing_was_due(crawled):
    generated = [line for line in crawled["log"] if "generated" in line]
    assert len(generated) >= 3, crawled["log"]
    assert "stopping" in crawled["log"][-1], crawled["log"]


def test_every_reachable_allowed_page_was_fetched(crawled):
    web = crawled["web"]
    seen = set(requested(crawled["requests"]))
    expected = {key(u) for u in web.expected_reachable(crawled["seeds"])}
    missing = expected - seen
    assert not missing, sorted(missing)[:20]


def test_no_page_fetched_twice(crawled):
    counts = defaultdict(int)
    for host_path in requested(crawled["requests"]):
        counts[host_path] += 1
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, twice


def test_no_disallowed_or_nofollow_path_was_requested(crawled):
    forbidden = {key(u) for u in crawled["web"].must_not_request()}
    assert forbidden, "the test web should have bait URLs"
    hit = forbidden & set(requested(crawled["requests"]))
    assert not hit, hit


def test_host_with_503_robots_got_no_page_request(crawled):
    paths = [path for host, path in requested(crawled["requests"]) if host.startswith("robots-503.")]
    assert paths and set(paths) == {"/robots.txt"}, paths


def test_host_with_404_robots_was_crawled(crawled):
    paths = {path for host, path in requested(crawled["requests"]) if host.startswith("robots-404.")}
    assert "/robots.txt" in paths and len(paths) > 1, paths


def test_requests_to_a_host_never_overlap_and_keep_the_delay(crawled):
    by_host = defaultdict(list)
    for r in crawled["requests"]:
        by_host[r["host"]].append(r)
    checked = 0
    for host, rows in by_host.items():
        rows.sort(key=lambda r: r["t_start"])
        delay = 2.0 if host_name(rows[0]).startswith("robots-delay.") else 1.0
        for prev, nxt in zip(rows, rows[1:]):
            gap = nxt["t_start"] - prev["t_end"]
            assert gap >= delay - CLOCK_SLACK_S, (host_name(prev), prev["path"], nxt["path"], round(gap, 3))
            checked += 1
    assert checked > 50


def host_name(row) -> str:
    return row["host_header"].split(":")[0]


def test_requests_name_the_crawler(crawled):
    agents = {r["user_agent"] for r in crawled["requests"]}
    assert agents == {crawled["config"].fetch.user_agent}


def test_crawl_db_holds_one_row_per_url(crawled):
    table = read_crawldb(crawled["store"])  # bases and deltas merged
    rows, distinct = table.num_rows, len(set(table["url"].to_pylist()))
    assert rows == distinct and rows > 50


def test_every_host_lives_in_one_bucket_and_one_partition(crawled):
    store = crawled["store"]
    _, buckets = current_buckets(store)  # a bucket: its base and deltas
    con = duckdb.connect()
    for bucket, one in enumerate(buckets):
        wrong = con.execute(f"""
            SELECT host FROM read_parquet([{', '.join(repr(str(f)) for f in one.files)}])
            WHERE host_hash % {len(buckets)} != {bucket}""").fetchall()
        assert wrong == []
    for segment in store.segments():
        spread = con.execute(f"""
            SELECT host FROM read_parquet('{store.segment_dir(segment)}/fetchlist/*.parquet', filename=true)
            GROUP BY host HAVING count(DISTINCT filename) > 1""").fetchall()
        assert spread == []


def test_second_update_of_a_segment_changes_nothing(crawled):
    store = crawled["store"]
    before = store.manifest("crawldb")
    segment = store.segments()[0]
    result = update_segment(store, crawled["config"], segment)
    assert not result.applied
    assert store.manifest("crawldb") == before


def test_fetched_pages_are_in_warc_at_the_recorded_offset(crawled):
    from warcio.archiveiterator import ArchiveIterator

    store = crawled["store"]
    segment = store.segments()[0]
    folder = store.segment_dir(segment)
    fetched = pq.read_table(folder / "fetched").to_pylist()
    ok = [r for r in fetched if r["outcome"] == "ok"]
    assert ok
    for row in ok[:10]:
        with open(folder / row["warc_file"], "rb") as fh:
            fh.seek(row["warc_offset"])
            record = next(iter(ArchiveIterator(fh)))
            assert record.rec_type == "response"
            assert record.rec_headers.get_header("WARC-Target-URI") == row["url"]
            assert b"<html" in record.content_stream().read().lower()
