"""The host DB: per-host state that outlives a cycle, a table shared by the stages like the
crawl DB. Fetch reads it (when a host was last asked, when it may be asked next, its
robots.txt), update writes a new version of it, status shows it.

What a row holds: when we last asked a host (``last_request_end``), when we may ask it next
(``not_before``: Retry-After, back-off, delays), and its robots.txt. Each fetch writes its
segment's ``hosts/`` output (schema.HOSTS); update folds it into the host DB
(:func:`merge_hostdb`). A fetch also reads the ``hosts/`` output of segments fetched but not
yet updated (:func:`load_host_state`), so two fetches in a row without an update in between
still keep a host's spacing. Rows of one host from several files are merged by one rule,
``MERGE_SQL`` (its table below), on both paths.

Layout: like the crawl DB, the host DB is split into buckets by ``host_hash % buckets``
(cycles.urls.host_hash of the host name), one Parquet file each,
``hostdb/<version>/bucket-NNNNN.parquet``, rows sorted by host; ``hostdb/CURRENT`` (its
Manifest) records the count. Update writes it with the crawl DB's bucket count (``db.buckets``
before there is a crawl DB), but readers take the count from the host DB's own manifest, so a
host DB with another count (after ``crawl rebucket``, until the next update) or a host DB
written before the split (one ``hosts.parquet``, buckets=1) is read as it is. A worker asking
about some hosts reads only the files of their buckets, and from those only the rows of those
hosts: no process holds the whole host DB.

The merge runs bucket by bucket in DuckDB — the old bucket file plus the segment's rows of
that bucket, streamed into the new bucket file — so its memory is bounded by one bucket, not
by the host DB. The segment's rows are first routed into one file per bucket and ``hosts/``
file (:func:`route_host_file`, a streamed pass over it). When the old host DB has another
bucket count, its files are routed the same way once, and the new version has the crawl DB's
count again. Both are tasks (one per file, then one per bucket) that update runs on its
executor: only the choosing and the swap of ``hostdb/CURRENT`` stay in its coordinator.

Robots.txt is kept twice: the latest answer (``robots_status``, ``robots_body``,
``robots_fetched_at``, and the validators ``robots_etag`` / ``robots_last_modified`` a
conditional GET sends once the copy expires) and the last *good* one (``robots_good_*``: a
2xx or 4xx), with ``robots_errors_since`` marking an unbroken run of errors. Host files
written before these columns (or ``not_before``) existed are read with them null.
"""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cycles.tables import schema
from cycles.tables import segment as seg
from cycles.config import Config
from cycles.tables.crawldb import connect, holds_no_rows, plain_connection
from cycles.tables.partitioning import BucketTask, buckets_of
from cycles.errors import StoreError
from cycles.storage.store import Manifest, Store, StorePath, read_parquet_checked, utcnow
from cycles.urls import host_hashes


def hostdb_files(store: Store, manifest: Manifest) -> list[StorePath]:
    """The files of a host DB version, file ``i`` holding the hosts of bucket ``i``.

    One bucket: whatever single file the version holds (``bucket-00000.parquet``, or the
    ``hosts.parquet`` of a host DB written before the split)."""
    folder = store.path("hostdb", manifest.version)
    if manifest.buckets > 1:
        return [store.bucket_file(folder, b) for b in range(manifest.buckets)]
    files = store.version_files("hostdb", manifest)
    if len(files) != 1:
        raise StoreError(f"host DB version {store.uri_of(folder)} holds {len(files)} Parquet files, not 1 as "
                         f"its manifest (buckets=1) says; point {store.uri_of(store.path('hostdb', 'CURRENT'))} "
                         "at an intact version, or remove hostdb/ (robots.txt is then fetched again)")
    return files


def host_buckets(hosts: pa.Array | pa.ChunkedArray | Iterable[str], buckets: int) -> np.ndarray:
    """The bucket (``host_hash % buckets``) of each host, as an int64 array."""
    if not isinstance(hosts, (pa.Array, pa.ChunkedArray)):
        hosts = pa.array(list(hosts), pa.string())
    return buckets_of(host_hashes(hosts), buckets)


