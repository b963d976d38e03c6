"""Update's link DB merge as bucket tasks (cycles/update/linkgraph.py merge_link_bucket).

A task retried (its worker lost, the task run again elsewhere) writes the same files over
the first attempt's: two segments applied with every task run twice give the same link DB,
row by row, as with every task run once — and the rows are the distinct linking hosts.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from cycles.tables import schema
from cycles.config import Config
from cycles.executor import InProcess
from cycles.storage.store import Store
from cycles.update.linkgraph import LINKDB, install_linkdb, merge_link_bucket, start_linkdb
from cycles.update.route import HOST_LINKS, ROUTED_INLINKS, routed_folder
from cycles.urls import host_hashes

BUCKETS = 4

SEGMENTS = {
    "s1": [("http://t.example/a", "h1.example"), ("http://t.example/a", "h2.example"),
           ("http://u.example/", "h1.example"), ("http://v.example/x", "t.example")],
    "s2": [("http://t.example/a", "h1.example"), ("http://t.example/a", "h3.example"),
           ("http://w.example/", "u.example"), ("http://v.example/x", "h2.example")],
}


def write_inputs(store: Store, segment: str, links: list[tuple[str, str]]):
    """What update's routing tasks write for ``links`` (url, linking host): each bucket's
    in-links and the (host, linking host) pairs."""
    inputs = store.path("inputs", segment)
    urls = [url for url, _ in links]
    hosts = [url.split("/")[2] for url in urls]
    hashes = host_hashes(hosts).to_pylist()
    for bucket in range(BUCKETS):
        rows = [(u, h, f) for (u, f), h in zip(links, hashes) if h % BUCKETS == bucket]
        if rows:
            table = pa.table({"url": [r[0] for r in rows], "host_hash": pa.array([r[1] for r in rows], pa.uint64()),
                              "from_host": [r[2] for r in rows]})
            store.write_table(routed_folder(inputs, "inlinks", bucket) / "g0.parquet", table, ROUTED_INLINKS)
    pairs = pa.table({"host": hosts, "from_host": [f for _, f in links]})
    for part in range(BUCKETS):  # every pair in every part: each build task keeps its own
        store.write_table(routed_folder(inputs, "host_links", part) / "g0.parquet", pairs, HOST_LINKS)
    return inputs


def apply(store: Store, config: Config, segment: str, attempts: int) -> Counter:
    counters = Counter({"linkgraph/links": len(SEGMENTS[segment])})
    inputs = write_inputs(store, segment, SEGMENTS[segment])
    update = start_linkdb(store, config, inputs, BUCKETS, 1, counters)
    done = {}
    for _ in range(attempts):  # every task once, then every task again: the retries
        for task in update.tasks:
            done[task.bucket] = merge_link_bucket(task)
    install_linkdb(store, config, InProcess(), update, [done[b] for b in sorted(done)], inputs, segment, counters)
    return counters


def link_db(store: Store) -> dict[str, list]:
    folder = store.path(LINKDB, store.manifest(LINKDB).version)
    tables = {}
    for kind in ("inlinks", "urls"):
        tables[kind] = [pq.read_table(folder / f"{kind}-{b:05d}.parquet").to_pylist() for b in range(BUCKETS)]
    for kind in ("hosts", "host_edges"):
        tables[kind] = [pq.read_table(folder / f"{kind}-{b:05d}.parquet").to_pylist() for b in range(BUCKETS)]
    return tables


def test_link_bucket_tasks_run_twice_give_the_same_link_db(tmp_path):
    config = Config()
    once, twice = Store(tmp_path / "once"), Store(tmp_path / "twice")
    for segment in SEGMENTS:
        counted_once = apply(once, config, segment, attempts=1)
        counted_twice = apply(twice, config, segment, attempts=2)
        assert counted_once["linkgraph/inlinks"] == counted_twice["linkgraph/inlinks"]
    assert link_db(once) == link_db(twice)
    urls = {r["url"]: r["inlink_hosts"] for rows in link_db(twice)["urls"] for r in rows}
    # Distinct linking hosts over both segments: h1 linked t.example/a in both, counted once.
    assert urls == {"http://t.example/a": 3, "http://u.example/": 1, "http://v.example/x": 2, "http://w.example/": 1}
    assert counted_twice["linkgraph/inlinks"] == 7
    # Every row sits in its own bucket's file.
    for bucket, rows in enumerate(link_db(twice)["inlinks"]):
        assert all(r["host_hash"] % BUCKETS == bucket for r in rows)
    assert twice.manifest(LINKDB).applied_segments[-2:] == ("s1", "s2")
    assert schema.LINK_INLINKS.names == list(pq.read_schema(
        twice.path(LINKDB, twice.manifest(LINKDB).version) / "inlinks-00000.parquet").names)
