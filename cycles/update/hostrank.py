"""The host graph and its PageRank as tasks on update's executor (issues #11 and #13 §1).

The host graph grows with the crawl (about one host edge per URL on bench_scale's synthetic
web), so no process holds it whole: it is stored in P parts (P = the link DB's buckets) and
ranked by rounds of per-part tasks, the MapReduce form of PageRank (Nutch's LinkRank).
Update's coordinator only adds P numbers per round and decides when to stop.

Layout of a link DB version (``linkdb/<version>/``), beside the in-link buckets::

    host_edges-NNNNN.parquet   LINK_HOST_EDGES whose from_host is in part N
    hosts-NNNNN.parquet        LINK_HOSTS of the hosts in part N
    pagerank/                  scratch of the rounds below, deleted before the install

A host's part is ``md5_number_lower(host) % P`` (:func:`part_sql`): computed in SQL by every
task alike, and MD5 never changes (a DuckDB ``hash()`` may between versions, and a host
found in another part than the one it was stored in would be counted twice). The same 64
bits are the host's key in the rounds: two hosts of one part with one key would be merged,
so :func:`build_host_part` refuses that (hosts of different parts differ in key mod P).

Edges are partitioned by their SOURCE host: a host's out-degree, its contribution
rank/out-degree and its dangling mass are then known in its own part, and each round sends
one (target key, summed flow) row per distinct target and source part — the combiner of
Nutch's LinkRank — instead of a rank vector to every part. Rounds:

1. :func:`build_host_part` (DuckDB): the part's edges (old ones plus the segment's pairs,
   distinct) and hosts with last cycle's rank; writes the two files above and the scratch
   ``nodes``/``edges`` (integer keys, sorted by target part and key). Returns counts.
2. With at most :data:`IN_MEMORY_EDGES` edges in all, one :func:`rank_whole_graph` task
   ranks the graph in NumPy (each extra round would cost more than the iteration) and
   writes every ``hosts-N``. Otherwise:
3. :func:`rank_part` for iteration 0 (the start ranks) .. k: reads the part's ranks of
   iteration k-1 and the flows sent to it, writes its ranks of iteration k and its flows
   to every part; returns Σ|Δ| and its dangling mass. The coordinator sums those and stops
   at ``update.link_tolerance`` or ``update.link_iterations``;
4. :func:`write_host_part`: the part's ``hosts-N`` (inlink_hosts counted from iteration 0's
   flows, which carry the number of edges).

Every file's name is fixed by (round, part, target part) and its content by the inputs, and
every write is atomic: a retried or duplicated task writes the same bytes over the first
attempt's (tests/update/test_hostrank.py).

A link DB written before the parts (one ``host_edges.parquet``, one ``hosts.parquet``) is
read as it is: each build task keeps its part of the two files; the next version is in parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import connect
from cycles.storage.store import Store, StorePath
from cycles.tables.linkdb import OLD_HOSTS, current_hosts_files, host_key_sql, hosts_file, part_sql  # noqa: F401  (the link DB's host files and parts)
from cycles.tables.partitioning import part_of_key_sql
from cycles.update.route import HOST_LINKS, routed_files

IN_MEMORY_EDGES = 4_000_000
"""A host graph with at most this many edges is ranked by one task in NumPy (about 16 bytes
an edge and 24 a host: 64 MB at most), larger ones by rounds of per-part tasks (each round
a task start, its reads and writes: tens of ms a part, worth it only past this size)."""

OLD_HOST_EDGES = "host_edges.parquet"
"""The one-file host graph of a link DB written before the parts."""

NODES = pa.schema([("key", pa.uint64()), ("host", pa.string()), ("rank0", pa.float64())])
EDGES = pa.schema([("src", pa.int32()), ("to_key", pa.uint64()), ("to_part", pa.int32())])
RANKS = pa.schema([("rank", pa.float64())])
FLOWS = pa.schema([("key", pa.uint64()), ("flow", pa.float64()), ("links", pa.int32())])


def host_edges_file(folder: StorePath, part: int) -> StorePath:
    return folder / f"host_edges-{part:05d}.parquet"


def scratch_dir(folder: StorePath) -> StorePath:
    """The rounds' files: below the version's top level, so never sealed nor installed."""
    return folder / "pagerank"


def nodes_file(folder: StorePath, part: int) -> StorePath:
    return scratch_dir(folder) / f"nodes-{part:05d}.parquet"


def edges_file(folder: StorePath, part: int) -> StorePath:
    return scratch_dir(folder) / f"edges-{part:05d}.parquet"


def ranks_file(folder: StorePath, iteration: int, part: int) -> StorePath:
    return scratch_dir(folder) / f"i{iteration:04d}" / f"ranks-{part:05d}.parquet"


def flows_file(folder: StorePath, iteration: int, to_part: int, from_part: int) -> StorePath:
    return scratch_dir(folder) / f"i{iteration:04d}" / f"flows-{to_part:05d}-{from_part:05d}.parquet"


@dataclass(frozen=True)
class OldHostGraph:
    """Where the last link DB version keeps its host graph (None: there is none yet)."""

    folder: StorePath | None = None
    parts: int = 0
    """Its parts; 0: the one-file layout written before the parts."""

    def files(self, part: int, parts: int) -> tuple[list, list, bool]:
        """Its (edge files, host files) holding ``part`` of ``parts``, and whether they hold
        other parts' rows too (the one-file layout, or another part count)."""
        if self.folder is None:
            return [], [], False
        if self.parts == parts:
            return [host_edges_file(self.folder, part)], [hosts_file(self.folder, part)], False
        if self.parts == 0:
            return [self.folder / OLD_HOST_EDGES], [self.folder / OLD_HOSTS], True
        return ([host_edges_file(self.folder, p) for p in range(self.parts)],
                [hosts_file(self.folder, p) for p in range(self.parts)], True)