def segment_host_files(store: Store, include_segment: str | None = None) -> list[StorePath]:
    """The ``hosts/`` outputs of segments not yet merged by update (and of ``include_segment``)."""
    files: list[StorePath] = []
    for segment, state in seg.states(store):
        if state in seg.PENDING or segment == include_segment:
            files += seg.files(store, segment, seg.HOSTS)
    return files


ROBOTS_LATEST = ("robots_status", "robots_fetched_at", "robots_body", "robots_etag", "robots_last_modified",
                 "crawl_delay_s", "robots_errors_since")
ROBOTS_GOOD = ("robots_good_status", "robots_good_fetched_at", "robots_good_body")

HOSTS_COLUMNS = ", ".join(schema.HOSTS.names)

# The one merge rule of host rows, used by update (merge_hostdb, bucket by bucket)
# and by fetch (merge_host_rows: host DB rows plus segments not yet updated). Two copies of it
# once disagreed on crawl_delay_s, so a host's delay depended on which path read it last.
#
#   column                     rule
#   host                       the key
#   last_request_end           max (wall clock)
#   not_before                 max (wall clock): the most cautious "not before" wins
#   robots_status, _body,      all from one row: the one with the newest robots_fetched_at
#   _etag, _last_modified,     (crawl clock; rows without it are not robots answers). The
#   crawl_delay_s,             delay comes from robots.txt's Crawl-delay, so it belongs to the
#   robots_errors_since,       answer it came from. Never compared with a wall-clock time.
#   robots_fetched_at
#   robots_good_status,        all from the row with the newest robots_good_fetched_at
#   _good_body, _good_fetched_at
#   dns_checked_at, _expires_at, all from the row with the newest dns_checked_at (wall clock):
#   _addresses, _error,        the latest lookup's answer or failure, with its expiry or back-off
#   _failures                  (cycles/fetch/dns.py)
#   tls_failures, tls_error,   all from the row with the newest tls_checked_at (wall clock;
#   tls_checked_at             rows without it know nothing of TLS: cycles/fetch/tls.py)
#
# Ties (two rows with the same newest time) go to the greatest row, column by column in the
# order of the struct below (a larger crawl_delay_s first; NULL counts as greatest): an
# arbitrary but fixed choice, so the result does not depend on the order rows arrive in or on
# how they were grouped into earlier merges. max() of a struct does this in one aggregate.
MERGE_SQL = """
    SELECT host, last_request_end, not_before,
           latest.robots_status, latest.robots_fetched_at, latest.robots_body, latest.robots_etag,
           latest.robots_last_modified, latest.crawl_delay_s,
           good.robots_good_status, good.robots_good_fetched_at, good.robots_good_body,
           latest.robots_errors_since,
           dns.dns_checked_at, dns.dns_expires_at, dns.dns_addresses, dns.dns_error, dns.dns_failures,
           tls.tls_failures, tls.tls_error, tls.tls_checked_at
    FROM (
        SELECT host, max(last_request_end) AS last_request_end, max(not_before) AS not_before,
               max({{'dns_checked_at': dns_checked_at, 'dns_expires_at': dns_expires_at,
                    'dns_addresses': dns_addresses, 'dns_error': dns_error,
                    'dns_failures': dns_failures}}) FILTER (WHERE dns_checked_at IS NOT NULL) AS dns,
               max({{'robots_fetched_at': robots_fetched_at, 'crawl_delay_s': crawl_delay_s,
                    'robots_errors_since': robots_errors_since, 'robots_status': robots_status,
                    'robots_etag': robots_etag, 'robots_last_modified': robots_last_modified,
                    'robots_body': robots_body}}) FILTER (WHERE robots_fetched_at IS NOT NULL) AS latest,
               max({{'robots_good_fetched_at': robots_good_fetched_at, 'robots_good_status': robots_good_status,
                    'robots_good_body': robots_good_body}}) FILTER (WHERE robots_good_fetched_at IS NOT NULL) AS good,
               max({{'tls_checked_at': tls_checked_at, 'tls_failures': tls_failures,
                    'tls_error': tls_error}}) FILTER (WHERE tls_checked_at IS NOT NULL) AS tls
        FROM ({source}) GROUP BY host)
    ORDER BY host"""
