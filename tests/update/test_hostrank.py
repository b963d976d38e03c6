"""The host graph and its PageRank as tasks (cycles/update/hostrank.py).

Both ways of ranking — one NumPy task for a small graph, rounds of per-part tasks for a
large one — give networkx's ranks (1e-6) on fixture graphs with dangling hosts, in one part
and in several, from uniform ranks and from an earlier version's ranks (new hosts added);
a link DB written before the parts (one host_edges.parquet, one hosts.parquet) or with
another part count is read; and every task run twice (a retry, a duplicate) writes the same
link DB as every task run once.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.tables import schema
from cycles.config import Config
from cycles.tables.crawldb import plain_connection
from cycles.executor import InProcess
from cycles.storage.store import Store
from cycles.update import hostrank
from cycles.update.hostrank import OldHostGraph, host_key_sql, rank_host_graph
from cycles.update.route import HOST_LINKS, routed_folder
from tests.support.graphs import GRAPHS, networkx_ranks

PARTITIONED, WHOLE = 0, 10**9
"""``in_memory_edges``: every graph ranked by rounds of part tasks, or by one NumPy task."""


def config(tolerance: float = 1e-9) -> Config:
    c = Config()
    c.update.link_iterations, c.update.link_tolerance = 1000, tolerance
    return c


def write_pairs(store: Store, name: str, pairs: list[tuple[str, str]], parts: int):
    """What update's routing tasks write: (host, from_host) pairs, in two groups' files, here
    every pair in every part's folder (each build task keeps those of its part)."""
    inputs = store.path("inputs", name)
    for i, half in enumerate((pairs[::2], pairs[1::2])):
        for part in range(parts):
            store.write_table(routed_folder(inputs, "host_links", part) / f"g{i}.parquet",
                              pa.table({"host": [b for _, b in half], "from_host": [a for a, _ in half]}), HOST_LINKS)
    return inputs


def rank(store: Store, name: str, pairs, parts: int, old: OldHostGraph = OldHostGraph(),
         in_memory_edges: int = PARTITIONED, executor=None, cfg: Config | None = None):
    folder = store.path("linkdb", name)
    result = rank_host_graph(store, cfg or config(), executor or InProcess(), write_pairs(store, name, pairs, parts),
                             folder, parts, old, in_memory_edges)
    return folder, result


def written(store: Store, folder, parts: int, kind: str = "hosts") -> list[list[dict]]:
    return [pq.read_table(folder / f"{kind}-{p:05d}.parquet").to_pylist() for p in range(parts)]


def ranks_of(store, folder, parts) -> dict[str, float]:
    return {r["host"]: r["rank"] for rows in written(store, folder, parts) for r in rows}


def assert_networkx(store, folder, parts, pairs):
    ours, expected = ranks_of(store, folder, parts), networkx_ranks(pairs, Config().update.link_damping)
    assert ours.keys() == expected.keys()
    assert max(abs(ours[h] - expected[h]) for h in ours) < 1e-6
    assert abs(sum(ours.values()) - 1) < 1e-9


@pytest.mark.parametrize("name", ["chain_with_dangling_end", "self_links_and_duplicates", "random_60_hosts"])
@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("in_memory_edges", [PARTITIONED, WHOLE])
def test_host_graph_tasks_equal_networkx(name, parts, in_memory_edges, store):
    pairs = GRAPHS[name]
    folder, (hosts, edges, iterations) = rank(store, "v1", pairs, parts, in_memory_edges=in_memory_edges)
    assert_networkx(store, folder, parts, pairs)
    assert hosts == len({h for pair in pairs for h in pair}) and edges == len({(a, b) for a, b in pairs if a != b})
    assert 1 < iterations < 1000
    # Each host in its own part, each edge in its source's part, none twice; inlink_hosts and
    # importance as the one-file layout had them; the rounds' scratch is gone.
    hash_of = dict(plain_connection().execute(
        f"SELECT h, {host_key_sql('h')} FROM unnest(?) t(h)", [sorted(ranks_of(store, folder, parts))]).fetchall())
    for p, rows in enumerate(written(store, folder, parts)):
        assert all(hash_of[r["host"]] % parts == p for r in rows)
        for r in rows:
            assert r["inlink_hosts"] == len({a for a, b in pairs if b == r["host"] and a != b})
            assert r["importance"] == pytest.approx(r["rank"] * hosts)
    for p, rows in enumerate(written(store, folder, parts, "host_edges")):
        assert all(hash_of[r["from_host"]] % parts == p for r in rows)
    assert sum(len(rows) for rows in written(store, folder, parts, "host_edges")) == edges
    assert not store.exists(hostrank.scratch_dir(folder))


