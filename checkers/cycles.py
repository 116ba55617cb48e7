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

from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import networkx as nx
import numpy as np

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


RELS = ("ww", "wr")  # the data relations an Edges row can carry, by its `rel` code


@dataclass
class Edges:
    """A run's dependency edges and their vertices as columns. At 10^9 history rows a run has
    millions of edges: as Python tuples, dicts and a networkx graph they cost ~2.8 KB each on
    the driver (10^7 bench, 50k edges: +138 MB), which ran the 10^9 check out of memory; as
    columns ~60 bytes. Only the edges inside strongly connected components become Python
    objects (`search`)."""

    src: np.ndarray  # op indices (int64)
    dst: np.ndarray
    rel: np.ndarray  # int8 codes into RELS
    key: np.ndarray  # the key and value that make the edge (any dtype: only read for a cycle's steps)
    value: np.ndarray
    vertex_op: np.ndarray  # every vertex's op index, sorted, unique
    vertex_invoke: np.ndarray  # its invocation's history index
    vertex_ok: np.ndarray  # whether it completed ok (only ok ops precede anything in real time)

    @classmethod
    def from_lists(cls, edges: list[tuple], vertices: dict[int, tuple[int, str]]) -> "Edges":
        """From edges [(src, dst, rel, key, value)] and vertices {op: (invoke index, type)}."""
        unknown = {e[2] for e in edges} - set(RELS)
        if unknown:
            raise ValueError(f"dependency edges with relations {sorted(unknown)}: only {RELS} are built")
        ops = np.array(sorted(vertices), np.int64)
        return cls.checked(
            src=np.array([e[0] for e in edges], np.int64), dst=np.array([e[1] for e in edges], np.int64),
            rel=np.array([RELS.index(e[2]) for e in edges], np.int8),
            key=_column([e[3] for e in edges]), value=_column([e[4] for e in edges]),
            vertex_op=ops, vertex_invoke=np.array([vertices[op][0] for op in ops.tolist()], np.int64),
            vertex_ok=np.array([vertices[op][1] == "ok" for op in ops.tolist()], bool))

    @classmethod
    def checked(cls, **columns: np.ndarray) -> "Edges":
        out = cls(**columns)
        for end in (out.src, out.dst):
            at = np.minimum(np.searchsorted(out.vertex_op, end), max(len(out.vertex_op) - 1, 0))
            if len(end) and (len(out.vertex_op) == 0 or (out.vertex_op[at] != end).any()):
                raise ValueError("a dependency edge ends at an op that is not among the graph's vertices")
        return out


def _column(values: list[Any]) -> np.ndarray:
    if all(type(x) is int for x in values):
        return np.array(values, np.int64)
    out = np.empty(len(values), object)
    out[:] = values
    return out


