"""The replicated metadata log: record batches in a `PartitionLog`, each stamped with the
epoch of the leader that wrote it (`partition_leader_epoch`), with the log's epoch cache to
find where two logs diverge, and the newest snapshot standing in for what lies below the
log start.

Every append is fsynced before it counts: a follower reports only durable offsets (its
fetch offset), and a leader counts itself toward the high watermark only for what it has
fsynced, so a committed record survives any minority of crashes, power loss included.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from cluster.protocol.records import Record, build_batch, read_records
from cluster.quorum.snapshot import SnapshotId, SnapshotStore
from cluster.storage.batch import ATTR_CONTROL, BatchHeader, parse_header, split_batches
from cluster.storage.config import LogConfig
from cluster.storage.disk import Disk
from cluster.storage.log import PartitionLog

LOG_DIR_NAME = "__cluster_metadata-0"
SNAPSHOT_DIR_NAME = "__cluster_metadata-0-snapshots"
# Kafka's control record types (ControlRecordType): LEADER_CHANGE is 2.
CONTROL_LEADER_CHANGE = 2
_CONTROL_KEY = struct.Struct(">hh")
_LEADER_CHANGE_VALUE = struct.Struct(">hii")  # version, leader id, epoch


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One batch as the state machine and the checks see it."""

    base_offset: int
    next_offset: int
    epoch: int
    control: bool
    records: list[bytes]

    def record_hashes(self) -> list[str]:
        return [record_hash(r) for r in self.records]


def record_hash(value: bytes) -> str:
    return hashlib.blake2b(value, digest_size=8).hexdigest()


def leader_change_batch(base_offset: int, epoch: int, leader_id: int, now_ms: int) -> bytes:
    """The first batch a new leader writes: a control record naming it, in its epoch. Once
    it is committed, everything before it is too (Raft's no-op entry)."""
    key = _CONTROL_KEY.pack(0, CONTROL_LEADER_CHANGE)
    value = _LEADER_CHANGE_VALUE.pack(0, leader_id, epoch)
    return build_batch([Record(key, value)], base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=epoch,
                       attributes=ATTR_CONTROL)


