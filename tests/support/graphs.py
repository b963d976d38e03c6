"""Link graphs with known PageRanks, and networkx as the reference."""

from __future__ import annotations

import random

import networkx as nx


def random_graph(nodes: int, edges: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    names = [f"h{i}.example" for i in range(nodes)]
    # A fifth of the hosts never link (dangling): only sources from the rest.
    sources = names[: nodes * 4 // 5]
    return [(rng.choice(sources), rng.choice(names)) for _ in range(edges)]


GRAPHS = {
    "chain_with_dangling_end": [("a", "b"), ("b", "c"), ("d", "c")],
    "self_links_and_duplicates": [("a", "a"), ("a", "b"), ("a", "b"), ("b", "a"), ("c", "c"), ("b", "c")],
    "disconnected_parts": [("a", "b"), ("b", "a"), ("c", "d"), ("d", "e"), ("e", "c"), ("f", "f")],
    "star_into_one_host": [(f"s{i}", "hub") for i in range(9)] + [("hub", "s0")],
    "random_60_hosts": random_graph(60, 300, seed=13),
}


def networkx_ranks(pairs: list[tuple[str, str]], damping: float) -> dict[str, float]:
    """networkx's PageRank of the host graph: every host named is a node, self-links and
    repeated links are not edges (the link graph's definition)."""
    graph = nx.DiGraph()
    graph.add_nodes_from({h for pair in pairs for h in pair})
    graph.add_edges_from((a, b) for a, b in pairs if a != b)
    return nx.pagerank(graph, alpha=damping, tol=1e-13, max_iter=10_000)
