"""A brute-force reference for the cycle checks, written straight from Elle's definitions as
Jepsen's Kafka checker uses them (reference/jepsen-kafka.md, "Elle cycle anomalies"), for
differential tests against checkers/ on small generated histories (≤ 8 ops).

Nothing is pruned and nothing is reduced: every completed send/poll/txn op is a vertex, the
realtime order is the whole relation (A completed ok before B was invoked), and every simple
cycle is enumerated (networkx.simple_cycles) and classified by the labels its edges allow:
  G0            every edge can be ww
  G1c           every edge can be ww or wr, and one can be wr
  G0-realtime   every edge can be ww or rt, and one can be rt
  G1c-realtime  every edge can be ww, wr or rt, one can be wr and another one rt
The version order of a key: the distinct (offset, value) pairs of every poll (whatever its
completion) and of every committed send with an offset ≥ 0; a slot's values must agree here
(the generator makes no inconsistent offsets), so a value's index is its slot's rank.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx

KINDS = ("G0", "G1c", "G0-realtime", "G1c-realtime")


@dataclass
class Op:
    """One client op: invoked at history index `invoke`, completed at `complete` with `type`."""

    id: int
    f: str  # send, poll or txn
    type: str  # ok, info or fail
    invoke: int
    complete: int
    sends: list[tuple[int, int, int | None]] = field(default_factory=list)  # (key, value, offset)
    reads: list[tuple[int, int, int]] = field(default_factory=list)  # (key, offset, value)


def graph(ops: list[Op]) -> nx.DiGraph:
    """Every ww, wr and rt edge, each with the set of relations it carries."""
    writer: dict[tuple[int, int], int] = {}
    for op in sorted(ops, key=lambda o: o.complete):
        for key, value, _ in op.sends:
            writer.setdefault((key, value), op.complete)
    read_values = {(k, v) for op in ops if op.type == "ok" for k, _, v in op.reads}

    def committed(op: Op) -> bool:
        return op.type == "ok" or (op.type == "info" and any((k, v) in read_values for k, v, _ in op.sends))

    log: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for op in ops:
        for key, offset, value in op.reads:
            log[key][offset].add(value)
        if committed(op):
            for key, value, offset in op.sends:
                if offset is not None and offset >= 0:
                    log[key][offset].add(value)
    g = nx.DiGraph()
    g.add_nodes_from(op.complete for op in ops)

    def add(a: int, b: int, rel: str) -> None:
        if a == b:
            return
        if g.has_edge(a, b):
            g[a][b]["rels"].add(rel)
        else:
            g.add_edge(a, b, rels={rel})

    for key, slots in log.items():
        order = [slots[o] for o in sorted(slots)]
        assert all(len(vs) == 1 for vs in order), f"key {key}: inconsistent offsets, outside this oracle's scope"
        values = [next(iter(vs)) for vs in order]
        for before, after in zip(values, values[1:]):
            if (key, before) in writer and (key, after) in writer:
                add(writer[(key, before)], writer[(key, after)], "ww")
    for op in ops:
        for key, _, value in op.reads:
            if (key, value) in writer:
                add(writer[(key, value)], op.complete, "wr")
    for a in ops:
        if a.type != "ok":  # an info op never completes, a failed one did not happen
            continue
        for b in ops:
            if a.complete < b.invoke:
                add(a.complete, b.complete, "rt")
    return g


def kinds_of_cycle(rels: list[set[str]]) -> set[str]:
    found = set()
    if all("ww" in r for r in rels):
        found.add("G0")
    if all(r & {"ww", "wr"} for r in rels) and any("wr" in r for r in rels):
        found.add("G1c")
    if all(r & {"ww", "rt"} for r in rels) and any("rt" in r for r in rels):
        found.add("G0-realtime")
    # One edge labelled wr and another labelled rt, the rest anything.
    wr = [i for i, r in enumerate(rels) if "wr" in r]
    rt = [i for i, r in enumerate(rels) if "rt" in r]
    if any(i != j for i in wr for j in rt):
        found.add("G1c-realtime")
    return found


@dataclass
class SccKinds:
    ops: frozenset[int]
    kinds: set[str]


def cycles(ops: list[Op]) -> list[SccKinds]:
    """Per strongly connected component of the full graph, the cycle kinds it holds."""
    g = graph(ops)
    out = []
    for scc in nx.strongly_connected_components(g):
        if len(scc) < 2:
            continue
        sub = g.subgraph(scc)
        kinds: set[str] = set()
        for cycle in nx.simple_cycles(sub):
            rels = [sub[a][b]["rels"] for a, b in zip(cycle, cycle[1:] + cycle[:1])]
            kinds |= kinds_of_cycle(rels)
        out.append(SccKinds(frozenset(scc), kinds))
    return out
