"""``crawl rebucket``: split the crawl DB into a different number of host-hash buckets.

The crawl DB is one Parquet file per bucket, a host in bucket ``host_hash % buckets``
(cycles/tables/crawldb.py); every stage reads the count from the manifest (``crawldb/CURRENT``),
so ``db.buckets`` in the config only sets it when the crawl DB is created. Choose it so
that one bucket's working set fits DuckDB's memory limit (docs/cluster.md, "Choosing the bucket
count"); this command changes it when the crawl has grown.

Like every stage that changes the crawl DB it writes a new version beside the current
one, under the ``crawldb`` lock, and installs it by the atomic swap of ``CURRENT``; if
anything fails first, the half-written version is deleted and the old one stays. Each new
bucket is one DuckDB query over the old bucket files that can hold its hosts, sorted by
host, url as every stage writes them, and streamed to its file: memory stays bounded by
one bucket, as in generate and update. Rows are copied unchanged (in the schema they were
written in: a rebucket changes the layout only) and the list of applied segments is kept,
so updates stay idempotent.

It is safe while segments are generated but not yet updated: fetch partitions are a
segment's own (its assignment file, fixed in its fetch list), not crawl DB
buckets; leases are held by URL, not by bucket; update reads the bucket count from the
manifest it finds and matches each result to its row by URL. So a rebucket may run
between any two stages (it takes the same lock as generate and update).

The host DB (``hostdb/``, per-host robots.txt and last request time) is bucketed the
same way but is left as it is: its readers take its bucket count from its own manifest,
not the crawl DB's, so it stays readable with the old count, and the next update's merge
writes it with the new count (cycles/tables/hostdb.py). Rewriting it here too would only
move that work from the next update to this command.

Which old files a new bucket needs: a host in new bucket ``b`` of ``N`` lies in old bucket
``o`` of ``M`` only if ``o ≡ b (mod gcd(M, N))``. So going to a multiple or a divisor of
the current count (8 → 16, 8 → 4) reads each old file once or a few times; a coprime count
(8 → 5) scans every old file for every new bucket.
"""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass

from cycles.config import Config
from cycles.tables import schema
from cycles.tables.crawldb import bucket_of, buckets_source_sql, checked_rows, connect, current_buckets
from cycles.errors import StageError
from cycles.storage.parquet import renamed_schema
from cycles.storage.sql import ident
from cycles.storage.store import Manifest, Store, utcnow

MAX_BUCKETS = 100_000
"""Bucket files are named ``bucket-NNNNN.parquet``."""


@dataclass
class RebucketResult:
    old_version: str
    version: str
    old_buckets: int
    buckets: int
    rows: int
    changed: bool
    reason: str = ""


def old_buckets_for(bucket: int, old: int, new: int) -> list[int]:
    """The old buckets (of ``old``) that can hold hosts of new bucket ``bucket`` (of ``new``)."""
    g = math.gcd(old, new)
    return [o for o in range(old) if o % g == bucket % g]


def rebucket(store: Store, config: Config, buckets: int) -> RebucketResult:
    """Rewrite the crawl DB with ``buckets`` host-hash buckets and install it."""
    if not 1 <= int(buckets) <= MAX_BUCKETS:
        raise StageError(f"rebucket: the bucket count must be between 1 and {MAX_BUCKETS}, not {buckets}; "
                         "see docs/cluster.md, 'Choosing the bucket count'")
    buckets = int(buckets)
    with store.lock("crawldb", db=config.db):
        manifest, old_buckets = current_buckets(store, verify=True)
        files = [b.base for b in old_buckets]
        if manifest is None:
            raise StageError(f"rebucket: there is no crawl DB in {store.uri}; run `crawl inject` first")
        if manifest.buckets == buckets:
            return RebucketResult(manifest.version, manifest.version, buckets, buckets, 0, False,
                                  reason=f"the crawl DB already has {buckets} buckets; nothing changed")
        # Rows are copied in the schema they were written in (the manifest keeps its
        # schema_version): the first stage that rewrites them upgrades them, as usual.
        file_schema = renamed_schema(store.read_metadata(files[0]).schema.to_arrow_schema())  # read renamed
        con = connect(store, config)
        if any(b.deltas for b in old_buckets):  # deltas are in the current schema, as their base then
            file_schema = schema.CRAWLDB
            old_rows = con.sql(f"SELECT count(*) FROM {buckets_source_sql(store, con, old_buckets)}").fetchall()[0][0]
        else:
            old_rows = sum(store.read_metadata(f).num_rows for f in files)
        columns = ", ".join(ident(name) for name in file_schema.names)
        version, folder = store.new_version_dir("crawldb")
        rows = 0
        try:
            for bucket in range(buckets):
                sources = [old_buckets[o] for o in old_buckets_for(bucket, manifest.buckets, buckets)]
                # Each old bucket's base merged with its deltas, in the schema it was written in.
                reader = con.sql(f"""
                    SELECT {columns} FROM {buckets_source_sql(store, con, sources, schema.SCHEMA_VERSION)}
                    WHERE {bucket_of('host_hash', buckets)} = {bucket}
                    ORDER BY host, url""").to_arrow_reader(64 * 1024)
                # write_batches leaves a file even when the bucket is empty; the rows are
                # checked as update's are (one row per URL, each in its bucket).
                path = store.bucket_file(folder, bucket)
                rows += store.write_batches(path, checked_rows(reader, store.uri_of(path), bucket, buckets),
                                            file_schema)
            if rows != old_rows:  # every host in exactly one new bucket: nothing lost or doubled
                raise StageError(f"rebucket: wrote {rows} rows from {old_rows} in crawl DB version "
                                 f"{manifest.version}; nothing was changed; report this as a bug")
        except BaseException:
            store.discard_version("crawldb", version)
            raise
        store.install("crawldb", Manifest(
            version=version, buckets=buckets, schema_version=manifest.schema_version,
            written_at=utcnow().isoformat(), written_by=f"rebucket@{socket.gethostname()}:{os.getpid()}",
            applied_segments=tuple(manifest.applied_segments)), keep=config.db.keep_versions)
    return RebucketResult(manifest.version, version, manifest.buckets, buckets, rows, True)
