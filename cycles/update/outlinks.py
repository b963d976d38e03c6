"""Outlink preparation for update: normalise, filter and deduplicate a segment's links.

The work is per distinct URL and pure Python (cycles/urls.py), about 5 µs a URL, so at
10 M outlinks a segment it is the one part of update that neither DuckDB nor Arrow does
for us. It is spread over a process pool and kept out of Python objects between steps:

1. DuckDB reduces the followed links to their distinct raw URLs with the smallest depth,
   ordered by (the hash of) their authority, so that each chunk holds few hosts and the
   normaliser's host caches hit;
2. the distinct URLs go, in chunks of :data:`CHUNK_ROWS` as Arrow IPC buffers (a pickled
   Arrow slice would carry its whole parent buffer), to :func:`prepare_chunk` in a
   ``spawn`` pool (cycles/executor.py ProcessPool) of ``db.duckdb_threads`` processes (with one process, or a single
   chunk, the same function runs in-process); each returns the kept rows (url, host,
   host_hash, depth) as an Arrow IPC buffer and its drop counts by reason;
3. DuckDB merges the raw spellings of one URL (smallest depth) and applies
   ``update.max_depth``.

Only one chunk per process is ever a list of Python strings, so memory is the Arrow
columns plus a chunk per worker, whatever the segment's size. The counters are those of
the single-loop version: ``filter/<reason>`` per distinct raw URL dropped,
``filter/max_depth`` per distinct normalised URL too deep.

Update itself now prepares links per group of fetch chunks, in its routing tasks
(cycles/update/route.py, :func:`normalised_links`: the same :func:`prepare_chunk`, run
in the task's process; the executor's tasks are the parallelism), and each bucket task
merges a URL's spellings and depths; :func:`prepare_outlinks` is the whole-table version.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from cycles.config import Config, UrlConfig
from cycles.tables.crawldb import connect
from cycles.executor import ProcessPool
from cycles.urls import Normalizer, UrlFilter, canonical_mask, host_hashes, rejection_reason

CHUNK_ROWS = 100_000
"""Distinct raw URLs per task: ~8 MB of Arrow, ~0.4 s of work; small enough to keep every
worker busy to the end, large enough that a task's overhead (~5 ms) does not count."""

MIN_POOL_ROWS = 2 * CHUNK_ROWS
"""Fewer followed links than this are done in-process: starting a spawn worker costs
~0.3 s (interpreter, pyarrow, idna), the time of ~60 K URLs."""

KEPT = pa.schema([("url", pa.string()), ("host", pa.string()), ("host_hash", pa.uint64()),
                  ("depth", pa.int16()), ("raw", pa.string())])
"""A kept link: normalised url, host, host_hash, depth, and the raw spelling it came from
(the link graph maps each outlink row to its normalised target by it)."""

# A canonical URL has no userinfo: its host runs from "://" to ":", "/" (or "]" for IPv6).
_HOST_RE = r"^[a-z]+://(?P<host>\[[^\]]*\]|[^:/?#]*)"