def old_host_graph(store: Store, old_folder: StorePath | None, old_parts: int) -> OldHostGraph:
    """The last version's layout: one LIST-free check (its old one-file ``hosts.parquet``)."""
    if old_folder is None:
        return OldHostGraph()
    return OldHostGraph(old_folder, 0 if store.exists(old_folder / OLD_HOSTS) else old_parts)


@dataclass(frozen=True)
class BuildHostPartTask:
    """One part of the new host graph (:func:`build_host_part`); picklable."""

    store_uri: str
    config: Config
    inputs: StorePath | None
    """The segment's update inputs: the part's (host, from_host) pairs in
    ``host_links/bucket-N/`` (cycles/update/route.py; None: no new pairs)."""
    folder: StorePath
    part: int
    parts: int
    old: OldHostGraph = OldHostGraph()
    workers: int = 1


def source_of(con, store: Store, files: list, table_schema: pa.Schema, name: str) -> str:
    if files:
        return store.duckdb_source(con, list(files))
    con.register(name, table_schema.empty_table())
    return name


def build_host_part(task: BuildHostPartTask) -> dict:
    """The part's edges (from_host in the part) and hosts: last version's plus the
    segment's; writes ``host_edges-N``, the scratch ``nodes-N`` and ``edges-N``. Returns
    hosts, edges, the start ranks' sum and the hosts without one (new hosts)."""
    store, p, parts = Store(task.store_uri), task.part, task.parts
    con = connect(store, task.config, task.workers)
    try:
        old_edges, old_hosts, other_parts = task.old.files(p, parts)
        edges_before = source_of(con, store, old_edges, schema.LINK_HOST_EDGES, "hostrank_no_edges")
        hosts_before = source_of(con, store, old_hosts, schema.LINK_HOSTS, "hostrank_no_hosts")
        if other_parts:
            con.execute(f"""CREATE OR REPLACE TEMP TABLE hr_old_hosts AS
                SELECT host, rank FROM {hosts_before} WHERE {part_sql('host', parts)} = {p}""")
            # An old edge's source is an old host: a join with the part's hosts keeps its
            # edges at a hash lookup each, not an MD5 of every edge's source in each of P
            # tasks (the one-file migration at 10 M edges: 8 build tasks 44.5 -> 25.8 CPU-s,
            # scripts/bench_hostrank.py, load 4).
            edges_before = f"(SELECT * FROM {edges_before} WHERE from_host IN (SELECT host FROM hr_old_hosts))"
            hosts_before = "hr_old_hosts"
        pairs = source_of(con, store, routed_files(store, task.inputs, "host_links", p) if task.inputs else [],
                          HOST_LINKS, "hostrank_no_pairs")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE hr_edges AS
            SELECT DISTINCT from_host, to_host FROM (
                SELECT from_host, to_host FROM {edges_before}
                UNION ALL SELECT from_host, host AS to_host FROM {pairs}
                WHERE from_host <> host AND {part_sql('from_host', parts)} = {p})""")
        # Self-links make a host a node, not an edge (as networkx counts them, minus the loop).
        con.execute(f"""CREATE OR REPLACE TEMP TABLE hr_nodes AS
            SELECT {host_key_sql('host')} AS key, host, max(rank) AS rank0 FROM (
                SELECT host, rank FROM {hosts_before}
                UNION ALL SELECT host, NULL FROM {pairs} WHERE {part_sql('host', parts)} = {p}
                UNION ALL SELECT from_host, NULL FROM {pairs} WHERE {part_sql('from_host', parts)} = {p})
            GROUP BY host""")
        hosts, keys, missing = con.execute(
            "SELECT count(*), count(DISTINCT key), count(*) - count(rank0) FROM hr_nodes").fetchall()[0]
        # Summed exactly rounded (math.fsum), not by DuckDB's sum: its threads add in any
        # order, so a task run twice scaled the start ranks by sums a bit apart and wrote
        # other ranks (tests/update/test_hostrank.py failed ~1 run in 4).
        start_sum = math.fsum(con.sql("SELECT rank0 FROM hr_nodes WHERE rank0 IS NOT NULL").fetchnumpy()["rank0"])
        if keys != hosts:
            raise ValueError(f"host graph part {p}: two hosts share a 64-bit MD5 key; they cannot be ranked apart")
        store.write_batches(host_edges_file(task.folder, p), con.sql(
            "SELECT from_host, to_host FROM hr_edges ORDER BY from_host, to_host").to_arrow_reader(64 * 1024),
            schema.LINK_HOST_EDGES)
        store.write_batches(nodes_file(task.folder, p), con.sql(
            "SELECT key, host, rank0 FROM hr_nodes ORDER BY key").to_arrow_reader(64 * 1024), NODES)
        # A source's index is its row in nodes-N; targets sorted by part then key, so a
        # round's flows to each part are one slice, summed per target by np.add.reduceat.
        edges = store.write_batches(edges_file(task.folder, p), con.sql(f"""
            SELECT src, to_key, {part_of_key_sql('to_key', parts)}::INTEGER AS to_part FROM (
                SELECT (s.row - 1)::INTEGER AS src, {host_key_sql('e.to_host')} AS to_key
                FROM hr_edges e JOIN (SELECT host, row_number() OVER (ORDER BY key) AS row FROM hr_nodes) s
                    ON e.from_host = s.host)
            ORDER BY to_part, to_key, src""").to_arrow_reader(64 * 1024), EDGES)
    finally:
        con.close()
    return {"hosts": int(hosts), "edges": int(edges), "start_sum": float(start_sum), "start_missing": int(missing)}


# --- the iteration ---------------------------------------------------------------------
def next_ranks(flow: np.ndarray, dangling: float, hosts: int, damping: float) -> np.ndarray:
    """One PageRank step for some hosts: rank'(v) = (1 - d)/N + d × (dangling rank / N +
    Σ_{u→v} rank(u) / outdegree(u)); ``flow`` is the Σ, ``dangling`` the rank of every host
    without out-links (spread over all, as networkx does, so the ranks stay a distribution)."""
    return (1.0 - damping) / hosts + damping * (dangling / hosts + flow)


def start_ranks(rank0: np.ndarray, hosts: int, scale: float) -> np.ndarray:
    """Last cycle's ranks (NaN: a new host, 1/N), times ``scale`` so that all sum to 1."""
    return np.where(np.isnan(rank0), 1.0 / hosts, rank0) * scale


