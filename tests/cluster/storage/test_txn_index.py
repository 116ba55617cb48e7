"""The aborted-transaction index, transaction markers, and the partition state rebuilt from
a log holding transactional and control batches (reopen, truncation, log start moves)."""

from __future__ import annotations

import pytest

from cluster.broker.partition import Partition, ReplicationSettings, TopicPartition
from cluster.protocol.records import Record, build_batch, build_control_batch, read_control_marker
from cluster.storage.batch import ATTR_TRANSACTIONAL, parse_header
from cluster.storage.config import LogConfig
from cluster.storage.disk import MemoryDisk
from cluster.storage.log import PartitionLog
from cluster.storage.txn_index import AbortedTxn, AbortedTxnIndex, ControlMarker

SMALL = LogConfig(segment_bytes=300, index_interval_bytes=100, retention_ms=None)


def test_index_overlap_truncate_and_drop() -> None:
    index = AbortedTxnIndex()
    index.add(AbortedTxn(7, 0, 4, 5))
    index.add(AbortedTxn(8, 2, 9, 10))
    index.add(AbortedTxn(7, 12, 15, 16))
    with pytest.raises(ValueError):
        index.add(AbortedTxn(9, 1, 15, 16))  # not after the last marker
    assert [e.producer_id for e in index.overlapping(5, 20)] == [8, 7]
    assert [e.producer_id for e in index.overlapping(0, 2)] == [7]  # first offset 2 is not below 2
    assert index.overlapping(16, 30) == []
    index.truncate_to(15)
    assert [e.last_offset for e in index.entries()] == [4, 9]
    index.drop_below(5)
    assert [e.last_offset for e in index.entries()] == [9]


def test_control_batch_round_trip() -> None:
    batch = build_control_batch(committed=False, producer_id=42, producer_epoch=3, coordinator_epoch=11, base_offset=7, timestamp_ms=5)
    header = parse_header(batch)
    assert header.is_control and header.is_transactional and header.producer_id == 42 and header.producer_epoch == 3
    assert read_control_marker(batch) == ControlMarker(False, 11)
    assert read_control_marker(build_batch([Record(b"x", b"y")], base_offset=0, timestamp_ms=0)) is None


def _txn(value: bytes, producer_id: int, sequence: int) -> bytes:
    return build_batch([Record(b"k", value)], base_offset=0, timestamp_ms=0, attributes=ATTR_TRANSACTIONAL, producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence)


def _partition(disk: MemoryDisk, high_watermark: int = 0) -> Partition:
    log = PartitionLog.open(disk, "/data/t-0", SMALL, now_ms=0)
    return Partition(TopicPartition("t", 0), log, ReplicationSettings(broker_id=1), high_watermark=high_watermark)


def _write(partition: Partition) -> None:
    """Offsets: 0 A, 1 B, 2 abort B, 3 A, 4 commit A, 5 B (open)."""
    partition.role = "leader"  # appends as leader without the metadata (single replica)
    partition.leader_epoch = 0
    partition.append_as_leader(_txn(b"a", 1, 0), 0)
    partition.append_as_leader(_txn(b"b", 2, 0), 0)
    partition.append_marker(committed=False, producer_id=2, producer_epoch=0, coordinator_epoch=0, now_ms=0)
    partition.append_as_leader(_txn(b"a", 1, 1), 0)
    partition.append_marker(committed=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, now_ms=0)
    partition.append_as_leader(_txn(b"b", 2, 1), 0)


def test_reopen_rebuilds_index_and_open_transactions() -> None:
    disk = MemoryDisk()
    partition = _partition(disk)
    _write(partition)
    partition.log.flush()
    assert partition.log.segment_count > 1  # the state spans segments
    # The LSO waits for the HWM: a single replica's HWM follows its log end only as leader.
    assert partition.producers.last_stable_offset(6) == 5
    expected = [(2, 1, 2)]
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in partition.producers.aborted.entries()] == expected
    partition.log.close()

    reopened = _partition(disk, high_watermark=6)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in reopened.producers.aborted.entries()] == expected
    assert reopened.last_stable_offset == 5
    entry = reopened.producers.entry(2)
    assert entry is not None and entry.current_txn_first_offset == 5

    # Truncation below the abort marker takes its entry away and reopens B's transaction.
    reopened.truncate(2)
    assert reopened.producers.aborted.entries() == []
    assert reopened.last_stable_offset == 0
    entry = reopened.producers.entry(2)
    assert entry is not None and entry.current_txn_first_offset == 1


def test_log_start_past_an_aborted_transaction_drops_it() -> None:
    disk = MemoryDisk()
    partition = _partition(disk)
    _write(partition)
    partition.high_watermark = 6
    partition.log.delete_records_before(3)
    assert partition.aborted_transactions(3, 6) == []
    assert partition.producers.aborted.entries() == []
