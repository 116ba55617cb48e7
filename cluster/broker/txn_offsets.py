"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98 and KIP-447), held per
__consumer_offsets partition and producer id until the transaction's marker reaches that
partition: a commit marker makes them the group's committed offsets, an abort marker drops
them. The offsets are written as a transactional batch of the producer, so a new coordinator
replaying the partition rebuilds the same pending set and applies the markers it finds."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from cluster.broker.groups import CommittedOffset, GroupCoordinator, GroupState, OffsetToCommit
from cluster.broker.offsets_log import OffsetRecord, decode_batch
from cluster.broker.partition import TopicPartition
from cluster.protocol.records import read_records
from cluster.storage.batch import BatchHeader

log = logging.getLogger(__name__)
# Kafka's ControlRecordType: the key of a control record is (version int16, type int16).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def control_type(batch: bytes | memoryview) -> int | None:
    """The type of a control batch's (single) record, None if unreadable."""
    for record in read_records(batch):
        if record.key is not None and len(record.key) >= 4:
            _, kind = struct.unpack_from(">hh", bytes(record.key), 0)
            return int(kind)
    return None


class TxnOffsets:
    def __init__(self, groups: GroupCoordinator) -> None:
        self._groups = groups
        # offsets partition -> producer id -> (group, topic, partition) -> offset
        self._pending: dict[int, dict[int, dict[tuple[str, str, int], CommittedOffset]]] = {}
        # offsets partition -> producer id -> the highest epoch written or marked there: a
        # zombie's commit under an older epoch is refused, as the log's producer state
        # refuses its batches in Kafka (it would otherwise wait for, and ride on, the next
        # transaction's commit marker).
        self._epochs: dict[int, dict[int, int]] = {}

    def validate(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                 check_members: bool = True) -> ErrorCode:
        """Kafka's doTxnCommitOffsets checks (KIP-447): a consumer's member id and generation,
        when given, must be current; none given (-1, "") commits outside group management.
        check_members=False (transaction.offset.commit.skip.generation.check, unsafe) skips
        the member, instance and generation checks, as before KIP-447."""
        group = self._groups.groups.get(group_id)
        if group is None:  # Kafka creates it Empty, with no members and generation 0
            if not check_members:
                return ErrorCode.none
            if member_id:
                return ErrorCode.unknown_member_id
            return ErrorCode.illegal_generation if generation_id > 0 else ErrorCode.none
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if not check_members:
            return ErrorCode.none
        if group_instance_id is not None and group.static_members.get(group_instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id
        if member_id and member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def check_epoch(self, index: int, producer_id: int, producer_epoch: int) -> ErrorCode:
        known = self._epochs.get(index, {}).get(producer_id)
        return ErrorCode.producer_fenced if known is not None and producer_epoch < known else ErrorCode.none

    def _saw(self, index: int, producer_id: int, producer_epoch: int) -> None:
        epochs = self._epochs.setdefault(index, {})
        epochs[producer_id] = max(producer_epoch, epochs.get(producer_id, producer_epoch))

    def add(self, index: int, producer_id: int, producer_epoch: int, group_id: str, offsets: list[OffsetToCommit], now_ms: int) -> None:
        self._saw(index, producer_id, producer_epoch)
        pending = self._pending.setdefault(index, {}).setdefault(producer_id, {})
        for o in offsets:
            pending[(group_id, o.topic, o.partition)] = CommittedOffset(o.offset, o.leader_epoch, o.metadata, now_ms)

    def complete(self, index: int, producer_id: int, producer_epoch: int, committed: bool) -> int:
        """The marker of `producer_id`'s transaction reached offsets partition `index`."""
        self._saw(index, producer_id, producer_epoch)
        pending = self._pending.get(index, {}).pop(producer_id, {})
        if committed:
            for (group_id, topic, partition), offset in pending.items():
                self._groups.restore_offset(group_id, topic, partition, offset)
        return len(pending)

    def is_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """An offset of this partition waits for a marker (OffsetFetch's require_stable)."""
        return any((group_id, topic, partition) in by_key for producers in self._pending.values() for by_key in producers.values())

    def unload(self, index: int) -> None:
        self._pending.pop(index, None)
        self._epochs.pop(index, None)

    def replay(self, index: int, header: BatchHeader, batch: bytes | memoryview, where: str, topic_exists: Callable[[str], bool]) -> None:
        """A transactional batch of the offsets partition, while loading it."""
        if header.is_control:
            kind = control_type(batch)
            if kind in (CONTROL_ABORT, CONTROL_COMMIT):
                self.complete(index, header.producer_id, header.producer_epoch, kind == CONTROL_COMMIT)
            return
        self._saw(index, header.producer_id, header.producer_epoch)
        pending = self._pending.setdefault(index, {}).setdefault(header.producer_id, {})
        for record in decode_batch(batch, where):
            if isinstance(record, OffsetRecord) and record.committed is not None and topic_exists(record.topic):
                pending[(record.group_id, record.topic, record.partition)] = record.committed

    def on_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, committed: bool, coordinated: Callable[[int], bool]) -> None:
        """Broker.on_txn_marker's listener: a marker appended to an offsets partition this
        broker coordinates (a follower's, or one being loaded, is handled by the replay)."""
        if coordinated(tp.partition):
            count = self.complete(tp.partition, producer_id, producer_epoch, committed)
            if count:
                log.info("%s: %s %d transactional offsets of producer %d", tp, "committed" if committed else "dropped", count, producer_id)
