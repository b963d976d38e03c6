"""Update's link-graph step: the link DB, from which generate ranks URLs and budgets hosts.

Depth says how far a page is from a seed, not how much the web cares about it. Search
engines rank the frontier by links instead (Nutch's OPIC and LinkRank; Common Crawl budgets
domains by host-level centrality and ranks URLs by in-links). Each update folds the
segment's followed outlinks into the link DB (``linkdb/<version>/``, schema.LINK_*):

- **per URL, the distinct other hosts linking to it** (LINK_INLINKS: one row per
  (url, from_host), accumulated over every segment; LINK_URLS: their count). A site that
  links a page from each of its 10,000 pages counts once; a link from the page's own host
  does not count (a site cannot vote for itself);
- **the host graph** (LINK_HOST_EDGES: host → host, self-links excluded) and each host's
  **PageRank** on it (LINK_HOSTS), both in parts by host (``host_edges-NNNNN``,
  ``hosts-NNNNN``; cycles/update/hostrank.py).

Why PageRank and not harmonic centrality (Common Crawl's choice): exact harmonic centrality
needs a breadth-first search from every host, O(hosts × edges) per cycle; Common Crawl
approximates it with HyperBall, a separate system of probabilistic counters. PageRank is
one pass over the edges per iteration (a join and a group-by DuckDB spills to the store's
scratch folder, so memory stays bounded), converges geometrically (error × damping per
iteration), and rewards the same thing: being linked from many hosts that are themselves
linked. Dangling hosts (no out-links) spread their rank over every host, as networkx does,
so the ranks stay a distribution; ``importance`` = rank × hosts puts 1 at the average.

Same-host links are not edges, and nofollow links and the links of exact copies are left
out, as they are for discovery (cycles/update/route.py route_links). The cost of a
cycle is linear in the size of the link DB (every update rewrites it, bucket by bucket) plus
``update.link_iterations`` passes over the host edges (fewer: each cycle starts from the
last cycle's ranks). The per-bucket rewrite is one :func:`merge_link_bucket` task per
bucket on update's executor (a cluster's workers); the host graph and its PageRank are
rounds of per-part tasks on the same executor (cycles/update/hostrank.py: the host graph
grows with the crawl, about one edge per URL on bench_scale's synthetic web); only the
install stays in update's coordinator (:func:`install_linkdb`). :func:`host_pagerank` is
the whole-graph PageRank in one process (NumPy or DuckDB), the reference the tasks are
tested against with networkx, and what ``scripts/bench_scale_parts.py --parts pagerank`` times.

The link DB grows with every link ever seen: a link that disappears from a page is never
removed (no expiry yet).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import connect
from cycles.storage.store import Manifest, Store, StorePath, utcnow
from cycles.update.hostrank import IN_MEMORY_EDGES  # noqa: F401  (host_pagerank's default; scripts import it here)
from cycles.tables.linkdb import LINKDB, current_link_files, inlinks_file, urls_file  # noqa: F401  (the link DB's files)
from cycles.tables.partitioning import BucketTask, in_bucket_sql
from cycles.update.hostrank import iterate_in_memory, old_host_graph, rank_host_graph
from cycles.update.route import ROUTED_INLINKS, routed_files, routed_source


def host_pagerank(con: duckdb.DuckDBPyConnection, nodes: str, edges: str, damping: float,
                  iterations: int, tolerance: float, in_memory_edges: int = IN_MEMORY_EDGES,
                  start: str | None = None) -> tuple[str, int]:
    """PageRank of a host graph; returns the temp table (host, rank) and the iterations run.

    ``nodes``: SQL source of the hosts (column ``host``, distinct); ``edges``: of the edges
    (``from_host``, ``to_host``, distinct, both in ``nodes``, no self-links). Each iteration is
    one pass over the edges, linear in edges + hosts:
    rank'(v) = (1 - d)/N + d × (dangling rank / N + Σ_{u→v} rank(u) / outdegree(u)).
    Stops after ``iterations`` or once Σ|rank' - rank| < ``tolerance`` (the ranks sum to 1;
    networkx's N × tol would let a million-host graph stop after one iteration).
    Up to ``in_memory_edges`` edges in NumPy, beyond in DuckDB (a join and a group-by per
    iteration, spilled to the scratch folder past the memory limit).

    ``start``: SQL source of earlier ranks (host, rank) to start from (the last cycle's: the
    graph changed little, so few iterations reach the tolerance); new hosts start at 1/N and
    the whole is scaled to sum 1. The fixed point is the same from any start.
    """
    started = f"LEFT JOIN (SELECT host, rank FROM {start}) s ON s.host = n.host" if start else ""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE pr_nodes AS
        SELECT n.host, (row_number() OVER (ORDER BY n.host) - 1)::INTEGER AS id,
               {"s.rank" if start else "NULL::DOUBLE"} AS rank0
        FROM {nodes} n {started}""")
    n = con.execute("SELECT count(*) FROM pr_nodes").fetchall()[0][0]
    con.execute(f"""CREATE OR REPLACE TEMP TABLE pr_nodes AS
        SELECT host, id, coalesce(rank0, 1.0 / {max(n, 1)}) / sum(coalesce(rank0, 1.0 / {max(n, 1)})) OVER () AS rank0
        FROM pr_nodes""")
    # Each edge carries 1/outdegree of its source, computed once, not per iteration.
    con.execute(f"""CREATE OR REPLACE TEMP TABLE pr_edges AS
        SELECT s.id AS src, t.id AS dst, 1.0::DOUBLE / count(*) OVER (PARTITION BY s.id) AS w FROM {edges} e
        JOIN pr_nodes s ON e.from_host = s.host JOIN pr_nodes t ON e.to_host = t.host""")
    if con.execute("SELECT count(*) FROM pr_edges").fetchall()[0][0] <= in_memory_edges:
        done = pagerank_in_memory(con, n, damping, iterations, tolerance)
    else:
        done = pagerank_in_duckdb(con, n, damping, iterations, tolerance)
    con.execute("""CREATE OR REPLACE TEMP TABLE pagerank AS
        SELECT n.host, r.rank FROM pr_nodes n JOIN pr_rank r USING (id)""")
    for table in ("pr_nodes", "pr_edges", "pr_rank"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    return "pagerank", done


def pagerank_in_memory(con: duckdb.DuckDBPyConnection, n: int, damping: float, iterations: int,
                       tolerance: float) -> int:
    """:func:`host_pagerank`'s iteration in NumPy over ``pr_edges``; leaves ``pr_rank`` (id, rank)."""
    edges = con.sql("SELECT src, dst, w FROM pr_edges").fetchnumpy()
    src, dst, w = (np.asarray(edges[c]) for c in ("src", "dst", "w"))
    dangling = np.ones(n, dtype=bool)
    dangling[src] = False
    rank = np.asarray(con.sql("SELECT rank0 FROM pr_nodes ORDER BY id").fetchnumpy()["rank0"], dtype=np.float64)
    rank, done = iterate_in_memory(src, dst, w, dangling, rank, damping, iterations, tolerance)
    con.register("pr_rank_in", pa.table({"id": pa.array(np.arange(n, dtype=np.int32)), "rank": pa.array(rank)}))
    con.execute("CREATE OR REPLACE TEMP TABLE pr_rank AS SELECT * FROM pr_rank_in")
    con.unregister("pr_rank_in")
    return done


def pagerank_in_duckdb(con: duckdb.DuckDBPyConnection, n: int, damping: float, iterations: int,
                       tolerance: float) -> int:
    """:func:`host_pagerank`'s iteration in DuckDB over ``pr_edges``; leaves ``pr_rank`` (id, rank)."""
    con.execute("""CREATE OR REPLACE TEMP TABLE pr_rank AS
        SELECT id, rank0 AS rank, id NOT IN (SELECT src FROM pr_edges) AS dangling FROM pr_nodes""")
    done = 0
    d = float(damping)
    for done in range(1, int(iterations) + 1) if n else ():
        con.execute(f"""CREATE OR REPLACE TEMP TABLE pr_next AS
            SELECT r.id, r.dangling,
                   {(1.0 - d) / n!r} + {d!r} * ((SELECT coalesce(sum(rank), 0) FROM pr_rank WHERE dangling) / {n}
                                              + coalesce(f.flow, 0)) AS rank
            FROM pr_rank r LEFT JOIN (
                SELECT e.dst AS id, sum(r.rank * e.w) AS flow FROM pr_edges e JOIN pr_rank r ON e.src = r.id
                GROUP BY e.dst) f ON f.id = r.id""")
        change = con.execute("SELECT sum(abs(a.rank - b.rank)) FROM pr_next a JOIN pr_rank b USING (id)"
                             ).fetchall()[0][0] or 0.0
        con.execute("DROP TABLE pr_rank")
        con.execute("ALTER TABLE pr_next RENAME TO pr_rank")
        if change < tolerance:
            break
    return done


def old_source(con: duckdb.DuckDBPyConnection, store: Store, files: list[StorePath], table_schema: pa.Schema,
               name: str) -> str:
    """SQL source over the old link DB's ``files`` (an empty table of ``table_schema`` if none)."""
    if files:
        return store.duckdb_source(con, files)
    con.register(name, table_schema.empty_table())
    return name


def old_bucket_files(store: Store, old_version: str | None, old_buckets: int, bucket: int,
                     buckets: int) -> tuple[list, str]:
    """The old link DB's files holding ``bucket``'s rows, and a WHERE clause keeping only those:
    its own file when the bucket counts agree, else every file (after `crawl rebucket`)."""
    if old_version is None:
        return [], "true"
    folder = store.path(LINKDB, old_version)
    if old_buckets == buckets:
        return [inlinks_file(folder, bucket)], "true"
    return [inlinks_file(folder, b) for b in range(old_buckets)], in_bucket_sql("host_hash", bucket, buckets)


def write_query(store: Store, con: duckdb.DuckDBPyConnection, sql: str, path: StorePath, table_schema: pa.Schema) -> int:
    return store.write_batches(path, con.sql(sql).to_arrow_reader(64 * 1024), table_schema)


@dataclass(frozen=True)
class LinkBucketTask(BucketTask):
    """One bucket's in-link merge (:func:`merge_link_bucket`)."""

    inputs: StorePath
    """The segment's update inputs (``update/``): the routed ``inlinks/bucket-N/`` files."""
    bucket: int
    buckets: int
    new_folder: StorePath
    """The new link DB version's folder (not installed yet)."""
    old_version: str | None = None
    """The link DB version merged into (None: there is none yet)."""
    old_buckets: int = 0
    workers: int = 1
    """How many such tasks run at once on this machine (they share memory and threads)."""


def merge_link_bucket(task: LinkBucketTask) -> dict[str, int]:
    """One bucket's inlinks: the old ones plus the segment's (routed by update's routing
    tasks to ``inputs/inlinks/bucket-N/``, cycles/update/route.py), distinct, and their
    per-URL counts; memory bounded by a bucket. Returns ``linkgraph/inlinks``, its rows.

    Writes only ``inlinks-N.parquet`` and ``urls-N.parquet`` of the new version: names fixed
    by the bucket and contents by the inputs (distinct rows, sorted by every column), so a
    retried task (its worker lost) writes the same files over the first attempt's, each
    write atomic, and the version installed is the same whichever attempt wrote last."""
    store = Store(task.store_uri)
    con = connect(store, task.config, task.workers)
    try:
        files, where = old_bucket_files(store, task.old_version, task.old_buckets, task.bucket, task.buckets)
        before = old_source(con, store, files, schema.LINK_INLINKS, "linkdb_no_inlinks")
        new = routed_source(con, store, routed_files(store, task.inputs, "inlinks", task.bucket), ROUTED_INLINKS,
                            "linkdb_no_new_inlinks")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE link_bucket AS
            SELECT DISTINCT url, host_hash, from_host FROM (
                SELECT url, host_hash, from_host FROM {before} WHERE {where}
                UNION ALL SELECT url, host_hash, from_host FROM {new})""")
        rows = write_query(store, con, "SELECT * FROM link_bucket ORDER BY url, from_host",
                           inlinks_file(task.new_folder, task.bucket), schema.LINK_INLINKS)
        write_query(store, con, """SELECT url, any_value(host_hash) AS host_hash, count(*)::INTEGER AS inlink_hosts
                                   FROM link_bucket GROUP BY url ORDER BY url""",
                    urls_file(task.new_folder, task.bucket), schema.LINK_URLS)
    finally:
        con.close()
    return {"linkgraph/inlinks": rows}


@dataclass
class LinkDbUpdate:
    """A link DB version being written: its bucket tasks (run by update's executor, the
    same as the crawl DB's bucket tasks) and what :func:`install_linkdb` needs after them."""

    old: Manifest | None
    version: str
    folder: StorePath
    tasks: list[LinkBucketTask]


def start_linkdb(store: Store, config: Config, inputs: StorePath, buckets: int, workers: int,
                 counters: Counter) -> LinkDbUpdate | None:
    """A new link DB version's folder and one :class:`LinkBucketTask` per bucket, to fold in
    what update's routing tasks wrote under ``inputs`` (cycles/update/route.py: each bucket's
    other-host links, ``inlinks/bucket-N/``). None when the segment has no followed link
    (``linkgraph/links`` in ``counters``): the link DB stays as it is (no rewrite, no version).
    Run the tasks, then :func:`install_linkdb`; on a failure in between, :func:`discard_linkdb`."""
    if not counters["linkgraph/links"]:
        return None
    old = store.manifest(LINKDB)
    version, folder = store.new_version_dir(LINKDB)
    tasks = [LinkBucketTask(store.uri, config, inputs, bucket, buckets, folder,
                            old.version if old else None, old.buckets if old else 0, workers)
             for bucket in range(buckets)]
    return LinkDbUpdate(old, version, folder, tasks)


def discard_linkdb(store: Store, update: LinkDbUpdate | None) -> None:
    if update is not None:
        store.discard_version(LINKDB, update.version)


def install_linkdb(store: Store, config: Config, executor, update: LinkDbUpdate | None, done: list[dict],
                   inputs: StorePath, segment: str, counters: Counter) -> None:
    """After the bucket tasks (``done``: their results): the host graph from the segment's
    (host, linking host) pairs (``inputs/host_links/bucket-N/``) and its PageRank, by tasks on
    ``executor`` (cycles/update/hostrank.py: the host graph grows with the crawl, so it is
    not ranked here), and the new version installed.

    Called by update under the crawl DB lock, before the crawl DB swap: a crash between the
    two applies the segment again, and the link DB's rows are distinct pairs, so that
    changes nothing."""
    if update is None:
        return
    started = time.monotonic()
    try:
        counters["linkgraph/inlinks"] = sum(result["linkgraph/inlinks"] for result in done)
        old = old_host_graph(store, store.path(LINKDB, update.old.version) if update.old else None,
                             update.old.buckets if update.old else 0)
        hosts, edges, iterations = rank_host_graph(store, config, executor, inputs, update.folder, len(update.tasks),
                                                   old)
    except BaseException:
        discard_linkdb(store, update)
        raise
    old = update.old
    applied = (tuple(old.applied_segments) if old else ()) + (segment,)
    store.install(LINKDB, Manifest(version=update.version, buckets=len(update.tasks),
                                   schema_version=schema.SCHEMA_VERSION,
                                   written_at=utcnow().isoformat(), written_by="update",
                                   applied_segments=applied[-config.db.applied_segments_kept:]),
                  keep=config.db.keep_versions)
    counters["linkgraph/hosts"] = hosts
    counters["linkgraph/host_edges"] = edges
    counters["linkgraph/iterations"] = iterations
    counters["linkgraph/ms"] = int((time.monotonic() - started) * 1000)


# --- the link DB's deltas and its own schedule (docs/incremental.md) ------------------------------
PENDING = "pending"
"""``linkdb/pending/``: the links of segments updated since the last merge, routed by bucket as
update's inputs are (``inlinks/bucket-N/``, ``host_links/bucket-N/``), one file per segment
and group of chunks. Generate does not read them: it ranks by the last merged version."""

PENDING_KINDS = ("inlinks", "host_links")


def pending_folder(store: Store) -> StorePath:
    return store.path(LINKDB, PENDING)


def pending_files(store: Store) -> list[StorePath]:
    """Every pending link file (a snapshot: those a merge folds in and then deletes)."""
    import pyarrow.fs as pafs

    root = pending_folder(store)
    infos = store.fs.get_file_info(pafs.FileSelector(str(root), recursive=True, allow_not_found=True))
    return sorted(type(root)(info.path) for info in infos
                  if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
                  and not info.base_name.startswith("."))


def stash_pending_links(store: Store, inputs: StorePath, segment: str, buckets: int) -> int:
    """Keep the segment's routed links (``inputs/inlinks|host_links/bucket-N/``) as pending
    deltas of the link DB, named by segment: update's link step when the link DB is merged on
    a schedule (``update.link_rank_interval_s``) rather than in every update. Their cost
    follows the segment. A second run for the same segment (update killed before its swap)
    writes the same names again, and the merge keeps distinct rows, so nothing counts twice.
    Returns the files kept."""
    from cycles.update.route import routed_files, routed_folder

    kept = 0
    for kind in PENDING_KINDS:
        for bucket in range(buckets):
            for path in routed_files(store, inputs, kind, bucket):
                target = routed_folder(pending_folder(store), kind, bucket) / f"{segment}-{path.name}"
                store.write_bytes(target, store.read_bytes(path))
                kept += 1
    return kept


def link_merge_due(store: Store, config: Config, forced: bool = False, now: float | None = None) -> bool:
    """Whether the pending links are due to be merged: some are pending, and the last merge
    (the link DB manifest's ``written_at``) is ``update.link_rank_interval_s`` old, or there is
    no link DB yet (generate ranks by links from the first merge on), or ``forced``."""
    if not pending_files(store):
        return False
    if forced or config.update.link_rank_interval_s <= 0:
        return True
    manifest = store.manifest(LINKDB)
    if manifest is None:
        return True
    import datetime as dt

    written = dt.datetime.fromisoformat(manifest.written_at).timestamp()
    return (now if now is not None else time.time()) - written >= config.update.link_rank_interval_s


def merge_pending_links(store: Store, config: Config, executor=None) -> Counter:
    """Fold every pending segment's links into a new link DB version and rank the host graph
    (the same tasks as update's link step, over ``linkdb/pending/`` instead of one segment's
    inputs), install it, then delete the pending files merged. The caller holds the
    ``crawldb`` lock (update writes pending links under it). Killed before the install, the
    old version stays and the files wait; killed after it, they are merged again and change
    nothing (the link DB's rows are distinct pairs)."""
    from cycles.tables.crawldb import bucket_executor, current_buckets

    counters: Counter = Counter()
    files = pending_files(store)
    manifest, buckets = current_buckets(store)
    if not files or manifest is None:
        return counters
    executor = bucket_executor(store, config, [b.base for b in buckets], executor)
    segments = sorted({"-".join(path.name.split("-")[:2]) for path in files})  # ids: <UTC time>-<hex>
    counters["linkgraph/links"] = len(files)  # only tested for > 0 by start_linkdb
    counters["linkgraph/pending_files"] = len(files)
    links = start_linkdb(store, config, pending_folder(store), manifest.buckets, executor.workers, counters)
    try:
        linked = executor.map(merge_link_bucket, links.tasks) if links else []
    except BaseException:
        discard_linkdb(store, links)
        raise
    install_linkdb(store, config, executor, links, linked, pending_folder(store), segments[-1], counters)
    for path in files:
        store.delete(path)
    del counters["linkgraph/links"]
    return counters