"""Host rows of ``source`` (a SQL table expression in schema.HOSTS) merged per host, in
schema.HOSTS column order, sorted by host. The rule: the table above."""

_connection: tuple[int, duckdb.DuckDBPyConnection] | None = None
_merge_lock = threading.Lock()


def _merge_connection() -> duckdb.DuckDBPyConnection:
    """This process's DuckDB connection for merge_host_rows (one thread: the rows of a few
    hosts). Kept, because a new connection costs ~40 ms and a redirect to a host not in the
    fetch list merges that one host's rows; made again in a forked child."""
    global _connection
    if _connection is None or _connection[0] != os.getpid():
        con = plain_connection(threads=1)
        con.execute("SET TimeZone = 'UTC'")
        _connection = (os.getpid(), con)
    return _connection[1]


def merge_host_rows(tables: list[pa.Table]) -> dict[str, dict]:
    """Latest knowledge per host, by MERGE_SQL: the same rule, the same code as update's."""
    tables = [conform(t) for t in tables if t.num_rows]
    if not tables:
        return {}
    # One query at a time: `crawl run` fetches in its main thread (a new host's slot reads
    # its rows) while its coordinator thread updates and generates; a DuckDB connection
    # used by two threads at once raises "connection is busy".
    with _merge_lock:
        con = _merge_connection()
        con.register("host_rows", pa.concat_tables(tables))
        try:
            merged = con.sql(MERGE_SQL.format(source=f"SELECT {HOSTS_COLUMNS} FROM host_rows")).to_arrow_table()
        finally:
            con.unregister("host_rows")
    return {row["host"]: row for row in merged.cast(schema.HOSTS).to_pylist()}


def conform(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Host rows in the current schema: columns added since they were written are null."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    for name in schema.HOSTS.names:
        if name not in table.column_names:
            table = table.append_column(schema.HOSTS.field(name), pa.nulls(table.num_rows, schema.HOSTS.field(name).type))
    return table.select(schema.HOSTS.names).cast(schema.HOSTS)


def read_host_file(path: StorePath, store: Store | None = None) -> pa.Table:
    """One hosts file in the current schema; columns added since it was written are null.

    ``store`` given: read through it (needed for S3); else ``path`` is a local file."""
    return conform(store.read_table(path) if store is not None else read_parquet_checked(path))


SCAN_BATCH_ROWS = 16 * 1024
"""Rows decoded at a time when a hosts file is scanned."""


def open_host_file(fh) -> pq.ParquetFile:
    """A hosts file opened for scanning: column chunks are read through a 1 MiB buffer, page
    by page, not whole (one row group of robots.txt bodies can hold hundreds of MiB: a host
    DB written before the split is one row group of up to a million hosts)."""
    return pq.ParquetFile(fh, buffer_size=1 << 20, pre_buffer=False)


def row_groups_holding(meta: pq.FileMetaData, wanted: list[str]) -> list[int]:
    """Row groups whose host range (by their statistics) may hold one of ``wanted`` (sorted)."""
    column = meta.schema.to_arrow_schema().get_field_index("host")
    groups = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            groups.append(i)
            continue
        at = bisect.bisect_left(wanted, stats.min)
        if at < len(wanted) and wanted[at] <= stats.max:
            groups.append(i)
    return groups


def read_host_rows(store: Store, path: StorePath, hosts: list[str], whole: bool = False) -> pa.Table:
    """The rows of ``hosts`` in one hosts file, in the current schema.

    Streamed: batch by batch, each filtered before the next is read, and row groups whose
    host range holds none of them are skipped (bucket files are sorted by host), so only
    the matching rows are ever held.

    ``whole``: the file is read in one request first, for a file its writer may replace
    while we read (a segment's ``hosts/part-N``, rewritten at every flush and at a resume).
    On S3 a Parquet file is read in ranged GETs — the footer, then the row groups it points
    at — and a PUT between two of them gave the footer of one version and the pages of the
    next: "not a readable Parquet file" failed a resumed fetch on S3 (tests/test_s3.py). One
    GET sees one version, as a local file's rename does."""
    wanted = sorted(hosts)
    if not wanted:
        return schema.HOSTS.empty_table()
    value_set = pa.array(wanted, pa.string())
    parts = []
    try:
        with (open_whole(store, path) if whole else store.fs.open_input_file(str(path))) as fh:
            parquet = open_host_file(fh)
            groups = row_groups_holding(parquet.metadata, wanted)
            if groups:
                for batch in parquet.iter_batches(batch_size=SCAN_BATCH_ROWS, row_groups=groups, use_threads=False):
                    batch = batch.filter(pc.is_in(batch.column("host"), value_set=value_set))
                    if batch.num_rows:
                        parts.append(conform(batch))
    except FileNotFoundError:
        raise StoreError(f"{store.uri_of(path)} is missing; point {store.uri_of(store.path('hostdb', 'CURRENT'))} "
                         "at an intact version, or remove hostdb/ (robots.txt is then fetched again)") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"{store.uri_of(path)} is not a readable Parquet file ({exc}); restore it, or remove "
                         "its folder and rerun the stage that wrote it") from None
    return pa.concat_tables(parts) if parts else schema.HOSTS.empty_table()


