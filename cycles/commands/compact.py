"""``crawl compact``: merge each bucket's deltas into a new base, and the link DB when due.

Update writes per bucket only a delta, the rows its segment changed or added
(docs/incremental.md); readers merge a bucket's deltas over its base, the newest row of a
URL winning (:func:`cycles.tables.crawldb.bucket_source_sql`). Deltas make reading dearer as they
pile up, so a bucket is compacted once its deltas' bytes pass ``db.compact_ratio`` of its
base's, or it has ``db.compact_max_deltas`` of them: its merged rows are written as a new
base, sorted by ``next_fetch`` in row groups of ``db.compact_row_group_rows`` (generate then
skips the row groups that hold nothing due), and the new manifest names that base and no
deltas for the bucket; every other bucket's files are carried over unchanged.

Safety, as every stage that installs a crawl DB version:

- it holds the ``crawldb`` lock (as generate and update do) from reading ``CURRENT`` to the
  swap, so a concurrent generate or update waits or fails, never reads a half-made version;
- it installs a version every ``db.compact_buckets_per_version`` buckets: killed anywhere,
  the crawl DB is the version before or after one such step, and running it again goes on
  with the buckets still due; a bucket's compacted rows do not depend on when it is done
  (the merge is a function of the files), so a resumed compaction ends where an
  uninterrupted one would (tests/test_fault_injection.py);
- memory: one bucket at a time, DuckDB's sort bounded by ``db.duckdb_memory_limit`` (it
  spills past it), plus one row group of Arrow batches being written.

The link DB's pending deltas (``linkdb/pending/``, cycles/update/linkgraph.py) are merged,
and the host graph's PageRank run, when ``update.link_rank_interval_s`` has passed since the
last merge (:func:`cycles.update.linkgraph.merge_pending_links`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Iterator

from cycles import metrics
from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import (BucketFiles, connect, current_buckets, bucket_source_sql, install_version,
                            verify_bucket_file, write_base)
from cycles.storage.store import Manifest, Store, new_id
from cycles.tables.keyindex import has_key_index, write_key_index
from cycles.tables.seenindex import has_index, write_seen_index


@dataclass
class CompactResult:
    buckets: int = 0
    """Buckets compacted."""
    versions: int = 0
    """Crawl DB versions installed (one per ``db.compact_buckets_per_version`` buckets)."""
    rows: int = 0
    """Rows written into new bases."""
    seconds: float = 0.0
    links: dict = field(default_factory=dict)
    """The link DB merge's counters, when it ran (empty otherwise)."""


BASE_PREFIX = "base-"
"""Name of a compacted base (``base-NNNNN.<id>.parquet``): sorted by ``next_fetch``."""


def file_bytes(store: Store, path) -> int:
    return store.fs.get_file_info(str(path)).size or 0


def bucket_due(store: Store, config: Config, bucket: BucketFiles) -> bool:
    """Whether a bucket's deltas are due for compaction (``db.compact_ratio``, ``db.compact_max_deltas``)."""
    if not bucket.deltas:
        return False
    if len(bucket.deltas) >= config.db.compact_max_deltas:
        return True
    deltas = sum(file_bytes(store, d) for d in bucket.deltas)
    return deltas > config.db.compact_ratio * max(1, file_bytes(store, bucket.base))


def due_buckets(store: Store, config: Config, manifest: Manifest, buckets: list[BucketFiles],
                everything: bool = False) -> list[int]:
    """The buckets to compact now: those due; with ``everything``, every bucket with a delta
    or whose base is not a compacted one (written by inject, rebucket or a whole update,
    sorted by host: ``crawl compact --all`` once sorts them by due time) or lacks one of the
    indexes compaction writes beside a base (a base compacted before they existed): the seen
    index (cycles/tables/seenindex.py) and the key index (cycles/tables/keyindex.py); and all of them
    when the crawl DB is of an older schema (a manifest has one schema)."""
    if manifest.schema_version < schema.SCHEMA_VERSION:
        return list(range(len(buckets))) if everything else []
    if everything:
        return [b for b, files in enumerate(buckets)
                if files.deltas or not PurePosixPath(str(files.base)).name.startswith(BASE_PREFIX)
                or not has_key_index(store, files.base) or not has_index(store, files.base)]
    return [b for b, files in enumerate(buckets) if bucket_due(store, config, files)]


