"""Reading and replacing the crawl DB, bucket by bucket.

The crawl DB is split into ``db.buckets`` Parquet files by ``host_hash % buckets``; a host
lives in exactly one. Every stage that changes it (inject, generate, update) goes through
:func:`replace_crawldb`: under the lock, each new bucket is computed by DuckDB from the old
bucket plus the stage's inputs for that bucket, streamed to a new version folder, and the
version is installed by one atomic swap of ``CURRENT``. Memory stays bounded by one
bucket's working set (and DuckDB spills past its memory limit).

A bucket is a base file plus delta files (update writes only what a segment changed,
docs/incremental.md); readers merge them with :func:`bucket_source_sql`, the newest row of a
URL winning, and ``crawl compact`` (cycles/commands/compact.py) folds deltas back into a base.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cycles import clock
from cycles.tables import schema
from cycles.config import Config
from cycles.errors import StageError
from cycles.cluster import executor_for
from cycles.executor import Executor, InProcess, default_executor, share_of_memory
from cycles.storage.sql import literal, literals
from cycles.tables.partitioning import bucket_sql, buckets_of
from cycles.storage.store import Manifest, Store, StorePath, utcnow

CRAWLDB_COLUMNS = ", ".join(schema.CRAWLDB.names)


def progress_bar_wanted() -> bool:
    """Whether DuckDB may draw its progress bar: only when stdout is a terminal. DuckDB
    draws it on stdout with carriage returns once a query runs 2 s; a 100 M-URL update wrote
    200 KB of it into a log, on the line scripts/bench_scale.py parses."""
    return sys.stdout.isatty()


def plain_connection(**settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with DuckDB's defaults (and ``settings``), but a progress bar only
    on a terminal (:func:`progress_bar_wanted`): for the few readers that need none of
    :func:`connect`'s limits (a few hosts' rows, a segment's page list).

    Without ``settings`` it is a cursor on an in-memory database this process keeps
    (:func:`plain_database`), as :func:`connect`'s are: opening a database costs ~12 ms
    (its thread pool), and ``read_crawldb`` opened one per bucket. A cursor's temporary
    tables and registered Arrow tables are its own. With ``settings``: a database of its own."""
    con = new_database(**settings) if settings else plain_database().cursor()
    # A session setting: DuckDB refuses it in connect()'s config ("not a global option").
    con.execute("SET enable_progress_bar = ?", [progress_bar_wanted()])
    return con