def open_whole(store: Store, path: StorePath) -> pa.BufferReader:
    """The file's bytes, read in one request (one version of an object being replaced)."""
    with store.fs.open_input_stream(str(path)) as stream:
        return pa.BufferReader(stream.read())


REPLACED_READ_ATTEMPTS = 5
"""Reads of a file being replaced before its error is believed (:func:`read_replaced_host_rows`)."""


def read_replaced_host_rows(store: Store, path: StorePath, hosts: list[str]) -> pa.Table:
    """:func:`read_host_rows` of a file its writer replaces while we read (a segment's
    ``hosts/part-N``): read whole, and read again when what came back is not a whole
    Parquet file — an S3-compatible server that is not atomic for a reader during a PUT
    (moto's is not) serves a part of the new object. A file still unreadable after
    :data:`REPLACED_READ_ATTEMPTS` reads (0.5 s) is corrupt: its one-line error stands."""
    for attempt in range(1, REPLACED_READ_ATTEMPTS + 1):
        try:
            return read_host_rows(store, path, hosts, whole=True)
        except StoreError as exc:
            if "not a readable Parquet file" not in str(exc) or attempt == REPLACED_READ_ATTEMPTS:
                raise
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


def load_host_state(store: Store, hosts: set[str], segment: str | None = None) -> dict[str, dict]:
    """State of the given hosts, from every source that may know them.

    From the host DB only the bucket files the hosts hash to are opened (one for a single
    host), and only their rows are read."""
    wanted = sorted(hosts)
    tables = []
    # The segments first, then the host DB: an update finishing in between (``crawl run``
    # updates segment k while k+1 is fetched) then leaves k's rows read from its segment
    # file, or from the host DB, or both — never from neither, which would lose k's
    # not-before times for a host in both segments.
    segment_files = segment_host_files(store, include_segment=segment)
    manifest = store.manifest("hostdb")
    if manifest is not None and wanted:
        files = hostdb_files(store, manifest)
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for host, bucket in zip(wanted, host_buckets(wanted, len(files)).tolist()):
            by_bucket[bucket].append(host)
        for bucket in sorted(by_bucket):
            tables.append(read_host_rows(store, files[bucket], by_bucket[bucket]))
    for path in segment_files:
        tables.append(read_replaced_host_rows(store, path, wanted))
    return merge_host_rows(tables)


def planned_spacing_s(state: dict | None, floor_s: float, max_crawl_delay_s: float) -> float:
    """Seconds a host's requests are apart as the host DB last saw it: the delay floor, its
    Crawl-delay, and the wait its last response set (``not_before - last_request_end``: the
    slow-host delay of ``fetch.delay_factor`` or a back-off), capped at ``max_crawl_delay_s``
    (a longer wait is a not-before window, :func:`planned_wait_s`, not a spacing)."""
    spacing = floor_s
    if state is None:
        return spacing
    if state.get("crawl_delay_s"):
        spacing = max(spacing, float(state["crawl_delay_s"]))
    last, not_before = state.get("last_request_end"), state.get("not_before")
    if last is not None and not_before is not None:
        spacing = max(spacing, min(max_crawl_delay_s, (not_before - last).total_seconds()))
    return spacing