def compaction_due(store: Store, config: Config) -> bool:
    """Whether ``crawl compact`` has work (any bucket due, or the link DB's merge): for ``crawl run``."""
    from cycles.update.linkgraph import link_merge_due

    manifest, buckets = current_buckets(store)
    if manifest is not None and due_buckets(store, config, manifest, buckets):
        return True
    return link_merge_due(store, config)


def compact(store: Store, config: Config, *, everything: bool = False, links: bool = True) -> CompactResult:
    """Compact every due bucket (``everything``: every bucket with deltas), installing a
    version every ``db.compact_buckets_per_version`` buckets; then merge the link DB's
    pending deltas when due (``links``)."""
    started = time.monotonic()
    result = CompactResult()
    with store.lock("crawldb", db=config.db):
        while True:
            manifest, buckets = current_buckets(store)
            if manifest is None:
                break
            due = due_buckets(store, config, manifest, buckets, everything)
            if not due:
                break
            if manifest.schema_version < schema.SCHEMA_VERSION:
                batch = due  # one version: a manifest cannot mix schemas
            else:
                batch = due[:config.db.compact_buckets_per_version]
            result.rows += compact_buckets(store, config, manifest, buckets, batch)
            result.buckets += len(batch)
            result.versions += 1
        if links:
            from cycles.update.linkgraph import link_merge_due, merge_pending_links

            if link_merge_due(store, config, forced=everything):
                result.links = dict(merge_pending_links(store, config))
    if result.versions:  # the dashboard's crawl DB size follows the files compaction replaced
        metrics.publish_crawldb(store, config)
    result.seconds = time.monotonic() - started
    return result


def compact_buckets(store: Store, config: Config, manifest: Manifest, buckets: list[BucketFiles],
                    batch: list[int]) -> int:
    """Write a new base for each bucket of ``batch`` (its base and deltas merged) in a new
    version folder and install the version; returns the rows written. The caller holds the
    ``crawldb`` lock."""
    version, folder = store.new_version_dir("crawldb")
    con = connect(store, config)
    bases = [manifest.entry_in_table(manifest.bucket_file_name(b)) for b in range(manifest.buckets)]
    deltas = [tuple(manifest.entry_in_table(n) for n in manifest.delta_names(b)) for b in range(manifest.buckets)]
    rows = 0
    try:
        for bucket in batch:
            for path in buckets[bucket].files:  # DuckDB checks no page checksum: verified first
                verify_bucket_file(store, path)
            name = f"{BASE_PREFIX}{bucket:05d}.{new_id()}.parquet"
            sql = bucket_source_sql(store, con, buckets[bucket], manifest.schema_version)
            rows += write_base(store, con, sql, folder / name, bucket=bucket, buckets=manifest.buckets,
                               row_group_rows=config.db.compact_row_group_rows)
            write_key_index(store, folder / name)  # update's lookups (cycles/tables/keyindex.py)
            write_seen_index(store, con, folder / name)  # generate's seen-sets (cycles/tables/seenindex.py)
            bases[bucket], deltas[bucket] = f"{version}/{name}", ()
    except BaseException:
        store.discard_version("crawldb", version)
        raise
    finally:
        con.close()
    install_version(store, config, manifest, version, manifest.buckets, who="compact", bucket_files=bases,
                    bucket_deltas=deltas)
    return rows


def compact_when_due(store: Store, config: Config, who: str) -> Iterator[str]:
    """``crawl compact`` after an update when a bucket's deltas or the link DB are due
    (``crawl run`` and ``crawl cycle``): the deltas stay a small share of what generate
    reads, and the link DB's ranks at most ``update.link_rank_interval_s`` old."""
    if compaction_due(store, config):
        done = compact(store, config)
        yield (f"{who}: compacted {done.buckets} buckets in {done.seconds:.1f} s"
               + (", link DB merged and ranked" if done.links else ""))


def compact_summary(result: CompactResult) -> Counter:
    """The counters ``crawl compact`` prints (and ``--json`` emits)."""
    counters = Counter({"compact/buckets": result.buckets, "compact/versions": result.versions,
                        "compact/rows": result.rows})
    counters.update(result.links)
    return counters
