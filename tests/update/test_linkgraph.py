"""The link graph (cycles/update/linkgraph.py) and generate's ranking by it.

The PageRank of the host graph is checked against networkx on fixture graphs (dangling
hosts, self-links, disconnected parts, a random graph); the link DB update writes is checked
row by row (distinct linking hosts, nofollow and same-host links left out); and generate is
shown to rank a deep page many hosts link to before shallow pages nobody links to, and to
give a host linked by many others a larger budget — while ``generate.ranking = 'depth'``
ranks and budgets as before.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import datetime as dt
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cycles.config import Config
from cycles.tables.crawldb import plain_connection
from cycles.generate.generate import generate
from cycles.commands.inject import inject
from cycles.storage.store import Store, utcnow
from cycles.update.linkgraph import LINKDB, host_pagerank
from cycles.update.update import update_segment
from tests.support.transitions import fetch_result
from tests.support.graphs import GRAPHS, networkx_ranks


def our_ranks(pairs, damping, tolerance, in_memory_edges):
    con = plain_connection()
    con.register("nodes_in", pa.table({"host": sorted({h for pair in pairs for h in pair})}))
    edges = sorted({(a, b) for a, b in pairs if a != b})
    con.register("edges_in", pa.table({"from_host": [a for a, _ in edges], "to_host": [b for _, b in edges]}))
    table, iterations = host_pagerank(con, "nodes_in", "edges_in", damping, 1000, tolerance, in_memory_edges)
    assert 1 < iterations < 1000  # it stopped at the tolerance
    return dict(con.execute(f"SELECT host, rank FROM {table}").fetchall())


def assert_equal_ranks(ours, expected):
    assert ours.keys() == expected.keys()
    assert max(abs(ours[h] - expected[h]) for h in ours) < 1e-6
    assert abs(sum(ours.values()) - 1) < 1e-9  # dangling rank is spread, not lost


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("damping", [0.85, 0.5])
def test_host_pagerank_equals_networkx(name, damping):
    assert_equal_ranks(our_ranks(GRAPHS[name], damping, 1e-13, in_memory_edges=10**9),
                       networkx_ranks(GRAPHS[name], damping))


@pytest.mark.parametrize("name", ["chain_with_dangling_end", "disconnected_parts", "random_60_hosts"])
def test_host_pagerank_in_duckdb_equals_networkx(name):
    """The path for host graphs too large for memory: the same ranks, computed by DuckDB
    (about 40 ms an iteration here, hence fewer graphs and a looser stop)."""
    assert_equal_ranks(our_ranks(GRAPHS[name], 0.85, 1e-8, in_memory_edges=0), networkx_ranks(GRAPHS[name], 0.85))


def test_pagerank_from_earlier_ranks_reaches_the_same_ranks():
    """Started from last cycle's ranks (three hosts new, so the rest does not sum to 1), the
    iteration reaches networkx's ranks, in fewer iterations than from uniform."""
    pairs = GRAPHS["random_60_hosts"]
    expected = networkx_ranks(pairs, 0.85)
    con = plain_connection()
    con.register("nodes_in", pa.table({"host": sorted(expected)}))
    edges = sorted({(a, b) for a, b in pairs if a != b})
    con.register("edges_in", pa.table({"from_host": [a for a, _ in edges], "to_host": [b for _, b in edges]}))
    new_hosts = {"h57.example", "h58.example", "h59.example"}
    earlier = {h: r for h, r in expected.items() if h not in new_hosts}
    con.register("earlier", pa.table({"host": list(earlier), "rank": list(earlier.values())}))
    table, warm = host_pagerank(con, "nodes_in", "edges_in", 0.85, 1000, 1e-12, start="earlier")
    assert_equal_ranks(dict(con.execute(f"SELECT host, rank FROM {table}").fetchall()), expected)
    _, cold = host_pagerank(con, "nodes_in", "edges_in", 0.85, 1000, 1e-12)
    assert warm < cold


# --- update writes the link DB; generate ranks by it ---------------------------------------
DEEP = "http://t.example/deep"
HUBS = [f"http://hub{i}.example/" for i in range(5)]
SHALLOW = [f"http://t.example/p{i}" for i in range(5)]


