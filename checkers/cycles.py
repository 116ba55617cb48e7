"""G0, G1c and their -realtime variants: strongly connected components and cycle search on
the driver, over the dependency edges the per-key pass (perkey.edges) found and pruned as
stated here. The graph stays in numpy arrays (a 10^9-row history has millions of edges: as
networkx graph and dicts they took ~2.8 KB each and ran the driver out of memory).

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
from typing import Any

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
    the driver (10^8 bench, 501k edges: +1.39 GB), which ran the 10^9 check out of memory;
    as columns ~60 bytes."""

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


def _best_edge(successors: Any, candidates: list[tuple[int, int]]) -> int | None:
    """The position among `candidates` (u, v) of the first one with the shortest way v ⇝ u."""
    best: tuple[int, int] | None = None  # (distance v ⇝ u, position)
    for i, (u, v) in enumerate(candidates):
        limit = None if best is None else best[0] - 1  # only a strictly shorter one can win
        found = _distance(successors, v, u, limit)
        if found is not None and (best is None or found < best[0]):
            best = (found, i)
    return None if best is None else best[1]


def shortest_cycle(successors: Any, candidates: list[tuple[int, int]]) -> list[int] | None:
    """The shortest cycle u → v ⇝ u over the first MAX_CYCLE_SEARCHES_PER_SCC edges (u, v) of
    a graph of integer vertices (`successors[node]`: its successors), the first such edge on a
    tie, as [u, v, ..., u]; the way v ⇝ u is the breadth-first one that takes each vertex's
    successors in their order. No networkx graph: a component of a 10^9-row history has
    millions of vertices (~2.4 KB each as networkx graph and dicts)."""
    candidates = candidates[:MAX_CYCLE_SEARCHES_PER_SCC]
    best = _best_edge(successors, candidates)
    if best is None:
        return None
    u, v = candidates[best]
    return [u] + _path(successors, v, u)


def _path(successors: Any, source: int, target: int) -> list[int]:
    """A shortest path source ⇝ target (there is one), breadth first."""
    if source == target:
        return [source]
    parent = array("q", [-1]) * len(successors)
    parent[source] = source
    frontier = [source]
    while frontier:
        following = []
        for node in frontier:
            for nbr in successors[node]:
                if parent[nbr] == -1:
                    parent[nbr] = node
                    if nbr == target:
                        path = [nbr]
                        while path[-1] != source:
                            path.append(parent[path[-1]])
                        return path[::-1]
                    following.append(nbr)
        frontier = following
    raise ValueError(f"no path {source} ⇝ {target}")