def planned_wait_s(state: dict | None, now_wall: float) -> float:
    """Seconds from ``now_wall`` before the host may be asked (its not-before time), at least 0."""
    if state is None or state.get("not_before") is None:
        return 0.0
    return max(0.0, state["not_before"].timestamp() - now_wall)


def planned_urls(state: dict | None, segment_s: float, floor_s: float, max_crawl_delay_s: float,
                 now_wall: float) -> int:
    """How many URLs of a host fit a segment planned to last ``segment_s`` seconds: its time
    after the not-before wait over its spacing (generate's per-host time budget, docs/segments.md).
    0 when the host may not be asked before the segment ends: its URLs wait for a later one.
    Rounded to the nearest: n requests need n - 1 spacings but n response times, which
    roughly cancel (and a host at exactly 1 s + the 5 ms margin still gets 15 in 15 s)."""
    left = segment_s - planned_wait_s(state, now_wall)
    if left <= 0:
        return 0
    return max(1, round(left / planned_spacing_s(state, floor_s, max_crawl_delay_s)))


# --- Writing: update folds a segment's hosts/ output into a new version --------------------

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


# --- The merge as tasks: routing by file, then one merge per bucket ---------------------------
#
# Update runs both kinds on the executor of its crawl DB bucket tasks (cycles/executor.py),
# so on a cluster no process holds the segment's or the host DB's rows and a task reads and
# writes only the store. Each writes under names fixed by its inputs, with contents fixed by
# them too: a retried task (its worker lost) writes the same files over the first attempt's,
# each write atomic, and what is installed does not depend on which attempt wrote last.


@dataclass(frozen=True)
class HostRouteTask:
    """One hosts file to cut by bucket (:func:`route_host_file`): locations and ids (picklable)."""

    store_uri: str
    source: StorePath
    """A segment's ``hosts/part-N.parquet``, or an old host DB file that is not read in place."""
    name: str
    """The name of every file it writes (``<origin>-<source stem>``: unique among the sources)."""
    staging: StorePath
    buckets: int


@dataclass(frozen=True)
class HostBucketTask(BucketTask):
    """One bucket's merge (:func:`merge_host_bucket`)."""

    bucket: int
    staging: StorePath
    """Where the route tasks left the bucket's rows (``staging/bucket-N/*.parquet``)."""
    new_folder: StorePath
    old_file: StorePath | None = None
    """The old host DB's file of this bucket, read in place (same count, current schema)."""
    workers: int = 1
    """How many such tasks run at once on this machine (they share memory and threads)."""


def staged_folder(staging: StorePath, bucket: int) -> StorePath:
    return staging / f"bucket-{bucket:05d}"


def route_host_file(task: HostRouteTask) -> int:
    """Cut one hosts file into ``staging/bucket-N/<name>.parquet`` (buckets with rows only),
    in the current schema, streamed through this task's own local scratch folder (memory
    bounded by a batch); returns the rows routed."""
    store = Store(task.store_uri)
    local = Path(tempfile.mkdtemp(prefix="hostroute-", dir=store.scratch_dir()))
    rows = 0
    try:
        for bucket, path in sorted(route_host_files(store, [task.source], task.buckets, str(local)).items()):
            with pq.ParquetFile(path) as routed:
                batches = routed.iter_batches(batch_size=SCAN_BATCH_ROWS, use_threads=False)
                rows += store.write_batches(staged_folder(task.staging, bucket) / f"{task.name}.parquet",
                                            batches, schema.HOSTS)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return rows