@pytest.fixture(scope="module")
def linked_once(tmp_path_factory):
    """One cycle: five hub hosts each link to t.example/deep (as if from depth 2, so the page
    is 3 hops from a seed); t.example/ links to five pages at depth 1. Also links that must not
    count: a nofollow link from hub5, a same-host link, the same hub linking twice. Made once
    per module (an inject, generate and update: most of each test's time when every test made
    its own); each test works on a copy (:func:`linked_store`)."""
    tmp = tmp_path_factory.mktemp("linked")
    store, config, result = linked(Store(tmp / "data"), tmp, link_rank_interval_s=0)  # merged and ranked in every update
    return store.path(), config, result


@pytest.fixture
def linked_store(linked_once, tmp_path):
    """A copy of :func:`linked_once`'s store and config, the test's own to change."""
    built, config, result = linked_once
    shutil.copytree(built, tmp_path / "data")
    return Store(tmp_path / "data"), copy.deepcopy(config), result


def linked(store, tmp_path, link_rank_interval_s: float):
    config = Config()
    config.db.buckets = 2
    config.update.link_rank_interval_s = link_rank_interval_s
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(HUBS + ["http://t.example/", "http://hub5.example/"]) + "\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    pages = HUBS + ["http://t.example/", "http://hub5.example/"]
    now = utcnow()
    results = [{"url": u, "host": u.split("/")[2], "outcome": "ok", "fetched_at": now, "http_status": 200,
                "content_hash": f"hash{i}", "text": f"page {i}"} for i, u in enumerate(pages)]
    links = [{"from_url": hub, "url": DEEP, "nofollow": False, "depth": 3} for hub in HUBS]
    links += [{"from_url": HUBS[0], "url": "http://T.example/deep", "nofollow": False, "depth": 3},  # same URL, other spelling
              {"from_url": "http://hub5.example/", "url": DEEP, "nofollow": True, "depth": 3},
              {"from_url": "http://t.example/", "url": DEEP, "nofollow": False, "depth": 3}]
    links += [{"from_url": "http://t.example/", "url": u, "nofollow": False, "depth": 1} for u in SHALLOW]
    fetch_result(store, segment, results, links)
    result = update_segment(store, config, segment)
    return store, config, result


def link_rows(store, kind):
    folder = store.path(LINKDB, store.manifest(LINKDB).version)
    if kind == "hosts":
        return {r["host"]: r for f in sorted(folder.glob("hosts-*.parquet")) for r in pq.read_table(f).to_pylist()}
    return {r["url"]: r for f in sorted(folder.glob(f"{kind}-*.parquet")) for r in pq.read_table(f).to_pylist()}


def test_update_counts_distinct_linking_hosts(linked_store):
    store, _, result = linked_store
    urls = link_rows(store, "urls")
    assert urls[DEEP]["inlink_hosts"] == 5  # not hub5 (nofollow), not t.example (same host), hub0 once
    assert all(u not in urls for u in SHALLOW)  # linked from their own host only
    folder = store.path(LINKDB, store.manifest(LINKDB).version)
    inlinks = [r for f in folder.glob("inlinks-*.parquet") for r in pq.read_table(f).to_pylist()]
    assert sorted(r["from_host"] for r in inlinks if r["url"] == DEEP) == sorted(h.split("/")[2] for h in HUBS)
    hosts = link_rows(store, "hosts")
    assert hosts["t.example"]["inlink_hosts"] == 5
    assert hosts["t.example"]["importance"] > 1 > hosts["hub0.example"]["importance"]
    # Six hosts: hub5 links only with nofollow, so it is not in the graph.
    assert result.counters["linkgraph/hosts"] == 6 and result.counters["linkgraph/host_edges"] == 5


def test_update_again_adds_only_new_linking_hosts(linked_store):
    """The link DB accumulates across cycles: a second segment's links from a known host to
    the same page change nothing; a new host's link counts."""
    store, config, _ = linked_store
    later = utcnow() + dt.timedelta(seconds=config.generate.lease_s + 1)
    segment = generate(store, config, now=later, top_n=1).segment
    links = [{"from_url": HUBS[1], "url": DEEP, "nofollow": False, "depth": 3},
             {"from_url": "http://other.example/", "url": DEEP, "nofollow": False, "depth": 3}]
    fetch_result(store, segment, [], links)
    update_segment(store, config, segment, now=later)
    assert link_rows(store, "urls")[DEEP]["inlink_hosts"] == 6


def chosen(store, config, top_n, now=None):
    segment = generate(store, config, top_n=top_n, now=now).segment
    return [r["url"] for r in pq.read_table(store.segment_dir(segment) / "fetchlist").sort_by(
        [("score", "descending")]).to_pylist()]