@pytest.mark.parametrize("in_memory_edges", [PARTITIONED, WHOLE])
def test_started_from_earlier_ranks_with_new_hosts(in_memory_edges, store):
    """A second version over the first (two new hosts, one new edge): networkx's ranks of
    the union, in fewer iterations than from uniform ranks."""
    first, later = GRAPHS["random_60_hosts"], [("h3.example", "new1.example"), ("new2.example", "new2.example")]
    cfg = config(1e-12)
    old_folder, _ = rank(store, "v1", first, 3, in_memory_edges=in_memory_edges, cfg=cfg)
    folder, (_, _, warm) = rank(store, "v2", later, 3, OldHostGraph(old_folder, 3), in_memory_edges, cfg=cfg)
    assert_networkx(store, folder, 3, first + later)
    _, (_, _, cold) = rank(store, "cold", first + later, 3, in_memory_edges=in_memory_edges, cfg=cfg)
    assert warm < cold


@pytest.mark.parametrize("old_parts", [0, 2])
def test_reads_a_link_db_of_one_file_or_other_parts(old_parts, store):
    """An existing store keeps working: a version written before the parts (its host graph
    in one host_edges.parquet and one hosts.parquet, found by hostrank.old_host_graph) or
    with another part count (after `crawl rebucket`) is the start of the next, in 3 parts."""
    first, later = GRAPHS["random_60_hosts"], [("h1.example", "new.example")]
    old_folder, _ = rank(store, "v1", first, max(old_parts, 1))
    if old_parts == 0:  # as update wrote it before: one file each, sorted
        edges = [r for rows in written(store, old_folder, 1, "host_edges") for r in rows]
        hosts = [r for rows in written(store, old_folder, 1) for r in rows]
        store.write_table(old_folder / "host_edges.parquet", pa.Table.from_pylist(edges), schema.LINK_HOST_EDGES)
        store.write_table(old_folder / "hosts.parquet", pa.Table.from_pylist(hosts), schema.LINK_HOSTS)
        for kind in ("hosts", "host_edges"):
            store.delete(old_folder / f"{kind}-00000.parquet")
    old = hostrank.old_host_graph(store, old_folder, max(old_parts, 1))
    assert old.parts == old_parts
    folder, (hosts, edges, _) = rank(store, "v2", later, 3, old)
    assert_networkx(store, folder, 3, first + later)
    assert edges == len({(a, b) for a, b in first + later if a != b})
    if old_parts == 0:
        assert hostrank.current_hosts_files(store, old_folder, 1) == (old_folder / "hosts.parquet",)
    assert hostrank.current_hosts_files(store, folder, 3) == tuple(folder / f"hosts-{p:05d}.parquet" for p in range(3))


def test_an_empty_host_graph_still_has_every_part(store):
    folder = store.path("linkdb", "v1")
    assert rank_host_graph(store, config(), InProcess(), None, folder, 2, OldHostGraph()) == (0, 0, 0)
    assert written(store, folder, 2) == [[], []] and written(store, folder, 2, "host_edges") == [[], []]


class EveryTaskTwice:
    """A worker lost after its task wrote (the task run again) and a speculative duplicate:
    every task runs, then every task again in reverse order; the first results are kept."""

    workers = 1

    def map(self, fn, tasks):
        first = [fn(task) for task in tasks]
        for task in reversed(tasks):
            fn(task)
        return first


@pytest.mark.parametrize("in_memory_edges", [PARTITIONED, WHOLE])
def test_tasks_run_twice_write_the_same_link_db(in_memory_edges, tmp_path):
    pairs, later = GRAPHS["random_60_hosts"], GRAPHS["disconnected_parts"]
    # A few rounds are enough to show it: the start, rounds reading the last one's flows, and
    # the last (link_iterations reached: no flows written). To 1e-6 it took 72 rounds, each
    # run three times: 3 CPU-s of the fast tier's small Parquet reads and writes.
    cfg = config(1e-6)
    cfg.update.link_iterations = 4
    results = {}
    for how, executor in (("once", InProcess()), ("twice", EveryTaskTwice())):
        store = Store(tmp_path / how)
        old_folder, first = rank(store, "v1", pairs, 3, executor=executor, in_memory_edges=in_memory_edges, cfg=cfg)
        folder, second = rank(store, "v2", later, 3, OldHostGraph(old_folder, 3), in_memory_edges, executor, cfg)
        assert first[2] == second[2] == 4  # the rounds stopped at link_iterations
        results[how] = (first, second, written(store, folder, 3), written(store, folder, 3, "host_edges"),
                        sorted(p.relative_to(store.path()).as_posix() for p in store.path("linkdb").rglob("*")))
    assert results["once"] == results["twice"]


def test_host_key_is_md5():
    """The parts and keys of stored host graphs depend on it: pinned to MD5 (bytes 8-15,
    little-endian), so a DuckDB that changed md5_number_lower would fail here, not misplace hosts."""
    hosts = ["a.example", "www.example.com", "xn--bcher-kva.example", "127.0.0.1"]
    got = dict(plain_connection().execute(f"SELECT h, {host_key_sql('h')} FROM unnest(?) t(h)", [hosts]).fetchall())
    assert got == {h: int.from_bytes(hashlib.md5(h.encode()).digest()[8:], "little") for h in hosts}