def merge_host_bucket(task: HostBucketTask) -> int:
    """One bucket of the new host DB: its old file (if read in place) and its routed rows,
    merged by MERGE_SQL into ``new_folder/bucket-N.parquet``; returns the hosts it holds."""
    store = Store(task.store_uri)
    parts = []
    if task.old_file is not None:
        parts.append(task.old_file)
    parts += store.list(staged_folder(task.staging, task.bucket), "*.parquet")
    path = store.bucket_file(task.new_folder, task.bucket)
    if holds_no_rows(store, parts):  # no parts, or only empty ones: no DuckDB merge (~8 CPU-ms)
        return store.write_batches(path, iter(()), schema.HOSTS)  # an empty bucket still has its file
    con = connect(store, task.config, task.workers)
    try:
        source = " UNION ALL ".join(f"SELECT {HOSTS_COLUMNS} FROM {store.duckdb_source(con, [part])}"
                                    for part in parts)
        return store.write_batches(path, con.sql(MERGE_SQL.format(source=source)).to_arrow_reader(16 * 1024),
                                   schema.HOSTS)
    finally:
        con.close()


@dataclass
class HostDbUpdate:
    """A host DB version being written: its route and bucket tasks and where they write."""

    version: str
    folder: StorePath
    buckets: int
    staging: StorePath
    routes: list[HostRouteTask]
    tasks: list[HostBucketTask]


def start_hostdb(store: Store, config: Config, segment: str, staging: StorePath, workers: int = 1) -> HostDbUpdate:
    """A new host DB version's folder and the tasks that fill it: a :class:`HostRouteTask`
    per hosts file of ``segment`` (and per old host DB file when those cannot be read in
    place: another bucket count, or columns added since), writing under ``staging``, then a
    :class:`HostBucketTask` per bucket. Run the route tasks, then the bucket tasks, then
    :func:`install_hostdb`; on a failure in between, :func:`discard_hostdb`."""
    manifest = store.manifest("hostdb")
    old_files = hostdb_files(store, manifest) if manifest else []
    buckets = hostdb_buckets(store, config)
    in_place = bool(old_files) and manifest.buckets == buckets and len(old_files) == buckets and \
        store.read_metadata(old_files[0]).schema.to_arrow_schema().names == schema.HOSTS.names
    sources = [(f"seg-{path.stem}", path) for path in seg.files(store, segment, seg.HOSTS)]
    if not in_place:
        sources += [(f"old-{path.stem}", path) for path in old_files]
    store.delete_dir(staging)  # an earlier try's leftovers: rows of files that may be gone now
    version, folder = store.new_version_dir("hostdb")
    routes = [HostRouteTask(store.uri, path, name, staging, buckets) for name, path in sources]
    tasks = [HostBucketTask(store.uri, config, bucket, staging, folder, old_files[bucket] if in_place else None,
                            workers) for bucket in range(buckets)]
    return HostDbUpdate(version, folder, buckets, staging, routes, tasks)


def discard_hostdb(store: Store, update: HostDbUpdate) -> None:
    store.discard_version("hostdb", update.version)
    store.delete_dir(update.staging)


def install_hostdb(store: Store, config: Config, update: HostDbUpdate) -> None:
    """Swap the new version in (its bucket tasks done) and drop the routed rows."""
    store.install("hostdb", Manifest(version=update.version, buckets=update.buckets,
                                     schema_version=schema.SCHEMA_VERSION,
                                     written_at=utcnow().isoformat(), written_by="update"),
                  keep=config.db.keep_versions)
    store.delete_dir(update.staging)


def merge_hostdb(store: Store, config: Config, segment: str, executor=None) -> int:
    """Fold the segment's host state into a new host DB version, bucket by bucket, the
    tasks on ``executor`` (default: in this process); returns hosts held."""
    staging = seg.segment_dir(store, segment) / seg.UPDATE_INPUTS / "hostdb"
    update = start_hostdb(store, config, segment, staging, getattr(executor, "workers", 1))
    run = executor.map if executor is not None else (lambda fn, tasks: [fn(task) for task in tasks])
    try:
        run(route_host_file, update.routes)
        rows = sum(run(merge_host_bucket, update.tasks))
    except BaseException:
        discard_hostdb(store, update)
        raise
    install_hostdb(store, config, update)
    return rows
