"""G0, G1c and their -realtime variants: strongly connected components and cycle search with
networkx on the driver, over the dependency edges the per-key pass (perkey.edges) found and
pruned as stated here.

Vertices are completed send/poll/txn ops (ok, info and fail, as in Jepsen). Edges:
  ww  writer of the value just before v in the version order → writer of v (if ww_deps)
  wr  writer of v → every op that read v
  rt  A completed ok before B was invoked (Elle's realtime order, transitively reduced; an
      info op never completes and a failed one did not happen, so neither precedes anything)
Jepsen never built rw edges, so G-single/G2/G1b cannot appear; neither do they here.

Pruning (perkey.edges), before anything leaves Spark (with plain consumers the full graph is one giant
component, reference/pyspark.md §4):
  * a read-only op R has no data out-edge, so it is on a cycle only through its realtime
    edges, and only if it completed ok. A wr edge X→R is kept when R also writes; into a
    read-only R only when R is ok and X did not complete ok before R completed: otherwise
    every realtime edge R→Z also leaves X (X completed before Z was invoked), and the cycle
    X→R→Z⇝X has the realtime twin X→Z⇝X;
  * an op writing one value of one key and reading nothing has no data in-edge from outside
    that key's ww chain, so no ww/wr-only cycle enters the chain: its ww edges are kept for
    keys written by an op that writes two keys or also reads ("linking" ops), or that
    writes two values of the key (they can straddle another op's value: a cycle inside the
    chain); elsewhere a ww edge A→B only when A did not complete ok before B was invoked
    (else the realtime edge A→B stands in for it);
  * realtime edges are then built on the driver among the collected vertices only (their
    transitive reduction there keeps the reachability the cycles need).
  A twin found instead of a cycle is still a realtime cycle of the same component, so the
  component's report (below) is the same kind of anomaly; tests/checkers/cycle_oracle.py
  checks this against every simple cycle of the unpruned graph.
Each strongly connected component reports its most serious cycle: G0 (ww only), else G1c
(ww/wr with a wr edge), else a cycle through a realtime edge, named G0-realtime or
G1c-realtime by whether it has a wr edge.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import networkx as nx

MAX_CYCLE_SEARCHES_PER_SCC = 64


@dataclass
class Cycle:
    anomaly: str
    ops: list[int]
    steps: list[dict[str, Any]]


@dataclass
class CycleReport:
    cycles: list[Cycle] = field(default_factory=list)
    vertices: int = 0
    edges: int = 0


def realtime_edges(vertices: dict[int, tuple[int, str]]) -> list[tuple[int, int]]:
    """Elle's transitively reduced realtime order among `vertices` (op → (invoke index, type)):
    A → B when A completed (its op index) before B was invoked. A completed op stays on the
    frontier until some later op it precedes completes, which then covers it."""
    events: list[tuple[int, int, int]] = []  # (history index, 0 = completion / 1 = invocation, op)
    for op, (invoke_index, typ) in vertices.items():
        events.append((invoke_index, 1, op))
        if typ == "ok":  # as in Elle: an info op never completes, a failed one did not happen
            events.append((op, 0, op))
    events.sort()
    frontier: set[int] = set()
    preceded_by: dict[int, list[int]] = {}
    edges: list[tuple[int, int]] = []
    for _, kind, op in events:
        if kind == 1:
            preceded_by[op] = list(frontier)
            edges.extend((a, op) for a in frontier)
        else:
            frontier.difference_update(preceded_by.get(op, ()))
            frontier.add(op)
    return edges


def _shortest_cycle_through(graph: nx.DiGraph, edges: list[tuple[int, int]],
                            adjacency: tuple[dict[Any, int], list[list[int]]] | None = None) -> list[int] | None:
    """The shortest cycle u → v ⇝ u over the first MAX_CYCLE_SEARCHES_PER_SCC edges (u, v), the
    first such edge on a tie. The distances come from plain breadth-first searches over integer
    adjacency lists (networkx's search, run on a filtered view for each edge, took 3.4 s of the
    10^7 bench history's 5 s cycle search); networkx then finds the path for the chosen edge
    only, so the cycle reported is the one its search gives. `adjacency`: the graph's nodes'
    indices and their successors' indices, when the caller has them (any order: distances do
    not depend on it)."""
    candidates = edges[:MAX_CYCLE_SEARCHES_PER_SCC]
    if not candidates:
        return None
    if adjacency is None:
        index = {node: i for i, node in enumerate(graph)}
        successors: list[list[int]] = [[] for _ in index]
        for node, nbrs in graph.adjacency():
            successors[index[node]] = [index[nbr] for nbr in nbrs]
    else:
        index, successors = adjacency
    best: tuple[int, int, int] | None = None  # (distance v ⇝ u, u, v)
    for u, v in candidates:
        limit = None if best is None else best[0] - 1  # only a strictly shorter one can win
        found = _distance(successors, index[v], index[u], limit)
        if found is not None and (best is None or found < best[0]):
            best = (found, u, v)
    if best is None:
        return None
    _, u, v = best
    return [u] + nx.shortest_path(graph, v, u)


def _distance(successors: list[list[int]], source: int, target: int, limit: int | None) -> int | None:
    """Edges on a shortest path source ⇝ target, if there is one of at most `limit` edges."""
    if source == target:
        return 0
    seen = bytearray(len(successors))
    seen[source] = 1
    frontier = [source]
    depth = 0
    while frontier and (limit is None or depth < limit):
        depth += 1
        following = []
        for node in frontier:
            for nbr in successors[node]:
                if not seen[nbr]:
                    if nbr == target:
                        return depth
                    seen[nbr] = 1
                    following.append(nbr)
        frontier = following
    return None


def search(edges: list[tuple], vertices: dict[int, tuple[int, str]], *, ww_deps: bool = True,
           realtime: bool = True) -> CycleReport:
    facts: dict[tuple[int, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    # Sorted, so the cycle reported does not depend on the order Spark returned the edges in.
    for src, dst, rel, key, value in sorted(edges, key=lambda e: (e[0], e[1], e[2], e[3], e[4])):
        if rel == "ww" and not ww_deps:
            continue
        facts[(src, dst)].setdefault(rel, (key, value))
    rt = realtime_edges(vertices) if realtime else []
    for a, b in rt:
        facts[(a, b)].setdefault("rt", (None, None))
    # Each edge's relations in a dict of their own, not as networkx edge data: a graph of
    # plain edges builds in half the time (10^7 bench: 110k edges), and the filters below
    # read the dict.
    rels = {pair: frozenset(found) for pair, found in facts.items()}
    graph = nx.DiGraph()
    graph.add_edges_from(rels)
    report = CycleReport(vertices=graph.number_of_nodes(), edges=graph.number_of_edges())
    for scc in nx.strongly_connected_components(graph):
        if len(scc) < 2:
            continue
        sub = graph.subgraph(scc)
        # The component's edges with their relations, by integer index, for the distances.
        index = {node: i for i, node in enumerate(scc)}
        out: list[list[tuple[int, frozenset[str]]]] = [[] for _ in index]
        for a in scc:
            out[index[a]] = [(index[b], rels[(a, b)]) for b in graph.succ[a] if b in index]

        def only(allowed: set[str]) -> tuple[nx.DiGraph, tuple[dict[Any, int], list[list[int]]]]:
            view = nx.subgraph_view(sub, filter_edge=lambda a, b: bool(rels[(a, b)] & allowed))
            return view, (index, [[b for b, found in nbrs if found & allowed] for nbrs in out])

        def first_edges(keep: Any) -> list[tuple[int, int]]:
            """The first edges of the component (in networkx's order) that `keep` keeps: only
            those are searched."""
            return list(islice(((a, b) for a, b in sub.edges if keep(rels[(a, b)])), MAX_CYCLE_SEARCHES_PER_SCC))

        cycle = None
        anomaly = None
        ww_edges = first_edges(lambda found: "ww" in found)
        if ww_edges:
            view, adjacency = only({"ww"})
            cycle = _shortest_cycle_through(view, ww_edges, adjacency)
            anomaly = "G0" if cycle else None
        if cycle is None:
            wr_edges = first_edges(lambda found: "wr" in found)
            view, adjacency = only({"ww", "wr"})
            cycle = _shortest_cycle_through(view, wr_edges, adjacency)
            anomaly = "G1c" if cycle else None
        if cycle is None:
            rt_edges = first_edges(lambda found: found == {"rt"})
            cycle = _shortest_cycle_through(sub, rt_edges, (index, [[b for b, _ in nbrs] for nbrs in out]))
            if cycle:
                found_rels = [rels[(a, b)] for a, b in zip(cycle, cycle[1:])]
                anomaly = "G1c-realtime" if any("wr" in r and "ww" not in r for r in found_rels) else "G0-realtime"
        if cycle and anomaly:
            report.cycles.append(Cycle(anomaly, cycle[:-1], _steps(facts, cycle)))
    return report


def _steps(facts: dict, cycle: list[int]) -> list[dict[str, Any]]:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        rels = facts[(a, b)]
        rel = next(r for r in ("ww", "wr", "rt") if r in rels)
        key, value = rels[rel]
        step: dict[str, Any] = {"from": a, "to": b, "rel": rel}
        if rel != "rt":
            step.update(key=key, value=value)
        steps.append(step)
    return steps