def start_scale(results: list[dict], hosts: int) -> float:
    """1 / the start ranks' sum, from the build tasks' partial sums."""
    total = sum(r["start_sum"] for r in results) + sum(r["start_missing"] for r in results) / hosts
    return 1.0 / total if total > 0 else 1.0


def iterate_in_memory(src: np.ndarray, dst: np.ndarray, w: np.ndarray, dangling: np.ndarray, rank: np.ndarray,
                      damping: float, iterations: int, tolerance: float) -> tuple[np.ndarray, int]:
    """PageRank over a whole graph in memory (edge arrays, ``w`` = 1/outdegree of the
    source); stops after ``iterations`` or once Σ|rank' - rank| < ``tolerance``."""
    n, done = len(rank), 0
    for done in range(1, int(iterations) + 1) if n else ():
        new = next_ranks(np.bincount(dst, weights=rank[src] * w, minlength=n), rank[dangling].sum(), n, damping)
        change = np.abs(new - rank).sum()
        rank = new
        if change < tolerance:
            break
    return rank, done


def read_part(store: Store, folder: StorePath, part: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """A part's host keys (sorted), out-degrees and edge columns."""
    keys = store.read_table(nodes_file(folder, part), columns=["key"]).column("key").to_numpy()
    table = store.read_table(edges_file(folder, part))
    edges = {name: table.column(name).to_numpy() for name in EDGES.names}
    return keys, np.bincount(edges["src"], minlength=len(keys)), edges


@dataclass(frozen=True)
class PartTask:
    """A task on one part of the host graph after an iteration (picklable)."""

    store_uri: str
    folder: StorePath
    part: int
    parts: int
    iteration: int
    """0: the start ranks; k: iteration k from iteration k-1's ranks and flows."""
    hosts: int


@dataclass(frozen=True)
class RankPartTask(PartTask):
    """One part's step of one PageRank iteration (:func:`rank_part`)."""

    damping: float = 0.85
    scale: float = 1.0
    """Iteration 0: :func:`start_scale`."""
    dangling: float = 0.0
    """Iteration k: the dangling mass of iteration k-1 (summed over the parts)."""
    last: bool = False
    """No flows to write: no iteration follows (``update.link_iterations`` reached)."""


def rank_part(task: RankPartTask) -> dict:
    """The part's ranks of ``task.iteration`` and its flows to every part (see the module
    doc); returns ``change`` (Σ|rank' - rank| of the part) and ``dangling`` (its hosts
    without out-links' rank)."""
    store, folder, p = Store(task.store_uri), task.folder, task.part
    keys, outdegree, edges = read_part(store, folder, p)
    if task.iteration == 0:
        rank0 = store.read_table(nodes_file(folder, p), columns=["rank0"]).column("rank0")
        rank = start_ranks(rank0.to_numpy(zero_copy_only=False).astype(np.float64), task.hosts, task.scale)
        change = 0.0
    else:
        before = store.read_table(ranks_file(folder, task.iteration - 1, p)).column("rank").to_numpy()
        flow = np.zeros(len(keys))
        for q in range(task.parts):
            got = store.read_table(flows_file(folder, task.iteration - 1, p, q), columns=["key", "flow"])
            # One row per target key in a file: plain fancy-index addition is exact.
            flow[np.searchsorted(keys, got.column("key").to_numpy())] += got.column("flow").to_numpy()
        rank = next_ranks(flow, task.dangling, task.hosts, task.damping)
        change = float(np.abs(rank - before).sum())
    store.write_table(ranks_file(folder, task.iteration, p), pa.table({"rank": rank}), RANKS)
    if not task.last:
        write_flows(store, folder, task.iteration, p, task.parts, rank, outdegree, edges)
    return {"change": change, "dangling": float(rank[outdegree == 0].sum())}


def write_flows(store: Store, folder: StorePath, iteration: int, part: int, parts: int, rank: np.ndarray,
                outdegree: np.ndarray, edges: dict) -> None:
    """Per target part, one row per target key: Σ rank(u)/outdegree(u) over the part's
    edges u → key, and their number (iteration 0's give inlink_hosts)."""
    src, to_key, to_part = edges["src"], edges["to_key"], edges["to_part"]
    firsts = np.flatnonzero(np.r_[True, to_key[1:] != to_key[:-1]]) if len(to_key) else np.zeros(0, np.int64)
    flow = np.add.reduceat(rank[src] / outdegree[src], firsts) if len(firsts) else np.zeros(0)
    links = np.diff(np.r_[firsts, len(to_key)]).astype(np.int32)
    bounds = np.searchsorted(to_part[firsts], np.arange(parts + 1))
    for q in range(parts):
        cut = slice(bounds[q], bounds[q + 1])
        store.write_table(flows_file(folder, iteration, q, part), pa.table(
            {"key": pa.array(to_key[firsts][cut], pa.uint64()), "flow": flow[cut], "links": links[cut]}), FLOWS)


@dataclass(frozen=True)
class HostPartTask(PartTask):
    """Write the part's ``hosts-N`` from iteration ``iteration``'s ranks (:func:`write_host_part`)."""


def write_host_part(task: HostPartTask) -> int:
    """The part's LINK_HOSTS rows (in key order); returns them."""
    store, folder, p = Store(task.store_uri), task.folder, task.part
    nodes = store.read_table(nodes_file(folder, p), columns=["key", "host"])
    keys = nodes.column("key").to_numpy()
    inlinks = np.zeros(len(keys), dtype=np.int64)
    for q in range(task.parts):
        got = store.read_table(flows_file(folder, 0, p, q), columns=["key", "links"])
        inlinks[np.searchsorted(keys, got.column("key").to_numpy())] += got.column("links").to_numpy()
    rank = store.read_table(ranks_file(folder, task.iteration, p)).column("rank").to_numpy()
    return write_hosts(store, hosts_file(folder, p), nodes.column("host"), rank, task.hosts, inlinks)


def write_hosts(store: Store, path: StorePath, hosts: pa.ChunkedArray | pa.Array, rank: np.ndarray, n: int,
                inlinks: np.ndarray) -> int:
    store.write_table(path, pa.table({"host": hosts, "rank": rank, "importance": rank * n,
                                      "inlink_hosts": inlinks.astype(np.int32)}), schema.LINK_HOSTS)
    return len(rank)


@dataclass(frozen=True)
class WholeGraphTask:
    """Rank every part at once in NumPy (:func:`rank_whole_graph`): a small host graph."""

    store_uri: str
    folder: StorePath
    parts: int
    hosts: int
    scale: float
    damping: float
    iterations: int
    tolerance: float


def rank_whole_graph(task: WholeGraphTask) -> int:
    """Every part's ``hosts-N`` from one in-memory PageRank; returns the iterations run."""
    store, folder = Store(task.store_uri), task.folder
    parts = [read_part(store, folder, p) for p in range(task.parts)]
    offsets = np.cumsum([0] + [len(keys) for keys, _, _ in parts])
    src, dst = [], []
    for p, (_, _, edges) in enumerate(parts):
        src.append(edges["src"].astype(np.int64) + offsets[p])
        target = np.empty(len(edges["to_key"]), dtype=np.int64)
        bounds = np.searchsorted(edges["to_part"], np.arange(task.parts + 1))
        for q in range(task.parts):
            cut = slice(bounds[q], bounds[q + 1])
            target[cut] = offsets[q] + np.searchsorted(parts[q][0], edges["to_key"][cut])
        dst.append(target)
    src, dst = np.concatenate(src), np.concatenate(dst)
    outdegree = np.concatenate([out for _, out, _ in parts])
    rank0 = np.concatenate([store.read_table(nodes_file(folder, p), columns=["rank0"]).column("rank0")
                            .to_numpy(zero_copy_only=False).astype(np.float64) for p in range(task.parts)])
    rank, done = iterate_in_memory(src, dst, 1.0 / outdegree[src], outdegree == 0,
                                   start_ranks(rank0, task.hosts, task.scale), task.damping, task.iterations,
                                   task.tolerance)
    inlinks = np.bincount(dst, minlength=len(rank))
    for p in range(task.parts):
        cut = slice(offsets[p], offsets[p + 1])
        hosts = store.read_table(nodes_file(folder, p), columns=["host"]).column("host")
        write_hosts(store, hosts_file(folder, p), hosts, rank[cut], task.hosts, inlinks[cut])
    return done


# --- the coordinator's side ------------------------------------------------------------
def rank_host_graph(store: Store, config: Config, executor, inputs: StorePath | None, folder: StorePath,
                    parts: int, old: OldHostGraph, in_memory_edges: int = IN_MEMORY_EDGES) -> tuple[int, int, int]:
    """The new version's host graph and ranks in ``parts`` parts, every step a task on
    ``executor``; here only sums of P numbers a round. Returns (hosts, edges, iterations)."""
    u = config.update
    built = executor.map(build_host_part, [
        BuildHostPartTask(store.uri, config, inputs, folder, p, parts, old, getattr(executor, "workers", 1))
        for p in range(parts)])
    hosts, edges = sum(r["hosts"] for r in built), sum(r["edges"] for r in built)
    if not hosts:  # every hosts-N is there all the same: generate reads them by name
        for p in range(parts):
            store.write_table(hosts_file(folder, p), schema.LINK_HOSTS.empty_table(), schema.LINK_HOSTS)
        store.delete_dir(scratch_dir(folder))
        return 0, 0, 0
    scale = start_scale(built, hosts)
    if edges <= in_memory_edges:
        done = executor.map(rank_whole_graph, [WholeGraphTask(store.uri, folder, parts, hosts, scale, u.link_damping,
                                                              u.link_iterations, u.link_tolerance)])[0]
    else:
        done = iterate_parts(store, executor, folder, parts, hosts, scale, u.link_damping, u.link_iterations,
                             u.link_tolerance)
        executor.map(write_host_part, [HostPartTask(store.uri, folder, p, parts, done, hosts) for p in range(parts)])
    store.delete_dir(scratch_dir(folder))
    return hosts, edges, done


def iterate_parts(store: Store, executor, folder: StorePath, parts: int, hosts: int, scale: float, damping: float,
                  iterations: int, tolerance: float) -> int:
    """Rounds of :func:`rank_part` until the summed change is below ``tolerance`` or
    ``iterations`` ran; returns the last iteration (whose ranks are the result)."""
    def round_of(iteration: int, dangling: float = 0.0) -> list[dict]:
        return executor.map(rank_part, [
            RankPartTask(store.uri, folder, p, parts, iteration, hosts, damping, scale, dangling,
                         last=iteration >= iterations) for p in range(parts)])

    dangling = sum(r["dangling"] for r in round_of(0))
    done = 0
    for done in range(1, int(iterations) + 1):
        results = round_of(done, dangling)
        dangling = sum(r["dangling"] for r in results)
        if sum(r["change"] for r in results) < tolerance:
            break
    return done