class _Csr:
    """Successor lists in two arrays (compressed rows): successors[node] is a slice."""

    def __init__(self, n: int, sources: np.ndarray, targets: np.ndarray) -> None:
        """`sources` sorted; `targets` in the order each source's successors are taken."""
        self.indptr = array("q", np.concatenate([[0], np.cumsum(np.bincount(sources, minlength=n))]).astype(np.int64).tobytes())
        self.targets = array("q", np.asarray(targets, np.int64).tobytes())
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, node: int) -> array:
        return self.targets[self.indptr[node]:self.indptr[node + 1]]


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

    The whole graph (data edges and realtime order) is held as arrays and its strongly
    connected components found there; each component of two or more vertices is searched
    over arrays of its own, its vertices and edges in op order (so the edges searched first
    depend neither on Spark's order nor on the rest of the graph). Python objects are made
    only for the cycles reported."""
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
    # The edges inside components, one per vertex pair with its relations as bits (ww 1,
    # wr 2, rt 4), sorted by (source, target): vertex indices are in op order.
    bits = np.concatenate([np.where(g.rel[use[kept]] == RELS.index("ww"), WW, WR).astype(np.int8),
                           np.full(len(rt_kept), RT, np.int8)])
    pair = np.concatenate([src[kept] * n + dst[kept], rt_src[rt_kept] * n + rt_dst[rt_kept]])
    pair, which = np.unique(pair, return_inverse=True)
    pair_bits = np.zeros(len(pair), np.int8)
    np.bitwise_or.at(pair_bits, which, bits)
    del bits, which
    pair_src, pair_dst = pair // n, pair % n
    # Components in the order of their first op; each one's vertices and edges in op order.
    members = np.flatnonzero(on_cycle)
    if len(members) == 0:
        return report
    members = members[np.argsort(label[members], kind="stable")]
    starts = np.flatnonzero(np.r_[True, label[members][1:] != label[members][:-1]])
    ends = np.r_[starts[1:], len(members)]
    by_component = np.argsort(label[pair_src], kind="stable")
    edge_label = label[pair_src][by_component]
    for first, last in sorted(zip(starts.tolist(), ends.tolist()), key=lambda r: members[r[0]]):
        nodes = members[first:last]  # ascending
        component = label[nodes[0]]
        rows = by_component[np.searchsorted(edge_label, component):np.searchsorted(edge_label, component, "right")]
        a, b, found = np.searchsorted(nodes, pair_src[rows]), np.searchsorted(nodes, pair_dst[rows]), pair_bits[rows]
        m = len(nodes)

        def adjacency(keep: np.ndarray) -> _Csr:
            return _Csr(m, a[keep], b[keep])

        def first_edges(keep: np.ndarray) -> list[tuple[int, int]]:
            """The first edges of the component (in op order) that `keep` keeps: only those
            are searched."""
            chosen = np.flatnonzero(keep)[:MAX_CYCLE_SEARCHES_PER_SCC]
            return list(zip(a[chosen].tolist(), b[chosen].tolist()))

        cycle = None
        anomaly = None
        is_ww = (found & WW) != 0
        if is_ww.any():
            cycle = shortest_cycle(adjacency(is_ww), first_edges(is_ww))
            anomaly = "G0" if cycle else None
        if cycle is None:
            data = (found & (WW | WR)) != 0
            cycle = shortest_cycle(adjacency(data), first_edges((found & WR) != 0))
            anomaly = "G1c" if cycle else None
        if cycle is None:
            cycle = shortest_cycle(adjacency(np.ones(len(found), bool)), first_edges(found == RT))
            if cycle:
                at = np.searchsorted(a * m + b, np.array(cycle[:-1]) * m + np.array(cycle[1:]))
                anomaly = "G1c-realtime" if (((found[at] & WR) != 0) & ((found[at] & WW) == 0)).any() else "G0-realtime"
        if cycle and anomaly:
            ops_of_cycle = g.vertex_op[nodes[cycle]].tolist()
            report.cycles.append(Cycle(anomaly, ops_of_cycle[:-1], _steps(g, use, ops_of_cycle)))
    return report


WW, WR, RT = 1, 2, 4  # an edge's relations as bits


def _steps(g: Edges, use: np.ndarray, cycle: list[int]) -> list[dict[str, Any]]:
    """The cycle's steps: each by ww if it has one, else wr, else rt; a data step with the
    smallest (key, value) that makes it."""
    steps: list[dict[str, Any]] = []
    pairs = set(zip(cycle, cycle[1:]))
    on = use[np.isin(g.src[use], np.array(cycle[:-1], np.int64)) & np.isin(g.dst[use], np.array(cycle[1:], np.int64))]
    data: dict[tuple[int, int], dict[str, tuple[Any, Any]]] = defaultdict(dict)
    for a, b, rel, key, value in sorted(zip(g.src[on].tolist(), g.dst[on].tolist(), [RELS[r] for r in g.rel[on].tolist()],
                                            g.key[on].tolist(), g.value[on].tolist()),
                                        key=lambda e: (e[0], e[1], e[2], e[3], e[4])):
        if (a, b) in pairs:
            data[(a, b)].setdefault(rel, (key, value))
    for a, b in zip(cycle, cycle[1:]):
        found = data.get((a, b), {})
        rel = next((r for r in ("ww", "wr") if r in found), "rt")
        step: dict[str, Any] = {"from": a, "to": b, "rel": rel}
        if rel != "rt":
            key, value = found[rel]
            step.update(key=key, value=value)
        steps.append(step)
    return steps
