"""Safety checks of a Raft run over a neutral description of what each node holds and saw,
so the same function judges a simulated quorum and the controllers of a real run.

A node is described by its log (offset, epoch, record hash) from its log start, its high
watermark, what it delivered to its state machine as committed over the run, and the
history of its (epoch, role, leader). The checks:

- `two-leaders-in-epoch`: two nodes led, or were followed as leader, in one epoch;
- `epoch-two-histories`: two logs hold different records at one offset in one epoch (only
  one leader writes an epoch, so they cannot both be its records);
- `epoch-went-back`: a node's epoch decreased;
- `committed-disagree`: two nodes committed different records at one offset (state
  machine safety);
- `committed-lost`: a committed record is held by fewer than a majority of the voters'
  logs at the end (a record below a node's log start counts as held: its snapshot has it);
- `acknowledged-lost`: an append acknowledged as committed is held by fewer than a
  majority of the voters' logs at the end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: int
    log: Sequence[tuple[int, int, str]]  # (offset, epoch, record hash) from the log start, in order
    log_start_offset: int = 0  # below it the node holds a snapshot instead of records
    high_watermark: int = 0  # offsets below it the node knows committed
    committed: Sequence[tuple[int, int, str]] = ()  # (offset, epoch, hash) delivered as committed during the run
    transitions: Sequence[tuple[int, str, int | None]] = ()  # (epoch, role, leader id) in order, over every incarnation


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def check_quorum(nodes: Sequence[NodeView], voter_count: int | None = None,
                 acknowledged: Sequence[tuple[int, str]] = ()) -> list[Violation]:
    """Every violation found (empty: the run was safe). `voter_count` defaults to the number
    of nodes described; `acknowledged` is (offset, record hash) of appends answered as
    committed to their callers."""
    if voter_count is None:
        voter_count = len(nodes)
    if voter_count < 1:
        raise ValueError(f"voter_count must be at least 1, not {voter_count}")
    ids = [n.node_id for n in nodes]
    if len(set(ids)) != len(ids):
        raise ValueError(f"node ids must be distinct, got {ids}")
    violations: list[Violation] = []
    violations += _leaders_per_epoch(nodes)
    violations += _epochs_monotonic(nodes)
    violations += _epoch_histories(nodes)
    committed, disagreements = _committed(nodes)
    violations += disagreements
    violations += _committed_on_majority(nodes, committed, voter_count)
    logs = _final_logs(nodes)
    need = voter_count // 2 + 1
    for offset, record_hash in acknowledged:
        holders = [node_id for entries, start, node_id in logs if offset < start or (offset in entries and entries[offset][1] == record_hash)]
        if len(holders) < need:
            violations.append(Violation("acknowledged-lost", f"the append acknowledged at offset {offset} (record {record_hash}) is on "
                                                             f"{len(holders)} of {voter_count} voters {sorted(holders)} at the end, "
                                                             f"fewer than a majority"))
    return violations


def _leaders_per_epoch(nodes: Sequence[NodeView]) -> list[Violation]:
    leaders: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for node in nodes:
        for epoch, role, leader in node.transitions:
            if role == "leader":
                leaders[epoch][node.node_id].add(f"node {node.node_id} led")
            elif leader is not None:
                leaders[epoch][leader].add(f"node {node.node_id} followed")
    out = []
    for epoch in sorted(leaders):
        if len(leaders[epoch]) > 1:
            who = "; ".join(f"leader {leader} ({', '.join(sorted(how))})" for leader, how in sorted(leaders[epoch].items()))
            out.append(Violation("two-leaders-in-epoch", f"epoch {epoch}: {who}"))
    return out


def _epochs_monotonic(nodes: Sequence[NodeView]) -> list[Violation]:
    out = []
    for node in nodes:
        previous = None
        for epoch, role, _ in node.transitions:
            if previous is not None and epoch < previous:
                out.append(Violation("epoch-went-back", f"node {node.node_id} went from epoch {previous} to {epoch} (as {role})"))
            previous = epoch if previous is None else max(previous, epoch)
    return out


def _epoch_histories(nodes: Sequence[NodeView]) -> list[Violation]:
    seen: dict[tuple[int, int], tuple[str, int]] = {}
    reported: set[tuple[int, int]] = set()
    out = []
    for node in nodes:
        for offset, epoch, record_hash in node.log:
            key = (offset, epoch)
            first = seen.setdefault(key, (record_hash, node.node_id))
            if first[0] != record_hash and key not in reported:
                reported.add(key)
                out.append(Violation("epoch-two-histories", f"offset {offset} in epoch {epoch}: node {first[1]} holds {first[0]}, "
                                                            f"node {node.node_id} holds {record_hash}"))
    return out


def _committed(nodes: Sequence[NodeView]) -> tuple[dict[int, tuple[int, str, int]], list[Violation]]:
    """offset -> (epoch, hash, first node) of every record some node committed."""
    committed: dict[int, tuple[int, str, int]] = {}
    reported: set[int] = set()
    out = []

    def add(offset: int, epoch: int, record_hash: str, node_id: int, how: str) -> None:
        first = committed.setdefault(offset, (epoch, record_hash, node_id))
        if (first[0], first[1]) != (epoch, record_hash) and offset not in reported:
            reported.add(offset)
            out.append(Violation("committed-disagree", f"offset {offset}: node {first[2]} committed epoch {first[0]} record {first[1]}, "
                                                       f"node {node_id} {how} epoch {epoch} record {record_hash}"))

    for node in nodes:
        for offset, epoch, record_hash in node.committed:
            add(offset, epoch, record_hash, node.node_id, "committed")
    for node in nodes:
        for offset, epoch, record_hash in node.log:
            if offset < node.high_watermark:
                add(offset, epoch, record_hash, node.node_id, "holds below its high watermark")
    return committed, out


def _committed_on_majority(nodes: Sequence[NodeView], committed: dict[int, tuple[int, str, int]], voter_count: int) -> list[Violation]:
    need = voter_count // 2 + 1
    logs = _final_logs(nodes)
    out = []
    for offset in sorted(committed):
        epoch, record_hash, _ = committed[offset]
        holders = [node_id for entries, start, node_id in logs if offset < start or entries.get(offset) == (epoch, record_hash)]
        if len(holders) < need:
            out.append(Violation("committed-lost", f"offset {offset} (epoch {epoch}, record {record_hash}) is on {len(holders)} of "
                                                   f"{voter_count} voters {sorted(holders)} at the end, fewer than a majority"))
    return out


def _final_logs(nodes: Sequence[NodeView]) -> list[tuple[dict[int, tuple[int, str]], int, int]]:
    return [({offset: (epoch, h) for offset, epoch, h in node.log}, node.log_start_offset, node.node_id) for node in nodes]
