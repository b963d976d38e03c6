"""The host DB: per-host state (last request time, robots.txt) merged from each segment.

Update folds a segment's ``hosts/`` output (cycles/fetch/hoststate.py writes it) into a new
host DB version by the one merge rule (``MERGE_SQL``, its table in hoststate.py); fetch
reads it back at the start of a cycle.

The host DB is split like the crawl DB: ``host_hash % buckets``, one Parquet file per
bucket sorted by host, the count taken from the crawl DB's manifest (``db.buckets`` before
there is a crawl DB). The merge runs bucket by bucket in DuckDB — the old bucket file plus
the segment's rows of that bucket, streamed into the new bucket file — so its memory is
bounded by one bucket, not by the host DB. The segment's rows are first routed into one
local file per bucket (a streamed pass over its ``hosts/`` files). When the old host DB has
another bucket count (written before the split as one ``hosts.parquet``, or the crawl DB was
rebucketed since), its files are routed the same way once, and the new version has the
crawl DB's count again.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cycles import schema
from cycles import segment as seg
from cycles.config import Config
from cycles.crawldb import connect
# MERGE_SQL: the one merge rule of host rows (its table is in cycles/fetch/hoststate.py); fetch
# merges unmerged segments with the same SQL.
from cycles.fetch.hoststate import (HOSTS_COLUMNS, MERGE_SQL, SCAN_BATCH_ROWS, conform, host_buckets, hostdb_files,
                                    open_host_file)
from cycles.store import Manifest, Store, StorePath, new_id, utcnow

ROUTE_OPEN_FILES = 1024
"""At most this many bucket files are open at once while routing (more buckets: more passes)."""


def hostdb_buckets(store: Store, config: Config) -> int:
    """The bucket count a new host DB version gets: the crawl DB's."""
    crawl = store.manifest("crawldb")
    return crawl.buckets if crawl is not None else config.db.buckets


def route_host_files(store: Store, paths: list[StorePath], buckets: int, folder) -> dict[int, str]:
    """Split host rows into one local Parquet file per bucket (current schema), streaming:
    batch by batch, at most ``ROUTE_OPEN_FILES`` files open. Returns bucket → file, only for
    buckets that got rows."""
    routed: dict[int, str] = {}
    for first in range(0, buckets, ROUTE_OPEN_FILES):
        last = min(buckets, first + ROUTE_OPEN_FILES)
        writers: dict[int, pq.ParquetWriter] = {}
        try:
            for path in paths:
                with store.fs.open_input_file(str(path)) as fh:
                    for batch in open_host_file(fh).iter_batches(batch_size=SCAN_BATCH_ROWS, use_threads=False):
                        table = conform(batch)
                        if not table.num_rows:
                            continue
                        of = host_buckets(table["host"], buckets)
                        order = np.argsort(of, kind="stable")
                        present, starts = np.unique(of[order], return_index=True)
                        ends = np.append(starts[1:], len(order))
                        for bucket, start, end in zip(present.tolist(), starts.tolist(), ends.tolist()):
                            if not first <= bucket < last:
                                continue
                            if bucket not in writers:
                                routed[bucket] = os.path.join(folder, f"bucket-{bucket:05d}.parquet")
                                writers[bucket] = pq.ParquetWriter(routed[bucket], schema.HOSTS, compression="lz4")
                            writers[bucket].write_table(table.take(pa.array(order[start:end])))
        finally:
            for writer in writers.values():
                writer.close()
    return routed


def _local_source(paths: list[str]) -> str:
    quoted = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
    return f"SELECT {HOSTS_COLUMNS} FROM read_parquet([{quoted}])"


def merge_hostdb(store: Store, config: Config, segment: str) -> int:
    """Fold the segment's host state into a new host DB version, bucket by bucket; returns
    hosts held."""
    manifest = store.manifest("hostdb")
    old_files = hostdb_files(store, manifest) if manifest else []
    buckets = hostdb_buckets(store, config)
    seg_files = seg.files(store, segment, seg.HOSTS)
    # The old files are read in place when they are this layout in the current schema;
    # otherwise (another count, or columns added since) they are routed like the segment's.
    in_place = bool(old_files) and manifest.buckets == buckets and len(old_files) == buckets and \
        store.read_metadata(old_files[0]).schema.to_arrow_schema().names == schema.HOSTS.names
    staging = store.scratch_dir() / f"hostdb-{new_id()}"
    staging.mkdir(parents=True)
    con = connect(store, config)
    version, folder = store.new_version_dir("hostdb")
    rows = 0
    try:
        (staging / "segment").mkdir()
        seg_routed = route_host_files(store, seg_files, buckets, str(staging / "segment"))
        old_routed: dict[int, str] = {}
        if old_files and not in_place:
            (staging / "old").mkdir()
            old_routed = route_host_files(store, old_files, buckets, str(staging / "old"))
        for bucket in range(buckets):
            parts = []
            if in_place:
                parts.append(f"SELECT {HOSTS_COLUMNS} FROM {store.duckdb_source(con, [old_files[bucket]])}")
            elif bucket in old_routed:
                parts.append(_local_source([old_routed[bucket]]))
            if bucket in seg_routed:
                parts.append(_local_source([seg_routed[bucket]]))
            path = store.bucket_file(folder, bucket)
            if not parts:
                rows += store.write_batches(path, iter(()), schema.HOSTS)  # an empty bucket still has its file
                continue
            reader = con.sql(MERGE_SQL.format(source=" UNION ALL ".join(parts))).to_arrow_reader(16 * 1024)
            rows += store.write_batches(path, reader, schema.HOSTS)
    except BaseException:
        store.discard_version("hostdb", version)
        raise
    finally:
        con.close()
        shutil.rmtree(staging, ignore_errors=True)
    store.install("hostdb", Manifest(version=version, buckets=buckets, schema_version=schema.SCHEMA_VERSION,
                                     written_at=utcnow().isoformat(), written_by="update"),
                  keep=config.db.keep_versions)
    return rows
