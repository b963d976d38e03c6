"""cycles/tables/leases.py: which segments' fetch lists lease their URLs, and the SQL over them.
Segments are written by hand (markers and fetch list files), as generate would leave them."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.tables.leases import leased_urls_sql, live_lease_files
from cycles.storage.store import Store

NOW = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
HOUR = dt.timedelta(hours=1)


def make_segment(store: Store, segment: str, urls: list[str], lease_until: dt.datetime | None,
                 *later: seg.Marker, generated: bool = True) -> None:
    """A segment with a one-partition fetch list of ``urls``, its generated marker (unless
    ``generated`` is False: an interrupted generate) and the ``later`` markers."""
    seg_dir = seg.segment_dir(store, segment, must_exist=False)
    rows = [{"url": u, "host": "a.test", "host_hash": 1, "score": 1.0, "depth": 0} for u in urls]
    store.write_table(seg.fetchlist_file(seg_dir, 0), pa.Table.from_pylist(rows, schema=schema.FETCHLIST),
                      schema.FETCHLIST)
    if generated:
        until = lease_until.isoformat() if lease_until is not None else None
        seg.write_marker(store, seg.Generated(segment, urls=len(urls), partitions=1, lease_until=until))
    for marker in later:
        seg.write_marker(store, marker)


def leased(store: Store) -> set[str]:
    con = duckdb.connect()
    sql = leased_urls_sql(store, con, live_lease_files(store, NOW))
    return {row[0] for row in con.sql(f"SELECT url FROM {sql}").fetchall()}


def test_a_generated_segment_leases_its_urls_until_the_lease_runs_out(store):
    make_segment(store, "20260101T000000-a", ["http://a.test/1", "http://a.test/2"], NOW + HOUR)
    assert leased(store) == {"http://a.test/1", "http://a.test/2"}
    make_segment(store, "20260101T000001-b", ["http://a.test/3"], NOW)  # runs out exactly now
    make_segment(store, "20260101T000002-c", ["http://a.test/4"], NOW - HOUR)
    assert leased(store) == {"http://a.test/1", "http://a.test/2"}


def test_fetching_and_fetched_segments_keep_their_lease(store):
    make_segment(store, "s1", ["http://a.test/1"], NOW + HOUR, seg.Fetching("s1"))
    make_segment(store, "s2", ["http://a.test/2"], NOW + HOUR, seg.Fetching("s2"), seg.Fetched("s2"))
    assert leased(store) == {"http://a.test/1", "http://a.test/2"}


def test_updated_and_abandoned_segments_release_their_urls(store):
    make_segment(store, "s1", ["http://a.test/1"], NOW + HOUR, seg.Updated("s1"))
    make_segment(store, "s2", ["http://a.test/2"], NOW + HOUR, seg.Abandoned("s2", reason="test"))
    make_segment(store, "s3", ["http://a.test/3"], NOW + HOUR)
    assert [f.parent.parent.name for f in live_lease_files(store, NOW)] == ["s3"]
    assert leased(store) == {"http://a.test/3"}


def test_an_interrupted_generate_leases_nothing(store):
    make_segment(store, "s1", ["http://a.test/1"], None, generated=False)
    assert seg.state(store, "s1") == seg.State.INCOMPLETE
    assert live_lease_files(store, NOW) == []


def test_a_marker_without_a_lease_time_leases_nothing(store):
    # Markers of versions before leases: no lease_until, so nothing is held back.
    make_segment(store, "s1", ["http://a.test/1"], None)
    assert live_lease_files(store, NOW) == []


def test_no_lease_files_is_an_empty_table(store):
    assert live_lease_files(store, NOW) == []
    con = duckdb.connect()
    sql = leased_urls_sql(store, con, [])
    assert con.sql(f"SELECT count(*) FROM {sql}").fetchall() == [(0,)]
    # It joins like any table of URLs (generate and status use it in NOT IN / anti-joins).
    assert con.sql(f"SELECT 'x' WHERE 'x' NOT IN (SELECT url FROM {sql})").fetchall() == [("x",)]


def write_fetched(store: Store, segment: str, urls: list[str]) -> None:
    """A committed fetched chunk of ``segment`` holding ``urls`` (as the fetch writes them)."""
    rows = [{"url": u, "host": "a.test", "outcome": "ok"} for u in urls]
    store.write_table(seg.segment_dir(store, segment) / seg.FETCHED / "part-00000-c000001.parquet",
                      pa.Table.from_pylist(rows, schema=schema.FETCHED), schema.FETCHED)


def test_urls_fetched_outside_the_fetch_list_are_leased_until_the_update(store):
    # Discovery inside the fetch fetched /9, in no fetch list; until the segment's update
    # the crawl DB may hold it as a new, due URL (added by an earlier segment's update):
    # generate must not list it again.
    make_segment(store, "s1", ["http://a.test/1"], NOW + HOUR, seg.Fetching("s1"))
    write_fetched(store, "s1", ["http://a.test/1", "http://a.test/9"])
    assert leased(store) == {"http://a.test/1", "http://a.test/9"}
    seg.write_marker(store, seg.Fetched("s1"))
    assert leased(store) == {"http://a.test/1", "http://a.test/9"}
    seg.write_marker(store, seg.Updated("s1"))
    assert leased(store) == set()


def test_a_generated_segment_has_no_fetched_rows_to_lease(store):
    make_segment(store, "s1", ["http://a.test/1"], NOW + HOUR)
    assert [f.parent.name for f in live_lease_files(store, NOW)] == [seg.FETCHLIST]
