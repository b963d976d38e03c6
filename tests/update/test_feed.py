"""cycles/update/feed.py: which of a segment's pages the indexer feed publishes, and the
batch it writes (pages/<segment>.parquet). Inputs are written by hand, as fetch and dedup
would leave them."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from types import SimpleNamespace

import duckdb
import pyarrow as pa

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.storage.store import Store
from cycles.update.feed import feed_candidates, write_feed_batch

SEGMENT = "20260101T000000-feed"
FETCHED_AT = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def candidates(pages: dict[str, str], db: dict[str, str | None], marked: list[str] = ()) -> dict[str, str]:
    """url -> feed_status for this segment's ``pages`` (url -> content hash) against the
    crawl DB's hashes (``db``: url -> hash, None for never stored) and dedup's ``marked`` URLs."""
    con = duckdb.connect()
    con.register("db", pa.table({"url": list(db), "content_hash": pa.array(list(db.values()), pa.string())}))
    page_table = pa.table({"url": list(pages), "content_hash": list(pages.values())})
    dedup = SimpleNamespace(marks=pa.table({"url": pa.array(list(marked), pa.string())}))
    out = feed_candidates(con, "db", page_table, dedup)
    return dict(zip(out["url"].to_pylist(), out["feed_status"].to_pylist()))


def test_new_and_changed_pages_are_candidates_unchanged_ones_are_not():
    got = candidates({"u/new": "h1", "u/changed": "h2", "u/same": "h3"},
                     {"u/new": None, "u/changed": "old", "u/same": "h3"})
    assert got == {"u/new": "new", "u/changed": "changed"}


def test_duplicates_marked_by_dedup_are_not_published():
    got = candidates({"u/a": "h1", "u/copy": "h1"}, {"u/a": None, "u/copy": None}, marked=["u/copy"])
    assert got == {"u/a": "new"}


def fetched_row(url: str, outcome: str = "ok", noindex: bool | None = False) -> dict:
    return {"url": url, "host": "a.test", "outcome": outcome, "fetched_at": FETCHED_AT, "http_status": 200,
            "title": f"title of {url}", "text": f"text of {url}", "content_hash": f"hash-{url}", "minhash": 7,
            "noindex": noindex, "warc_file": "warc/part-00000.warc.gz", "warc_offset": 10, "warc_length": 20}


def write_fetched(store: Store, rows: list[dict]):
    seg_dir = seg.segment_dir(store, SEGMENT, must_exist=False)
    store.write_table(seg_dir / seg.FETCHED / "part-00000.parquet",
                      pa.Table.from_pylist(rows, schema=schema.FETCHED), schema.FETCHED)
    return seg_dir


def changed(statuses: dict[str, str]) -> pa.Table:
    return pa.table({"url": list(statuses), "feed_status": list(statuses.values())})


def test_the_batch_holds_the_candidates_fetch_stored_and_may_index(store):
    seg_dir = write_fetched(store, [fetched_row("http://a.test/new"), fetched_row("http://a.test/changed"),
                                    fetched_row("http://a.test/noindex", noindex=True),
                                    fetched_row("http://a.test/failed", outcome="network_error"),
                                    fetched_row("http://a.test/unchanged")])
    counters = Counter()
    name = write_feed_batch(store, SEGMENT, seg_dir, changed({
        "http://a.test/new": "new", "http://a.test/changed": "changed",
        "http://a.test/noindex": "new", "http://a.test/failed": "changed"}), counters)
    assert name == f"{SEGMENT}.parquet"
    batch = store.read_table(store.path("pages", name), schema.PAGES)
    rows = {r["url"]: r for r in batch.to_pylist()}
    assert set(rows) == {"http://a.test/new", "http://a.test/changed"}
    new = rows["http://a.test/new"]
    assert new["status"] == "new" and rows["http://a.test/changed"]["status"] == "changed"
    assert new["text"] == "text of http://a.test/new" and new["content_hash"] == "hash-http://a.test/new"
    # The WARC path is made relative to the store root, so one ranged read finds the record.
    assert new["warc_file"] == f"segments/{SEGMENT}/warc/part-00000.warc.gz"
    assert (new["warc_offset"], new["warc_length"], new["segment"]) == (10, 20, SEGMENT)
    # Dropped rows are counted, not lost silently (a failed fetch counts with noindex).
    assert counters == Counter({"feed/published": 2, "feed/changed": 1, "feed/noindex": 2})


def test_nothing_new_writes_no_batch(store):
    seg_dir = write_fetched(store, [fetched_row("http://a.test/1")])
    counters = Counter()
    assert write_feed_batch(store, SEGMENT, seg_dir, changed({}), counters) is None
    assert not store.exists(store.path("pages", f"{SEGMENT}.parquet"))
    assert counters == Counter()


def test_a_segment_without_fetched_files_writes_no_batch(store):
    seg_dir = seg.segment_dir(store, SEGMENT, must_exist=False)
    assert write_feed_batch(store, SEGMENT, seg_dir, changed({"http://a.test/1": "new"}), Counter()) is None
