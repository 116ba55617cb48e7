"""checkers/cycles.py's search for the shortest cycle through a component's edges gives, on
seeded random graphs and filtered views of them, a cycle of the rule as stated: networkx's
shortest path v ⇝ u for each of the first MAX_CYCLE_SEARCHES_PER_SCC edges (u, v), the first
shortest cycle kept (the same edge and length; the way back is a shortest path of the graph). And perkey's sort-based helpers agree with numpy's own."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np

from checkers import perkey
from checkers.cycles import MAX_CYCLE_SEARCHES_PER_SCC, shortest_cycle


def stated(graph: nx.DiGraph, edges: list[tuple[int, int]]) -> list[int] | None:
    best = None
    for u, v in edges[:MAX_CYCLE_SEARCHES_PER_SCC]:
        try:
            path = nx.shortest_path(graph, v, u)
        except nx.NetworkXNoPath:
            continue
        if best is None or len(path) + 1 < len(best):
            best = [u] + path
    return best


def test_shortest_cycle_is_the_stated_one():
    cycles_found = 0
    for seed in range(300):
        rng = random.Random(seed)
        n = rng.randint(2, 60)
        graph = nx.DiGraph()
        for _ in range(rng.randint(1, 3 * n)):
            a, b = rng.randrange(n), rng.randrange(n)
            if a != b:
                graph.add_edge(a, b, kind=rng.choice("xy"))
        if seed % 3 == 0:  # the search also runs on filtered views (cycles.search's `only`)
            graph = nx.subgraph_view(graph, filter_edge=lambda a, b, g=graph: g[a][b]["kind"] == "x")
        edges = list(graph.edges)
        rng.shuffle(edges)
        if seed % 5 == 0:
            edges = edges * 2  # more edges than are searched
        successors = [list(graph.successors(node)) if node in graph else [] for node in range(n)]
        found = shortest_cycle(successors, edges)
        expected = stated(graph, edges)
        if expected is None:
            assert found is None, seed
        else:
            assert found is not None and found[:2] == expected[:2] and len(found) == len(expected), seed
            assert found[-1] == found[0] and all(graph.has_edge(a, b) for a, b in zip(found, found[1:])), seed
        cycles_found += found is not None
    assert cycles_found > 100


def test_sort_based_helpers_agree_with_numpy():
    rng = np.random.default_rng(5)
    for size in (0, 1, 2, 7, 1000):
        values = rng.integers(-50, 50, size)
        assert np.array_equal(perkey._unique(values), np.unique(values))
        ops = np.sort(rng.integers(0, 20, size))
        rows = perkey.Rows({"op": ops, "value": values})
        pairs = {(int(o), int(v)) for o, v in zip(ops, values)}
        stated_two = len(pairs) > len({o for o, _ in pairs})  # some op with two distinct values
        assert perkey._writes_two_values(rows) == stated_two, size