def test_links_rank_a_deep_page_many_hosts_link_to_first(linked_store):
    store, config, _ = linked_store
    assert chosen(store, config, top_n=1) == [DEEP]
    depth = dataclasses.replace(config, generate=dataclasses.replace(config.generate, ranking="depth"))
    later = utcnow() + dt.timedelta(seconds=config.generate.lease_s + 1)
    assert chosen(store, depth, top_n=1, now=later)[0] in SHALLOW  # depth 1 before depth 3


def test_an_important_host_gets_a_larger_budget(linked_store):
    store, config, _ = linked_store
    config.generate.max_urls_per_host = 2
    importance = link_rows(store, "hosts")["t.example"]["importance"]
    budget = round(2 * min(config.generate.host_budget_max_factor, max(1.0, importance)))
    assert budget > 2
    per_host = Counter(u.split("/")[2] for u in chosen(store, config, top_n=100))
    assert per_host["t.example"] == min(budget, 6)
    depth = dataclasses.replace(config, generate=dataclasses.replace(config.generate, ranking="depth"))
    later = utcnow() + dt.timedelta(seconds=config.generate.lease_s + 1)
    assert Counter(u.split("/")[2] for u in chosen(store, depth, top_n=100, now=later))["t.example"] == 2


def test_link_graph_off_leaves_no_link_db(store, tmp_path):
    config = Config()
    config.db.buckets = 2
    config.update.link_graph = False
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    inject(store, config, seeds)
    segment = generate(store, config).segment
    fetch_result(store, segment, [], [{"from_url": "http://a.example/", "url": "http://b.example/",
                                       "nofollow": False, "depth": 1}])
    update_segment(store, config, segment)
    assert store.manifest(LINKDB) is None
    assert generate(store, config).urls == 2  # a (no result: due again) and b, ranked without a link DB


def test_recover_reinstates_a_lost_link_db(linked_store):
    """The link DB is versioned like the crawl DB: every file sealed, `crawl recover` puts
    back a lost CURRENT (until then generate and update stop and say so)."""
    from cycles.errors import StoreError
    from cycles.commands.recover import recover

    store, config, _ = linked_store
    manifest = store.manifest(LINKDB)
    store.path(LINKDB, "CURRENT").unlink()
    with pytest.raises(StoreError, match="crawl recover"):
        generate(store, config)
    results = {r.table: r for r in recover(store)}
    assert results[LINKDB].action == "reinstated" and store.manifest(LINKDB) == manifest
    assert chosen(store, config, top_n=1) == [DEEP]


def test_links_wait_as_pending_deltas_until_their_merge_is_due(store, tmp_path):
    """On its own schedule (update.link_rank_interval_s, the default): update only keeps the
    segment's links as pending files; `crawl compact` merges them and ranks the host graph,
    to the link DB an update in every cycle builds, and not again before the interval."""
    from cycles.commands.compact import compact
    from cycles.update.linkgraph import link_merge_due, pending_files

    _, config, result = linked(store, tmp_path, link_rank_interval_s=3600)
    assert store.manifest(LINKDB) is None and pending_files(store)  # nothing merged by the update
    assert result.counters["linkgraph/pending_files"] > 0
    assert link_merge_due(store, config)  # no link DB yet: due at once
    assert compact(store, config).links
    assert not pending_files(store)
    urls = link_rows(store, "urls")
    assert urls[DEEP]["inlink_hosts"] == 5 and link_rows(store, "hosts")["t.example"]["importance"] > 1
    later = utcnow() + dt.timedelta(seconds=config.generate.lease_s + 1)
    segment = generate(store, config, now=later, top_n=1).segment
    fetch_result(store, segment, [], [{"from_url": "http://other.example/", "url": DEEP, "nofollow": False,
                                       "depth": 3}])
    update_segment(store, config, segment, now=later)
    assert pending_files(store) and not link_merge_due(store, config)  # merged less than an hour ago
    assert link_merge_due(store, config, now=time.time() + 3600)  # the positive control: due an hour on
    assert not compact(store, config).links and link_rows(store, "urls")[DEEP]["inlink_hosts"] == 5
    assert compact(store, config, everything=True).links  # `crawl compact --all`
    assert link_rows(store, "urls")[DEEP]["inlink_hosts"] == 6