class ReplicatedLog:
    def __init__(self, disk: Disk, data_dir: str, now_ms: int) -> None:
        disk.makedirs(data_dir)
        self.log = PartitionLog.open(disk, f"{data_dir}/{LOG_DIR_NAME}", LogConfig(retention_ms=None), now_ms=now_ms)
        self.snapshots = SnapshotStore(disk, f"{data_dir}/{SNAPSHOT_DIR_NAME}")
        snapshot = self.snapshots.latest_id
        if snapshot is not None and snapshot.end_offset > self.log.log_end_offset:
            # The log lost what the snapshot covers (a crash between the snapshot and the
            # log's catching up, or a log restarted from a snapshot): restart it there.
            self.log.truncate_fully_and_start_at(snapshot.end_offset, now_ms=now_ms)
        elif snapshot is not None and snapshot.end_offset > self.log.log_start_offset:
            self.log.delete_records_before(self.log.batch_boundary_at_or_below(snapshot.end_offset))

    # ---- positions ----------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    @property
    def last_epoch(self) -> int:
        """The epoch of the last record (the snapshot's when the log holds none past it; -1
        for an empty log)."""
        if self.end_offset > self.start_offset:
            return self.log.epochs.latest_epoch
        snapshot = self.snapshots.latest_id
        return snapshot.epoch if snapshot is not None and snapshot.end_offset == self.end_offset else -1

    def epoch_entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of each epoch in the log, oldest first; the snapshot's
        epoch first when the log starts at the snapshot."""
        entries = [(e, s) for e, s in self.log.epochs.entries() if s < self.end_offset]
        snapshot = self.snapshots.latest_id
        if snapshot is not None and snapshot.end_offset == self.start_offset and (not entries or entries[0][0] > snapshot.epoch):
            entries.insert(0, (snapshot.epoch, -1))  # it ends at the log start, its start is gone
        return entries

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch` this log holds, the offset where it ends here); for
        an epoch older than all it holds, (-1, the log start). What the leader tells a
        follower whose last fetched epoch it does not share (the diverging epoch)."""
        entries = self.epoch_entries()
        chosen = -1
        for index, (entry_epoch, _) in enumerate(entries):
            if entry_epoch > epoch:
                end = entries[index][1] if entries[index][1] >= 0 else self.start_offset
                return (entries[chosen][0], end) if chosen >= 0 else (-1, self.start_offset)
            chosen = index
        if chosen < 0:
            return -1, self.start_offset
        return entries[chosen][0], self.end_offset

    def epoch_at(self, offset: int) -> int:
        """The epoch of the record at `offset` (below the log start: the snapshot's epoch
        when `offset` is its last record, else -1)."""
        if offset < self.start_offset:
            snapshot = self.snapshots.latest_id
            return snapshot.epoch if snapshot is not None and offset == snapshot.end_offset - 1 else -1
        return self.log.epochs.epoch_for_offset(offset)

    # ---- writing --------------------------------------------------------------------------

    def append_records(self, records: list[bytes], epoch: int, now_ms: int, *, control: bool = False) -> tuple[int, int]:
        """Append one batch as leader of `epoch` and fsync it; (base offset, next offset)."""
        base = self.end_offset
        batch = build_batch([Record(None, r) for r in records], base_offset=base, timestamp_ms=now_ms, partition_leader_epoch=epoch,
                            attributes=ATTR_CONTROL if control else 0)
        self.append_batch(batch, now_ms)
        return base, self.end_offset

    def append_leader_change(self, epoch: int, leader_id: int, now_ms: int) -> tuple[int, int]:
        base = self.end_offset
        self.append_batch(leader_change_batch(base, epoch, leader_id, now_ms), now_ms)
        return base, self.end_offset

    def append_batch(self, batch: bytes | memoryview, now_ms: int) -> BatchHeader:
        header = self.log.append(batch, now_ms=now_ms)
        self.log.flush()
        return header

    def append_fetched(self, data: bytes, now_ms: int) -> int:
        """A follower appends the batches a fetch returned (those at its end offset on; a
        copy of what it has already is skipped); fsynced once. The number appended."""
        appended = 0
        for header, batch in split_batches(data):
            if header.base_offset < self.end_offset:
                continue
            self.log.append(bytes(batch), now_ms=now_ms)
            appended += 1
        if appended:
            self.log.flush()
        return appended

    def truncate_to(self, offset: int) -> int:
        """Drop everything from the batch holding `offset` on (never below the log start);
        the new end offset."""
        offset = max(offset, self.start_offset)
        if offset < self.end_offset:
            self.log.truncate_to(self.log.batch_boundary_at_or_below(offset))
            self.log.flush()
        return self.end_offset

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes, now_ms: int) -> None:
        """A follower behind the leader's log start: the snapshot replaces the whole log."""
        self.snapshots.write(snapshot_id, data)
        self.log.truncate_fully_and_start_at(snapshot_id.end_offset, now_ms=now_ms)

    def take_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """The state machine's image up to `snapshot_id.end_offset` (committed): stored
        durably, then the log below it is deleted."""
        self.snapshots.write(snapshot_id, data)
        if snapshot_id.end_offset > self.start_offset:
            self.log.delete_records_before(self.log.batch_boundary_at_or_below(min(snapshot_id.end_offset, self.end_offset)))

    # ---- reading ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> list[bytes | memoryview]:
        return self.log.read(offset, max_bytes, max_offset=max_offset)

    def batches(self, from_offset: int, to_offset: int | None = None) -> Iterator[LogBatch]:
        """Decoded batches from the one holding `from_offset`, stopping before any that
        reaches past `to_offset`."""
        position = max(from_offset, self.start_offset)
        end = self.end_offset if to_offset is None else min(to_offset, self.end_offset)
        while position < end:
            chunk = self.log.read(position, 1 << 20, max_offset=end)
            if not chunk:
                return
            for raw in chunk:
                header = parse_header(raw)
                if header.base_offset + header.last_offset_delta + 1 > end:
                    return
                values = [r.value or b"" for r in read_records(bytes(raw))]
                yield LogBatch(header.base_offset, header.base_offset + header.last_offset_delta + 1, header.partition_leader_epoch,
                               bool(header.attributes & ATTR_CONTROL), values)
                position = header.base_offset + header.last_offset_delta + 1

    def describe(self) -> list[tuple[int, int, str]]:
        """(offset, epoch, record hash) of every record in the log, for the checks."""
        out: list[tuple[int, int, str]] = []
        for batch in self.batches(self.start_offset):
            for index, value in enumerate(batch.records):
                out.append((batch.base_offset + index, batch.epoch, record_hash(value)))
        return out

    def close(self) -> None:
        self.log.close()
