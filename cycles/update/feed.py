"""The indexer feed: each update publishes the new or changed, indexable pages it merged.

A batch is ``pages/<segment id>.parquet`` (schema.PAGES), one per updated segment, written
atomically just before the crawl DB swap; readers consume batches in id order through a cursor
(cycles/tables/pages.py). A page is published when its fetch stored content (outcome ok), it is
not a duplicate or near-duplicate, its meta robots does not say noindex, and its text is
new to us or differs from the last stored version.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.tables.crawldb import plain_connection
from cycles.storage.store import Store
from cycles.storage.sql import literal


def feed_candidates(con: duckdb.DuckDBPyConnection, db_source: str, pages: pa.Table, dedup) -> pa.Table:
    """(url, feed_status) of this segment's pages to publish."""
    con.register("feed_pages", pages)
    con.register("feed_marks", dedup.marks)
    return con.sql(f"""
        SELECT p.url, CASE WHEN db.content_hash IS NULL THEN 'new' ELSE 'changed' END AS feed_status
        FROM feed_pages p JOIN {db_source} db ON p.url = db.url
        WHERE p.content_hash IS DISTINCT FROM db.content_hash
          AND p.url NOT IN (SELECT url FROM feed_marks)""").to_arrow_table()


def write_feed_batch(store: Store, segment: str, seg_dir, changed: pa.Table, counters: Counter,
                     con: duckdb.DuckDBPyConnection | None = None) -> str | None:
    """Write the segment's feed batch; returns its name (None when nothing is new).

    Pass update's connection (``con``): its memory limit and spill folder bound the sort.
    """
    files = seg.output_files(store, seg_dir, seg.FETCHED)
    if not files or changed.num_rows == 0:
        return None
    con = con or plain_connection()
    con.register("changed", changed)
    # Streamed from DuckDB into the file: the batch carries every published page's text,
    # so it is not sorted (sorting 7 M texts ran DuckDB out of memory at 100 M URLs); rows
    # come in fetch order, grouped by partition and host.
    reader = con.sql(f"""
        SELECT f.url, f.host, f.fetched_at, c.feed_status AS status, f.http_status, f.content_hash, f.minhash,
               f.title, f.text, 'segments/{segment}/' || f.warc_file AS warc_file, f.warc_offset, f.warc_length,
               {literal(segment)} AS segment
        FROM {store.duckdb_source(con, files)} f JOIN changed c ON f.url = c.url
        WHERE f.outcome = 'ok' AND NOT coalesce(f.noindex, false)""").to_arrow_reader(16 * 1024)

    def counted(batches):
        for batch in batches:
            counters["feed/changed"] += pc.sum(pc.equal(batch["status"], "changed")).as_py() or 0
            yield batch
    published = store.write_batches(store.path("pages", f"{segment}.parquet"), counted(reader), schema.PAGES)
    counters["feed/noindex"] += changed.num_rows - published
    counters["feed/published"] += published
    return f"{segment}.parquet"
