"""What each controller saw of the metadata quorum, for the checks after a run.

Every controller keeps a journal: its role changes (epoch, role, leader) and every record it
applied as committed (offset, epoch, record hash), plus, for partition records, the leader
and leader epoch they set. The process runtime appends it as JSON lines to
`quorum-journal.jsonl` in the controller's data dir (a SIGKILL keeps what the OS has; a
torn last line is skipped); the simulator keeps it in memory.

After the run, `describe_quorum` turns the journals and the controllers' logs into the
neutral description `cluster.quorum.checks.check_quorum` judges (RAFTCORE's checks: one
leader per epoch, epochs monotonic, committed records agree and sit on a majority), and
`leader_epoch_violations` adds the metadata's own rule: a partition's leader epoch is never
reused for another leader, nor goes back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster.metadata.records import MetadataRecordError, PartitionRecord, decode_record
from cluster.quorum.checks import NodeView, Violation, check_quorum
from cluster.quorum.log import record_hash

JOURNAL_NAME = "quorum-journal.jsonl"


@dataclass
class ControllerJournal:
    """One controller's journal over all its incarnations."""

    node_id: int
    transitions: list[tuple[int, str, int | None]] = field(default_factory=list)
    committed: list[tuple[int, int, str]] = field(default_factory=list)
    # (offset, topic id, partition, leader, leader epoch) of committed partition records
    partitions: list[tuple[int, str, int, int, int]] = field(default_factory=list)

    def role(self, epoch: int, role: str, leader_id: int | None) -> dict[str, Any]:
        self.transitions.append((epoch, role, leader_id))
        return {"t": "role", "epoch": epoch, "role": role, "leader": leader_id}

    def commit(self, offset: int, epoch: int, value: bytes) -> dict[str, Any]:
        entry: dict[str, Any] = {"t": "commit", "offset": offset, "epoch": epoch, "hash": record_hash(value)}
        self.committed.append((offset, epoch, entry["hash"]))
        try:
            record = decode_record(value)
        except MetadataRecordError:
            record = None  # check_quorum judges the bytes; the metadata rule only partition records
        if isinstance(record, PartitionRecord):
            entry["partition"] = [record.topic_id, record.partition, record.leader, record.leader_epoch]
            self.partitions.append((offset, record.topic_id, record.partition, record.leader, record.leader_epoch))
        return entry

    def replay(self, entry: Mapping[str, Any]) -> None:
        """Add one journal line read back from a file."""
        if entry.get("t") == "role":
            self.transitions.append((int(entry["epoch"]), str(entry["role"]), None if entry["leader"] is None else int(entry["leader"])))
        elif entry.get("t") == "commit":
            offset, epoch = int(entry["offset"]), int(entry["epoch"])
            self.committed.append((offset, epoch, str(entry["hash"])))
            if "partition" in entry:
                topic_id, partition, leader, leader_epoch = entry["partition"]
                self.partitions.append((offset, str(topic_id), int(partition), int(leader), int(leader_epoch)))