def realtime_edges(invoke: np.ndarray, completion: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Elle's transitively reduced realtime order among vertices 0..n-1 (their invocation's
    and completion's history indices, whether they completed ok), as (sources, targets):
    A → B when A completed ok before B was invoked. A completed op stays on the frontier
    until some later op it precedes completes, which then covers it. Arrays throughout: a
    history of 10^9 rows has millions of vertices."""
    n = len(invoke)
    vertex = np.arange(n, dtype=np.int64)
    ok_vertex = vertex[ok]  # as in Elle: an info op never completes, a failed one did not happen
    at = np.concatenate([invoke, completion[ok]])
    kind = np.concatenate([np.ones(n, np.int8), np.zeros(len(ok_vertex), np.int8)])  # 0 = completion
    who = np.concatenate([vertex, ok_vertex])
    order = np.lexsort((who, kind, at))
    kind, who = kind[order], who[order]
    del at, order
    sources, targets = array("q"), array("q")
    first, last = array("q", bytes(8 * n)), array("q", bytes(8 * n))  # each vertex's edges in
    frontier: set[int] = set()
    for chunk in range(0, len(kind), 1 << 20):  # Python ints a chunk at a time
        for k, v in zip(kind[chunk:chunk + (1 << 20)].tolist(), who[chunk:chunk + (1 << 20)].tolist()):
            if k:
                first[v] = len(sources)
                for a in frontier:
                    sources.append(a)
                    targets.append(v)
                last[v] = len(sources)
            else:
                frontier.difference_update(sources[first[v]:last[v]])
                frontier.add(v)
    return np.frombuffer(sources, np.int64).copy(), np.frombuffer(targets, np.int64).copy()


def strong_components(n: int, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each of the vertices 0..n-1's strongly connected component, as a label (Tarjan's
    algorithm, iterative, over a compressed adjacency in arrays: a networkx graph of the
    whole run took ~2.8 KB per edge on the driver)."""
    order = np.argsort(sources, kind="stable")
    indptr = array("q", np.concatenate([[0], np.cumsum(np.bincount(sources, minlength=n))]).astype(np.int64).tobytes())
    succ = array("q", targets[order].astype(np.int64).tobytes())
    del order
    index, low, label = array("q", [-1]) * n, array("q", bytes(8 * n)), array("q", [-1]) * n
    on_stack = bytearray(n)
    stack: list[int] = []
    counter = components = 0
    for root in range(n):
        if index[root] != -1:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = 1
        work = [(root, indptr[root])]
        while work:
            v, i = work[-1]
            end = indptr[v + 1]
            descended = False
            while i < end:
                w = succ[i]
                i += 1
                if index[w] == -1:
                    work[-1] = (v, i)
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = 1
                    work.append((w, indptr[w]))
                    descended = True
                    break
                if on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            if descended:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = 0
                    label[w] = components
                    if w == v:
                        break
                components += 1
    return np.frombuffer(label, np.int64).copy()


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


def search(edges: "list[tuple] | Edges", vertices: dict[int, tuple[int, str]] | None = None, *,
           ww_deps: bool = True, realtime: bool = True) -> CycleReport:
    """The cycles of a run's dependency graph: `edges` as Edges, or as [(src, dst, rel, key,
    value)] with `vertices` {op: (invoke index, type)}.

    The whole graph (data edges and realtime order) is held as arrays, its strongly connected
    components found there, and only the components of two or more vertices become networkx
    graphs: a vertex outside them is on no cycle, and at 10^9 history rows they are most of
    the graph."""
    g = edges if isinstance(edges, Edges) else Edges.from_lists(edges, vertices or {})
    n = len(g.vertex_op)
    use = np.flatnonzero(g.rel != RELS.index("ww")) if not ww_deps else np.arange(len(g.src))
    src, dst = np.searchsorted(g.vertex_op, g.src[use]), np.searchsorted(g.vertex_op, g.dst[use])
    if realtime:
        rt_src, rt_dst = realtime_edges(g.vertex_invoke, g.vertex_op, g.vertex_ok)
    else:
        rt_src, rt_dst = np.zeros(0, np.int64), np.zeros(0, np.int64)
    all_src, all_dst = np.concatenate([src, rt_src]), np.concatenate([dst, rt_dst])
    report = CycleReport(vertices=int(len(np.unique(np.concatenate([all_src, all_dst])))),
                         edges=int(len(np.unique(all_src * max(n, 1) + all_dst))))
    if n == 0:
        return report
    label = strong_components(n, all_src, all_dst)
    del all_src, all_dst
    on_cycle = np.bincount(label)[label] >= 2

    def inside(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return on_cycle[a] & (label[a] == label[b])

    kept = np.flatnonzero(inside(src, dst))
    rt_kept = np.flatnonzero(inside(rt_src, rt_dst))
    ops = g.vertex_op
    facts: dict[tuple[int, int], dict[str, tuple[Any, Any]]] = defaultdict(dict)
    rows = use[kept]
    data = zip(ops[src[kept]].tolist(), ops[dst[kept]].tolist(), [RELS[r] for r in g.rel[rows].tolist()],
               g.key[rows].tolist(), g.value[rows].tolist())
    # Sorted, so the cycle reported does not depend on the order Spark returned the edges in.
    for a, b, rel, key, value in sorted(data, key=lambda e: (e[0], e[1], e[2], e[3], e[4])):
        facts[(a, b)].setdefault(rel, (key, value))
    for a, b in zip(ops[rt_src[rt_kept]].tolist(), ops[rt_dst[rt_kept]].tolist()):
        facts[(a, b)].setdefault("rt", (None, None))
    # Each edge's relations in a dict of their own, not as networkx edge data: a graph of
    # plain edges builds in half the time (10^7 bench: 110k edges), and the filters below
    # read the dict.
    rels = {pair: frozenset(found) for pair, found in facts.items()}
    label_of = dict(zip(ops[on_cycle].tolist(), label[on_cycle].tolist()))
    members: dict[int, list[int]] = defaultdict(list)
    for op, found in label_of.items():  # ops ascending: each component's nodes in op order
        members[found].append(op)
    pairs_of: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pair in sorted(rels):
        pairs_of[label_of[pair[0]]].append(pair)
    # Each component its own graph, its nodes and edges in op order: the edges searched first
    # (the first MAX_CYCLE_SEARCHES_PER_SCC) depend on neither Spark's order nor the rest of
    # the graph.
    for component in sorted(members, key=lambda c: members[c][0]):
        sub = nx.DiGraph()
        sub.add_nodes_from(members[component])
        sub.add_edges_from(pairs_of[component])
        index = {node: i for i, node in enumerate(members[component])}
        out: list[list[tuple[int, frozenset[str]]]] = [[] for _ in index]
        for a in index:
            out[index[a]] = [(index[b], rels[(a, b)]) for b in sub.succ[a]]

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