def _to_ipc(table: pa.Table | pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return sink.getvalue()


def _from_ipc(buffer) -> pa.Table:
    return pa.ipc.open_stream(buffer).read_all()


_tools: tuple[UrlConfig, Normalizer, UrlFilter] | None = None


def _normalizer_and_filter(config: UrlConfig) -> tuple[Normalizer, UrlFilter]:
    """One Normalizer and UrlFilter per process and config (their caches then live on)."""
    global _tools
    if _tools is None or _tools[0] != config:
        _tools = (config, Normalizer(config), UrlFilter(config))
    return _tools[1], _tools[2]


def prepare_chunk(chunk, url_config: UrlConfig) -> tuple[pa.Buffer, dict[str, int]]:
    """Normalise and filter one chunk of distinct raw URLs (url, depth; Arrow IPC buffer).

    Returns the kept rows (:data:`KEPT`: normalised url, host, host_hash, depth) as an
    Arrow IPC buffer, and the drops as ``{"filter/<reason>": count}``. Module-level and
    plain data in and out, so that it runs the same in a pool worker and in-process.
    """
    table = _from_ipc(chunk)
    normalizer, url_filter = _normalizer_and_filter(url_config)
    normalize = normalizer.normalize
    column = table.column("url")
    raw = column.to_pylist()
    # Links already in canonical form (most) skip the normaliser (urls.canonical_mask).
    normalised = raw.copy()
    for i in pc.indices_nonzero(pc.invert(canonical_mask(column))).to_numpy().tolist():
        normalised[i] = normalize(raw[i])
    urls = pa.array(normalised, pa.string())
    del normalised
    reasons = url_filter.reasons(urls)  # Arrow kernels; per URL in Python only where needed
    rejected = pc.indices_nonzero(pc.is_null(urls))
    if len(rejected):  # the normaliser said no: other scheme, or unparseable
        reasons = pc.replace_with_mask(reasons, pc.is_null(urls), pa.array(
            [rejection_reason(raw[i]) for i in rejected.to_numpy().tolist()], pa.string()))
    del raw
    dropped = {"filter/" + row["values"]: row["counts"]
               for row in pc.value_counts(reasons.drop_null()).to_pylist()}
    keep = pc.is_null(reasons)
    urls = urls.filter(keep)
    hosts = pc.struct_field(pc.extract_regex(urls, _HOST_RE), "host")
    kept = pa.table([urls, hosts, host_hashes(hosts), table.column("depth").filter(keep), column.filter(keep)],
                    schema=KEPT)
    return _to_ipc(kept), dict(dropped)


def pool_size(config: Config) -> int:
    """Processes for outlink preparation: ``db.duckdb_threads`` (else the machine's cores)."""
    return max(1, int(config.db.duckdb_threads or 0) or os.cpu_count() or 1)


def _chunks(distinct: pa.Table, rows: int) -> Iterator[pa.Buffer]:
    for start in range(0, distinct.num_rows, rows):
        yield _to_ipc(distinct.slice(start, rows))


def _warm_up(url_config: UrlConfig) -> None:
    """Start a worker's imports and caches while the parent still dedupes."""
    _normalizer_and_filter(url_config)


def _run_chunks(distinct: pa.Table, url_config: UrlConfig, pool: ProcessPool | None,
                processes: int, rows: int) -> Iterator[tuple]:
    """prepare_chunk over every chunk: in-process (no pool, or one chunk), or in the pool
    with at most two chunks per worker in flight (so the queued IPC buffers stay few)."""
    if pool is None or distinct.num_rows <= rows:
        for chunk in _chunks(distinct, rows):
            yield prepare_chunk(chunk, url_config)
        return
    pending = []
    for chunk in _chunks(distinct, rows):
        pending.append(pool.submit(prepare_chunk, chunk, url_config))
        if len(pending) >= 2 * processes:
            yield pending.pop(0).result()
    for future in pending:
        yield future.result()


def prepare_outlinks(links: pa.Table, config: Config, counters: Counter, *,
                     processes: int | None = None, chunk_rows: int | None = None,
                     con: duckdb.DuckDBPyConnection | None = None, keep_raw_map: bool = False) -> pa.Table:
    """Normalise, filter and deduplicate outlinks: (url, host, host_hash, score, depth).

    ``links`` has the columns url, nofollow and depth (schema.OUTLINKS). ``processes``
    (default :func:`pool_size`) and ``chunk_rows`` (default :data:`CHUNK_ROWS`) size the
    pool; with fewer than :data:`MIN_POOL_ROWS` followed links it runs in-process unless
    ``processes`` is given. ``con``: a DuckDB connection to use (update's, with its memory
    limit and spill folder); without it one is opened from ``config.db``. ``keep_raw_map``:
    leave the temp table ``outlinks_raw_map`` (raw, url, host, host_hash) on ``con`` for
    the link graph (cycles/update/linkgraph.py), which the caller drops.
    """
    counters["outlinks/found"] += links.num_rows
    follow = links.select(["url", "nofollow", "depth"]).filter(pc.invert(links["nofollow"]))
    counters["outlinks/nofollow"] += links.num_rows - follow.num_rows
    rows = int(chunk_rows or CHUNK_ROWS)
    if processes is None:
        processes = pool_size(config) if follow.num_rows >= MIN_POOL_ROWS else 1
    con = con if con is not None else connect(None, config)
    parts: list[pa.Table] = []
    with contextlib.ExitStack() as stack:
        pool = None
        if processes > 1:
            pool = stack.enter_context(ProcessPool(processes, "outlink preparation"))
            for _ in range(processes):  # workers start (~0.3 s each) while DuckDB dedupes
                pool.submit(_warm_up, config.urls)
        con.register("outlinks_follow", follow)
        # Grouped by authority (hashed: half the cost of sorting the URLs), so a chunk holds
        # few hosts and the normaliser's host caches hit (4.1 vs 4.8 µs a URL unordered).
        distinct = con.sql("""SELECT url, min(depth)::SMALLINT AS depth FROM outlinks_follow GROUP BY url
                              ORDER BY hash(split_part(url, '/', 3))""").to_arrow_table()
        con.unregister("outlinks_follow")
        del follow
        # A dead worker: the pool's exit turns BrokenProcessPool into a one-line StageError.
        for kept, dropped in _run_chunks(distinct, config.urls, pool, processes, rows):
            parts.append(_from_ipc(kept))
            counters.update(dropped)
        del distinct
    kept = pa.concat_tables(parts) if parts else KEPT.empty_table()
    del parts
    con.register("outlinks_kept", kept)
    if keep_raw_map:
        con.execute("CREATE OR REPLACE TEMP TABLE outlinks_raw_map AS SELECT raw, url, host, host_hash FROM outlinks_kept")
    max_depth = int(config.update.max_depth)
    con.execute("""CREATE OR REPLACE TEMP TABLE outlinks_merged AS
        SELECT url, any_value(host) AS host, any_value(host_hash) AS host_hash, min(depth) AS depth
        FROM outlinks_kept GROUP BY url""")
    con.unregister("outlinks_kept")
    del kept
    counters["filter/max_depth"] += con.execute(
        f"SELECT count(*) FROM outlinks_merged WHERE depth > {max_depth}").fetchall()[0][0]
    prepared = con.sql(f"""
        SELECT url, host, host_hash, (1.0::DOUBLE / (depth::DOUBLE + 1.0))::FLOAT AS score, depth::SMALLINT AS depth
        FROM outlinks_merged WHERE depth <= {max_depth}""").to_arrow_table()
    con.execute("DROP TABLE outlinks_merged")
    return prepared


def normalised_links(con: duckdb.DuckDBPyConnection, table: str, config: Config, counters: Counter) -> pa.Table:
    """Normalise and filter the links of ``table`` (url, nofollow, depth) in this process:
    one row per distinct followed raw URL kept (:data:`KEPT`, with its smallest depth).

    The steps of :func:`prepare_outlinks` for one group of fetch chunks (cycles/update/route.py;
    there the executor's tasks are the parallelism, not a pool): counts ``outlinks/found``,
    ``outlinks/nofollow`` and ``filter/<reason>`` per distinct raw URL dropped. The merge
    of spellings and ``update.max_depth`` are left to the bucket task, which sees a URL's
    links from every chunk.
    """
    found, nofollow = con.execute(f"SELECT count(*), count(*) FILTER (WHERE nofollow) FROM {table}").fetchall()[0]
    counters["outlinks/found"] += found
    counters["outlinks/nofollow"] += nofollow
    # Grouped by authority (hashed), so a slice holds few hosts and the normaliser's caches hit.
    distinct = con.sql(f"""SELECT url, min(depth)::SMALLINT AS depth FROM {table} WHERE NOT nofollow GROUP BY url
                           ORDER BY hash(split_part(url, '/', 3))""").to_arrow_table()
    parts = []
    for chunk in _chunks(distinct, CHUNK_ROWS):
        kept, dropped = prepare_chunk(chunk, config.urls)
        parts.append(_from_ipc(kept))
        counters.update(dropped)
    return pa.concat_tables(parts) if parts else KEPT.empty_table()