class JournalFile:
    """The process runtime's journal writer: one JSON line per event, flushed (not fsynced:
    the journal is evidence for the checks, not state)."""

    def __init__(self, data_dir: str, node_id: int) -> None:
        os.makedirs(data_dir, exist_ok=True)
        self.journal = ControllerJournal(node_id)
        self._file = open(os.path.join(data_dir, JOURNAL_NAME), "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def role(self, epoch: int, role: str, leader_id: int | None) -> None:
        self._write(self.journal.role(epoch, role, leader_id))

    def commit(self, offset: int, epoch: int, value: bytes) -> None:
        self._write(self.journal.commit(offset, epoch, value))

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journal(data_dir: str, node_id: int) -> ControllerJournal:
    journal = ControllerJournal(node_id)
    path = os.path.join(data_dir, JOURNAL_NAME)
    if not os.path.exists(path):
        return journal
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # the line being written when the process was killed
            journal.replay(entry)
    return journal


def node_view(journal: ControllerJournal, log: Sequence[tuple[int, int, str]], log_start_offset: int) -> NodeView:
    high_watermark = max((offset + 1 for offset, _, _ in journal.committed), default=log_start_offset)
    return NodeView(journal.node_id, list(log), log_start_offset, high_watermark, list(journal.committed), list(journal.transitions))


def leader_epoch_violations(journals: Iterable[ControllerJournal]) -> list[Violation]:
    """A partition's leader epoch names one leader, and never goes back in log order
    (KRaft's rule: every leader change bumps it). From the committed partition records of
    every journal, merged by offset."""
    by_offset: dict[int, tuple[str, int, int, int]] = {}
    for journal in journals:
        for offset, topic_id, partition, leader, leader_epoch in journal.partitions:
            by_offset.setdefault(offset, (topic_id, partition, leader, leader_epoch))
    leaders: dict[tuple[str, int, int], tuple[int, int]] = {}
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    out: list[Violation] = []
    for offset in sorted(by_offset):
        topic_id, partition, leader, leader_epoch = by_offset[offset]
        first = leaders.setdefault((topic_id, partition, leader_epoch), (leader, offset))
        if first[0] != leader:
            out.append(Violation("leader-epoch-reused", f"topic {topic_id} partition {partition}: leader epoch {leader_epoch} named "
                                                        f"leader {first[0]} at offset {first[1]} and leader {leader} at offset {offset}"))
        previous = latest.get((topic_id, partition))
        if previous is not None and leader_epoch < previous[0]:
            out.append(Violation("leader-epoch-went-back", f"topic {topic_id} partition {partition}: leader epoch {previous[0]} at "
                                                           f"offset {previous[1]}, then {leader_epoch} at offset {offset}"))
        latest[(topic_id, partition)] = (max(leader_epoch, previous[0]) if previous else leader_epoch, offset)
    return out


def judge(views: Sequence[NodeView], journals: Sequence[ControllerJournal], voter_count: int) -> list[Violation]:
    """Every violation of the quorum checks and of the leader-epoch rule."""
    return [*check_quorum(views, voter_count), *leader_epoch_violations(journals)]


def describe_quorum(views: Sequence[NodeView], journals: Sequence[ControllerJournal], voter_count: int) -> dict[str, Any]:
    """The neutral description written to the run directory (`quorum.json`), with the
    verdict: what the checks read and what they found."""
    violations = judge(views, journals, voter_count)
    return {
        "voters": voter_count,
        "nodes": [{"node_id": v.node_id, "log_start_offset": v.log_start_offset, "high_watermark": v.high_watermark,
                   "log": [list(e) for e in v.log], "committed": [list(e) for e in v.committed],
                   "transitions": [list(t) for t in v.transitions]} for v in views],
        "partition_records": sorted({list_entry for j in journals for list_entry in j.partitions}),
        "violations": [{"kind": v.kind, "detail": v.detail} for v in violations],
        "valid": not violations,
    }


def collect_quorum_report(data_dirs: Mapping[int, str], now_ms: int = 0) -> dict[str, Any]:
    """The report of a real run's controllers, read after they stopped: each one's metadata
    log from its data dir (through the quorum's own log reader) and its journal."""
    from cluster.quorum.log import ReplicatedLog
    from cluster.storage.disk import OsDisk

    views, journals = [], []
    disk = OsDisk()
    try:
        for node_id, data_dir in sorted(data_dirs.items()):
            journal = read_journal(data_dir, node_id)
            replicated = ReplicatedLog(disk, data_dir, now_ms)
            try:
                views.append(node_view(journal, replicated.describe(), replicated.start_offset))
            finally:
                replicated.close()
            journals.append(journal)
    finally:
        disk.close()
    return describe_quorum(views, journals, len(data_dirs))