def new_database(**settings) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB database (``settings``: its config)."""
    return duckdb.connect(config=settings)


_plain_database: list[tuple[int, duckdb.DuckDBPyConnection]] = []


def plain_database() -> duckdb.DuckDBPyConnection:
    """This process's database for :func:`plain_connection`, opened on first use (and again
    in a forked child: a database is not shared across a fork)."""
    if not _plain_database or _plain_database[0][0] != os.getpid():
        _plain_database[:] = [(os.getpid(), new_database())]
    return _plain_database[0][1]


def connect(store: Store | None, config: Config, workers: int = 1, *,
            own_database: bool = False) -> duckdb.DuckDBPyConnection:
    """The one way to open DuckDB: the configured memory limit and threads, UTC, a progress
    bar only on a terminal (:func:`progress_bar_wanted`).

    Where it spills: with a ``store``, into the store's scratch folder (the stages, which
    write the store anyway), and row order is not kept unless a query asks for it (DuckDB
    needs less memory then). With ``store=None``, into a folder of this process under the
    system temp folder (removed by DuckDB when the connection closes), rows kept in the
    order they were read: for readers that must leave the store byte-identical (``crawl
    status`` and ``crawl sql`` on a read-only store: a backup, a snapshot, another user's
    crawl) and for work without a store (update's outlink preparation).

    ``workers``: how many processes run such connections at once; they split the memory
    limit and the threads.

    The connection is a cursor on a database this process keeps for these settings
    (:func:`shared_database`): opening a DuckDB database starts its thread pool, ~35 ms,
    and a cycle opened nine. A cursor's temporary tables and registered Arrow tables are its
    own, so stages cannot see each other's. ``own_database``: a database of its own instead,
    for callers that create persistent objects (``crawl sql``'s views), which would
    otherwise outlive the call in the shared one.
    """
    memory_limit = share_of_memory(config.db.duckdb_memory_limit, workers)
    threads = max(1, int(config.db.duckdb_threads) // max(1, workers))
    spill = str(store.scratch_dir() if store is not None
                else Path(tempfile.gettempdir()) / f"crawl-duckdb-{os.getpid()}.duckdb-tmp")
    keep_order = store is None
    limits = (memory_limit, int(threads))
    if own_database:
        con = open_database(spill, keep_order)
    else:
        con = shared_database(spill, keep_order).cursor()
        # A session setting: each cursor starts from DuckDB's default.
        con.execute("SET enable_progress_bar = ?", [progress_bar_wanted()])
        if SHARED_LIMITS.get((spill, keep_order)) == limits:
            return con  # the database's limits are this caller's already: two statements saved
        SHARED_LIMITS[(spill, keep_order)] = limits
    # The database's limits, set for this caller: a process runs one stage's work at a time.
    con.execute("SET memory_limit = ?", [memory_limit])
    con.execute("SET threads = ?", [int(threads)])
    return con


SHARED_LIMITS: dict[tuple[str, bool], tuple[str, int]] = {}
"""The memory limit and threads last set on each shared database (by its key in
:data:`SHARED_DATABASES`), which connect() sets only when they change: both are the
database's, not the cursor's. A database opened anew under a key starts without an entry."""


SHARED_DATABASES: dict[tuple[str, bool], duckdb.DuckDBPyConnection] = {}
SHARED_DATABASES_KEPT = 4
"""Spill folders (in practice: stores) with a database kept open per process; the least
recently used is dropped first (its cursors keep it alive until they close)."""


def shared_database(spill: str, keep_order: bool) -> duckdb.DuckDBPyConnection:
    """This process's in-memory database spilling into ``spill``, opened on first use."""
    key = (spill, keep_order)
    if key in SHARED_DATABASES:
        SHARED_DATABASES[key] = SHARED_DATABASES.pop(key)  # most recently used last
        return SHARED_DATABASES[key]
    while len(SHARED_DATABASES) >= SHARED_DATABASES_KEPT:
        SHARED_DATABASES.pop(next(iter(SHARED_DATABASES)))
    SHARED_LIMITS.pop(key, None)
    SHARED_DATABASES[key] = open_database(spill, keep_order)
    return SHARED_DATABASES[key]


def open_database(spill: str, keep_order: bool) -> duckdb.DuckDBPyConnection:
    """A new in-memory database with the settings every connection shares: spill folder,
    UTC, row order kept or not, a progress bar only on a terminal."""
    con = new_database()
    con.execute("SET enable_progress_bar = ?", [progress_bar_wanted()])
    con.execute("SET temp_directory = ?", [str(spill)])
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = ?", [bool(keep_order)])
    return con


bucket_of = bucket_sql
"""SQL for the bucket of a host hash column (cycles/tables/partitioning.py, the one rule)."""


VERIFY_THREADS = 4
"""Bucket files verified side by side (reads and zlib's CRC run without the GIL)."""


def current_bucket_files(store: Store, verify: bool = True) -> tuple[Manifest | None, list[StorePath]]:
    """The installed manifest and its buckets' BASE files, each checked to be readable Parquet
    (its footer: one small read per bucket). A bucket's rows are its base merged with its
    deltas: read them with :func:`current_buckets` and :func:`bucket_source_sql`.

    With ``verify`` every page of every bucket is read and its checksum checked
    (:meth:`Store.verify_parquet`) before a stage lets DuckDB — which checks none — read
    them: a corrupt bucket stops the stage, naming the file, before anything is written.
    generate and update pass ``verify=False`` and have each bucket task of their first
    round verify its own file (:func:`verify_bucket_file`): read here, the whole crawl DB
    went through the coordinator on every cycle (issue #11: 0.7 CPU-s of generate's
    1.5 coordinator CPU-s at 1 M URLs, scripts/bench_cost.py).
    """
    manifest = store.manifest("crawldb")
    if manifest is None:
        return None, []
    files = [store.version_bucket_file("crawldb", manifest, b) for b in range(manifest.buckets)]
    store.check_parquet(files)
    if verify:
        store.verify_parquet(files, threads=min(VERIFY_THREADS, os.cpu_count() or 1))
    return manifest, files


@dataclass(frozen=True)
class BucketFiles:
    """One bucket of the current crawl DB version: its base file and its delta files, oldest
    first (docs/incremental.md). Read it through :func:`bucket_source_sql`, never the base
    alone: a URL's row in the newest delta that holds it replaces the base's."""

    base: StorePath
    deltas: tuple = ()

    @property
    def files(self) -> list[StorePath]:
        return [self.base, *self.deltas]


def as_bucket_files(bucket) -> BucketFiles:
    """``bucket`` as :class:`BucketFiles` (a plain path: a base without deltas)."""
    return bucket if isinstance(bucket, BucketFiles) else BucketFiles(bucket)


def holds_no_rows(store: Store, files: Iterable[StorePath]) -> bool:
    """Whether the Parquet ``files`` hold no row at all, by their footers (every row group's
    count, not only the file's total): a bucket task with nothing to read skips DuckDB, whose
    planning of a bucket's statements (~25 CPU-ms each for update's merge) is most of a small
    crawl's cost when few of its buckets hold hosts. A footer that cannot be read is a
    StoreError naming the file, as DuckDB's read would have been."""
    for path in files:
        footer = store.read_metadata_checked(path)
        if footer.num_rows or any(footer.row_group(i).num_rows for i in range(footer.num_row_groups)):
            return False
    return True


def current_buckets(store: Store, verify: bool = False) -> tuple[Manifest | None, list[BucketFiles]]:
    """The installed manifest and each bucket's base and deltas, every file's footer checked
    (``verify``: every page too, as :func:`current_bucket_files`). The one way readers of the
    crawl DB's rows find its files: generate, update, the views, rebucket, recover."""
    manifest = store.manifest("crawldb")
    if manifest is None:
        return None, []
    buckets = [BucketFiles(store.version_bucket_file("crawldb", manifest, b),
                           store.version_delta_files("crawldb", manifest, b)) for b in range(manifest.buckets)]
    files = [f for bucket in buckets for f in bucket.files]
    store.check_parquet(files)
    if verify:
        store.verify_parquet(files, threads=min(VERIFY_THREADS, os.cpu_count() or 1))
    return manifest, buckets


DELTA_ORDER = "_delta"
"""Column numbering a bucket's deltas while they are merged (higher: newer)."""


def merged_sql(base: str, deltas: list[str], where: str = "") -> str:
    """SQL merging a bucket's base (SQL source) with its deltas (SQL sources, oldest first):
    per URL the row of the newest delta that holds it, else the base's. The deltas are small
    (one segment's changes each) and read whole; the base is streamed once and probed
    against the deltas' URLs (an anti join), so a filter on it (generate's ``next_fetch <=
    $now``) still reaches the Parquet scan and skips row groups by their statistics.

    ``where``: a condition on the merged rows (generate's due time), applied to the base's
    scan and to the newest delta rows; a base row replaced by a delta is dropped whatever
    the condition says of it."""
    if not deltas:
        return f"(SELECT * FROM {base} WHERE {where})" if where else base
    condition = f" WHERE {where}" if where else ""
    numbered = " UNION ALL ".join(f"SELECT *, {i}::INTEGER AS {DELTA_ORDER} FROM {d}" for i, d in enumerate(deltas))
    newest = (f"(SELECT * EXCLUDE ({DELTA_ORDER}) FROM ({numbered}) "
              f"QUALIFY row_number() OVER (PARTITION BY url ORDER BY {DELTA_ORDER} DESC) = 1)")
    if len(deltas) == 1:
        newest = deltas[0]  # one delta holds a URL once (checked_rows)
    return (f"(SELECT * FROM {newest}{condition} UNION ALL BY NAME "
            f"SELECT b.* FROM (SELECT * FROM {base}{condition}) b ANTI JOIN (SELECT url FROM {newest}) d "
            "ON b.url = d.url)")


def bucket_source_sql(store: Store, con: duckdb.DuckDBPyConnection, bucket: BucketFiles,
                      schema_version: int = schema.SCHEMA_VERSION, due: bool = False) -> str:
    """SQL table expression over one bucket's rows: its base merged with its deltas
    (:func:`merged_sql`), in the current schema (``schema_version``: the manifest's).
    ``due``: only the rows due at ``$now`` (``next_fetch <= $now``; the caller binds it),
    a filter DuckDB pushes into the base's Parquet scan, pruning its row groups by their
    ``next_fetch`` statistics (the ones :func:`due_row_groups` names)."""
    bucket = as_bucket_files(bucket)  # a plain file: a base without deltas
    base = store.duckdb_source(con, [bucket.base])
    deltas = [store.duckdb_source(con, [d]) for d in bucket.deltas]
    where = "next_fetch <= $now" if due else ""
    if where and schema_version < schema.SCHEMA_VERSION:
        return f"(SELECT * FROM {upgraded_sql(merged_sql(base, deltas), schema_version)} WHERE {where})"
    return upgraded_sql(merged_sql(base, deltas, where), schema_version)


def buckets_source_sql(store: Store, con: duckdb.DuckDBPyConnection, buckets: list[BucketFiles],
                       schema_version: int = schema.SCHEMA_VERSION) -> str:
    """SQL over several buckets' rows, each merged with its deltas (a URL lives in one bucket)."""
    buckets = [as_bucket_files(b) for b in buckets]
    if all(not b.deltas for b in buckets):
        bases = [b.base for b in buckets]
        return upgraded_sql(store.duckdb_source(con, bases), schema_version)
    parts = [bucket_source_sql(store, con, b, schema_version) for b in buckets]
    return "(" + " UNION ALL BY NAME ".join(f"SELECT * FROM {p}" for p in parts) + ")"


def read_bucket_rows(store: Store, bucket: BucketFiles, schema_version: int = schema.SCHEMA_VERSION,
                     columns: list[str] | None = None) -> pa.Table:
    """One bucket's merged rows as Arrow (small readers and tests), sorted by host, url."""
    con = plain_connection()
    try:
        wanted = ", ".join(columns or schema.CRAWLDB.names)
        return con.sql(f"SELECT {wanted} FROM {bucket_source_sql(store, con, bucket, schema_version)} "
                       "ORDER BY host, url").to_arrow_table()
    finally:
        con.close()


def read_crawldb(store: Store, columns: list[str] | None = None) -> pa.Table:
    """The whole current crawl DB, one row per URL, base and deltas merged (tests, small tools)."""
    manifest, buckets = current_buckets(store)
    if manifest is None:
        return schema.CRAWLDB.empty_table().select(columns or schema.CRAWLDB.names)
    # Only the buckets with rows are read (an empty one adds nothing but a DuckDB query);
    # the first bucket all the same when none has any, for the columns' types.
    holding = [b for b in buckets if not holds_no_rows(store, b.files)] or buckets[:1]
    return pa.concat_tables([read_bucket_rows(store, b, manifest.schema_version, columns) for b in holding])


def due_row_groups(store: Store, path: StorePath, now: dt.datetime) -> tuple[list[int], int]:
    """The row groups of a Parquet file of crawl DB rows that can hold a row due at ``now``
    (smallest ``next_fetch`` at or before it, or no statistics), and how many row groups the
    file has. From the footer alone: on a compacted base (sorted by ``next_fetch``,
    cycles/commands/compact.py) these are the first few; on one sorted by host, all."""
    metadata = store.read_metadata_checked(path)
    column = metadata.schema.to_arrow_schema().get_field_index("next_fetch")
    due = []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics if column >= 0 else None
        if stats is None or not stats.has_min_max or stats.min <= now:
            due.append(group)
    return due, metadata.num_row_groups


@dataclass(frozen=True)
class PagesRead:
    """What :func:`verify_due_pages` checked: row groups read and skipped (every file of a bucket)."""

    read: int
    skipped: int


def verify_due_pages(store: Store, bucket: BucketFiles, now: dt.datetime) -> PagesRead:
    """Check the page checksums of what a due scan of ``bucket`` at ``now`` reads: the base's
    row groups that can hold a due row (:func:`due_row_groups`, every column) and every
    delta whole (small, and read whole by the merge). The row groups it skips are the ones
    DuckDB's scan skips by the same statistics: generate's cost follows what can be due.

    A bad page raises the StoreError of :meth:`Store.verify_parquet` (one line naming the
    file and the repair). The rest of a base is checked by the stages that read it whole
    (update's dedup scan, ``crawl compact``, ``crawl recover``)."""
    groups, total = due_row_groups(store, bucket.base, now)
    read_row_groups(store, bucket.base, groups)
    read = len(groups)
    for delta in bucket.deltas:
        read += store.read_metadata_checked(delta).num_row_groups
        store.verify_parquet([delta])
    return PagesRead(read, total - len(groups))


def read_row_groups(store: Store, path: StorePath, groups: list[int]) -> None:
    """Check the page checksums of ``groups`` of ``path`` (:meth:`Store.verify_row_groups`);
    a bad page is the StoreError every stage gives (the file and its repair)."""
    if groups:
        store.verify_row_groups(path, groups)


def verify_bucket_file(store: Store, path: StorePath) -> None:
    """Check every page checksum of one bucket file (:meth:`Store.verify_parquet`): the
    first thing a stage's first-round bucket task does, before DuckDB (which checks none)
    reads the file. A corrupt file raises a StoreError naming it; the task fails, the
    executor re-raises it in the coordinator, and the stage stops before it commits."""
    store.verify_parquet([path])


def crawldb_source_sql(files: list[StorePath], con: duckdb.DuckDBPyConnection | None = None,
                       store: Store | None = None, schema_version: int = schema.SCHEMA_VERSION) -> str:
    """SQL table expression over the whole crawl DB (all buckets), in the current schema.

    Give ``con`` and ``store`` for a store on S3 (the files are then registered on ``con``);
    without them the files are local paths. ``schema_version``: the manifest's, so that an
    older crawl DB is read upgraded (:func:`upgraded_sql`).
    """
    if not files:
        return "empty_crawldb"
    if any(isinstance(f, BucketFiles) for f in files):  # buckets: each base merged with its deltas
        if store is None:
            store = Store(os.path.dirname(os.path.dirname(os.path.dirname(str(as_bucket_files(files[0]).base)))))
        return buckets_source_sql(store, con, list(files), schema_version)
    if store is not None:
        return upgraded_sql(store.duckdb_source(con, files), schema_version)
    return upgraded_sql(f"read_parquet({literals(files)})", schema_version)


def upgraded_sql(source: str, schema_version: int) -> str:
    """``source`` (crawl DB rows written with ``schema_version``) in the current schema.

    Version 1 kept leases in the rows and had no pattern_hash; version 2 had no unchanged_s. The first stage that
    rewrites such a crawl DB writes it in the current schema, so this costs once.
    """
    if schema_version >= schema.SCHEMA_VERSION:
        return source
    if schema_version < 2:
        source = (f"(SELECT * EXCLUDE (lease_until, lease_segment), {pattern_hash_sql('url')} AS pattern_hash "
                  f"FROM {source})")
    # Version 2 had no unchanged_s: a page refetched before has a history without it (null:
    # its rate stays estimated from the counts); one not refetched yet starts at 0.
    return (f"(SELECT *, CASE WHEN fetch_count <= 1 THEN 0 END::BIGINT AS unchanged_s "
            f"FROM {source})")


def register_empty(con: duckdb.DuckDBPyConnection) -> None:
    con.register("empty_crawldb", schema.CRAWLDB.empty_table())


def new_url_rows_sql(source: str, config: Config) -> str:
    """SQL turning rows (url, host, host_hash, score, depth) into fresh crawl DB rows.

    ``$now`` must be bound to the current time.
    """
    return f"""
        SELECT url, host, host_hash, {pattern_hash_sql('url')} AS pattern_hash, {literal(schema.DbStatus.UNFETCHED)} AS status, $now AS first_seen,
               NULL::TIMESTAMPTZ AS first_fetched, NULL::TIMESTAMPTZ AS last_fetched, $now AS next_fetch,
               {int(config.update.default_interval_s)}::INTEGER AS fetch_interval_s,
               0::SMALLINT AS retries, 0::INTEGER AS fetch_count, 0::INTEGER AS change_count,
               NULL::TIMESTAMPTZ AS last_changed, NULL::SMALLINT AS http_status,
               NULL::VARCHAR AS content_hash, NULL::UBIGINT AS minhash,
               NULL::VARCHAR AS etag, NULL::VARCHAR AS last_modified,
               score::FLOAT AS score, depth::SMALLINT AS depth,
               NULL::VARCHAR AS redirect_to, NULL::VARCHAR AS duplicate_of, NULL::VARCHAR AS error,
               0::BIGINT AS unchanged_s
        FROM {source}"""


BucketQuery = Callable[[duckdb.DuckDBPyConnection, str, int], str]
"""Given a connection, the SQL source of the old bucket and the bucket number, return the
SQL of the new bucket (all CRAWLDB columns). It may register per-bucket inputs on the
connection first."""


@dataclass
class ReplaceResult:
    version: str
    rows: int
    buckets: int


def replace_crawldb(store: Store, config: Config, build_bucket: BucketQuery, *, who: str,
                    applied_segment: str | None = None, now: dt.datetime | None = None,
                    con: duckdb.DuckDBPyConnection | None = None,
                    adds_to: Collection[int] | None = None) -> ReplaceResult:
    """Write a new crawl DB version bucket by bucket in this process, then swap it in.

    The caller must hold ``store.lock('crawldb')``. If anything fails before the swap the
    half-written version is deleted and the old one stays current. (Update runs its
    buckets as tasks instead, with :func:`write_bucket` and :func:`install_version`.)

    ``adds_to``: the buckets ``build_bucket`` may add rows to that the old bucket does not
    hold (None: any). Any other bucket without old rows is written empty without DuckDB
    (:func:`holds_no_rows`): inject's seeds fill few of a new crawl DB's buckets.
    """
    manifest, files = current_buckets(store, verify=True)
    buckets = manifest.buckets if manifest else config.db.buckets
    con = con or connect(store, config)
    register_empty(con)
    version, folder = store.new_version_dir("crawldb")
    rows = 0
    try:
        for bucket in range(buckets):
            if adds_to is not None and bucket not in adds_to and (not files or holds_no_rows(store, files[bucket].files)):
                store.write_batches(store.bucket_file(folder, bucket), iter(()), schema.CRAWLDB)  # stays empty
                continue
            # Base and deltas merged: the version written is whole bases again, without deltas.
            old = bucket_source_sql(store, con, files[bucket], manifest.schema_version) if files else "empty_crawldb"
            sql = build_bucket(con, old, bucket)
            rows += write_bucket(store, con, sql, store.bucket_file(folder, bucket), now,
                                 bucket=bucket, buckets=buckets)
    except BaseException:
        store.discard_version("crawldb", version)
        raise
    install_version(store, config, manifest, version, buckets, who=who, applied_segment=applied_segment)
    return ReplaceResult(version=version, rows=rows, buckets=buckets)


def write_base(store: Store, con: duckdb.DuckDBPyConnection, sql: str, path: StorePath, *, bucket: int,
               buckets: int, row_group_rows: int) -> int:
    """Stream the rows of ``sql`` (a table expression: a bucket's merged rows,
    :func:`bucket_source_sql`) into a compacted base file, sorted
    by ``next_fetch`` (then url) in row groups of ``row_group_rows``: each group's min/max
    ``next_fetch`` then tells generate whether anything in it is due. Rows are checked for
    their bucket as they stream (:func:`checked_bucket`); one row per URL holds by
    construction (:func:`merged_sql` keeps one row per URL of rows that held one each)."""
    reader = con.sql(f"SELECT {CRAWLDB_COLUMNS} FROM {sql} ORDER BY next_fetch, url").to_arrow_reader(64 * 1024)
    return store.write_batches(path, checked_bucket(reader, store.uri_of(path), bucket, buckets), schema.CRAWLDB,
                               row_group_rows)


def checked_bucket(batches: Iterable[pa.RecordBatch], where: str, bucket: int, buckets: int) -> Iterator[pa.RecordBatch]:
    """``batches`` (crawl DB rows in any order), each checked to be of ``bucket`` and to have
    a URL and host (the cheap part of :func:`checked_rows`)."""
    for batch in batches:
        if batch.num_rows:
            url, hashes = batch.column("url"), batch.column("host_hash")
            wrong = np.flatnonzero(buckets_of(hashes, buckets) != bucket)
            if url.null_count or batch.column("host").null_count or hashes.null_count or len(wrong):
                raise StageError(f"bucket {bucket} ({where}) would hold a row without url or host, or of another "
                                 "bucket; nothing was installed and the crawl DB is unchanged; report this as a bug")
        yield batch


def write_bucket(store: Store, con: duckdb.DuckDBPyConnection, sql: str, path: StorePath,
                 now: dt.datetime | None = None, *, bucket: int, buckets: int) -> int:
    """Stream the rows of ``sql`` (all CRAWLDB columns), sorted by host and URL, into one
    bucket file; returns the rows written. ``$now`` in ``sql`` is bound to ``now``.

    The rows are checked as they stream (:func:`checked_rows`): a bucket that would hold a
    URL twice or a host of another bucket is never written, the caller discards the
    version and the crawl DB stays as it was.
    """
    reader = con.sql(f"SELECT {CRAWLDB_COLUMNS} FROM ({sql}) ORDER BY host, url",
                     params={"now": now or clock.now()} if "$now" in sql else None).to_arrow_reader(64 * 1024)
    # write_batches leaves a file even when the bucket is empty.
    return store.write_batches(path, checked_rows(reader, store.uri_of(path), bucket, buckets), schema.CRAWLDB)


def checked_rows(batches: Iterable[pa.RecordBatch], where: str, bucket: int,
                 buckets: int) -> Iterator[pa.RecordBatch]:
    """``batches`` (crawl DB rows sorted by host, url), each checked before it is passed on:
    one row per URL, and every row's ``host_hash`` is its host's and falls in ``bucket``.

    A URL written twice (a join that matched two rows, as the demoted hosts once did) would
    be fetched and counted twice forever; a host in the wrong bucket would be invisible to
    the bucket tasks that look for it. Sorted by (host, url), a URL's rows are adjacent,
    so a vectorised comparison per batch plus the previous batch's last key finds them.
    """
    last: tuple[str, str] | None = None
    for batch in batches:
        if batch.num_rows:
            problem = bucket_violation(batch, last, bucket, buckets)
            if problem:
                raise StageError(f"bucket {bucket} ({where}) would hold {problem}; nothing was installed and "
                                 "the crawl DB is unchanged; if it was written before this check, run "
                                 "`crawl recover --dedupe`, else report this as a bug")
            last = (batch.column("host")[-1].as_py(), batch.column("url")[-1].as_py())
        yield batch


def run_host_hashes(hosts: pa.Array) -> np.ndarray:
    """:func:`cycles.urls.host_hash` of each (non-null) host, as uint64. The same BLAKE2b,
    without the dictionary encoding of ``host_hashes`` (these hosts are distinct already):
    0.18 s instead of 0.29 s for 100 K hosts, the check's main cost."""
    digest = hashlib.blake2b
    packed = b"".join(digest(h.encode("utf-8"), digest_size=8).digest() for h in hosts.to_pylist())
    return np.frombuffer(packed, dtype=">u8").astype(np.uint64)


def bucket_violation(batch: pa.RecordBatch, last: tuple[str, str] | None, bucket: int, buckets: int) -> str:
    """What is wrong with these crawl DB rows of ``bucket`` ("" if nothing); see :func:`checked_rows`."""
    url, host, hashes = batch.column("url"), batch.column("host"), batch.column("host_hash")
    for name, column in (("url", url), ("host", host), ("host_hash", hashes)):
        if column.null_count:
            first = pc.index(pc.is_null(column), True).as_py()
            return f"a row without {name} (URL {url[first].as_py()!r})"
    keys_url = pa.concat_arrays([pa.array([last[1]], pa.string()), url]) if last else url
    keys_host = pa.concat_arrays([pa.array([last[0]], pa.string()), host]) if last else host
    if len(keys_url) > 1:
        twice = pc.and_(pc.equal(keys_url[1:], keys_url[:-1]), pc.equal(keys_host[1:], keys_host[:-1]))
        if pc.any(twice).as_py():
            return f"URL {keys_url[pc.index(twice, True).as_py()].as_py()!r} twice"
    numbers = hashes.to_numpy()
    found = buckets_of(numbers, buckets)
    wrong = np.flatnonzero(found != bucket)
    if len(wrong):
        return f"URL {url[int(wrong[0])].as_py()!r} of another bucket (host_hash % {buckets} = " \
               f"{int(found[wrong[0]])})"
    # host_hash must be its host's: checked once per run of one host (rows are sorted by host).
    starts = np.flatnonzero(np.concatenate(([True], pc.not_equal(host[1:], host[:-1]).to_numpy(zero_copy_only=False))))
    expected = run_host_hashes(host.take(pa.array(starts)))
    bad = np.flatnonzero(expected != numbers[starts])
    if len(bad):
        return f"URL {url[int(starts[bad[0]])].as_py()!r} whose host_hash is not its host's"
    return ""


def install_version(store: Store, config: Config, manifest: Manifest | None, version: str, buckets: int, *,
                    who: str, applied_segment: str | None = None, bucket_files: list[str] | None = None,
                    bucket_deltas: list[tuple[str, ...]] | None = None) -> None:
    """Make a fully written crawl DB version current (the atomic swap of ``CURRENT``).

    ``bucket_files``: each bucket's file name in the version folder, when the bucket tasks
    wrote attempt-unique names (update); the new manifest names them, and the folder's
    other bucket files — attempts of a retried task that were not committed — are deleted
    first, so that the seal and ``crawl recover`` see only the committed ones.
    ``bucket_deltas``: each bucket's delta files (names as ``bucket_files``'), when the
    version is made of bases and deltas (docs/incremental.md).
    """
    applied = tuple(manifest.applied_segments) if manifest else ()
    if applied_segment:
        applied = (applied + (applied_segment,))[-config.db.applied_segments_kept:]
    deltas = tuple(tuple(d) for d in bucket_deltas or ())
    if bucket_files:
        own = [n for n in list(bucket_files) + [n for d in deltas for n in d] if "/" not in n]
        own += [n.split("/", 1)[1] for n in list(bucket_files) + [n for d in deltas for n in d]
                if n.startswith(version + "/")]
        remove_uncommitted_attempts(store, store.path("crawldb", version), own)
    store.install("crawldb", Manifest(
        version=version, buckets=buckets, schema_version=schema.SCHEMA_VERSION,
        written_at=utcnow().isoformat(), written_by=f"{who}@{socket.gethostname()}:{os.getpid()}",
        applied_segments=applied, bucket_files=tuple(bucket_files or ()),
        bucket_deltas=deltas if any(deltas) else ()), keep=config.db.keep_versions)


def remove_uncommitted_attempts(store: Store, folder: StorePath, committed: list[str]) -> int:
    """Delete the bucket files in ``folder`` that ``committed`` does not name; returns how many.

    A task attempt still running after its retry committed (a zombie) may write its file
    later: readers go by the manifest's names, so such a file is never read, and it goes
    with its version folder when that is pruned.
    """
    keep = set(committed)
    stray = [path for path in store.list(folder, "*.parquet") if path.name not in keep]
    for path in stray:
        store.delete(path)
    return len(stray)


def bucket_executor(store: Store, config: Config, files: list[StorePath],
                    executor: Executor | None = None) -> Executor:
    """The executor for a stage's bucket tasks: the one given, else the cluster of
    ``db.executor`` (cycles/cluster.py), else in-process for a small crawl DB (by the row
    counts in the Parquet footers), else a local pool."""
    if executor is not None:
        return executor
    executor = executor_for(store, config)  # db.executor: a cluster runs every bucket task
    if executor is not None:
        return executor
    if config.db.processes == 1 or sum(store.read_metadata(f).num_rows for f in files) < config.db.small_db_rows:
        return InProcess()
    return default_executor(config.db.processes)


def url_pattern_sql(column: str) -> str:
    """SQL for a URL's *pattern*: long hex runs → H, digit runs → N, query values removed.

    ``http://h/cal/2024/05?view=day&sid=9f8e7d6c5b4a`` → ``http://h/cal/N/N?view=&sid=``.
    URLs of an endless calendar, an ID sequence or a session parameter share a pattern,
    so traps can be throttled by pattern instead of throttling the whole host.
    """
    return (f"regexp_replace(regexp_replace(regexp_replace({column}, '[0-9a-fA-F]{{8,}}', 'H', 'g'), "
            f"'[0-9]+', 'N', 'g'), '=[^&]*', '=', 'g')")


def pattern_hash_sql(column: str) -> str:
    """SQL for the crawl DB's ``pattern_hash``: 64 bits of the MD5 of the URL's pattern.

    Stored once per URL when it is added, so generate and update group by a number
    instead of running three regular expressions over every row each cycle. MD5, not
    DuckDB's ``hash()``, because the value must not change with the DuckDB version.
    """
    return f"md5_number_lower({url_pattern_sql(column)})"


_PATTERN_STEPS = ((re.compile(r"[0-9a-fA-F]{8,}"), "H"), (re.compile(r"[0-9]+"), "N"), (re.compile(r"=[^&]*"), "="))


def url_pattern_hash(url: str) -> int:
    """:func:`pattern_hash_sql` in Python, for one URL (the fetch worker's inline trap caps,
    cycles/fetch/discovery.py): the same three replacements, and DuckDB's
    ``md5_number_lower`` (the digest's last 8 bytes, little-endian). tests/fetch/test_discovery.py
    checks the two agree."""
    for pattern, replacement in _PATTERN_STEPS:
        url = pattern.sub(replacement, url)
    return int.from_bytes(hashlib.md5(url.encode("utf-8", "surrogatepass")).digest()[8:], "little")
