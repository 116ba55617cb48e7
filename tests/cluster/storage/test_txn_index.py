"""The aborted-transaction index (per segment, in memory and in `.txnindex` files), transaction
markers, and the partition state kept by a log holding transactional and control batches
(reopen, truncation, log start moves)."""

from __future__ import annotations

import pytest

from cluster.broker.partition import Partition, ReplicationSettings, TopicPartition
from cluster.broker.producer_state import ProducerStateTable
from cluster.protocol.records import Record, build_batch, build_control_batch, read_control_marker
from cluster.storage.batch import ATTR_TRANSACTIONAL, BatchHeader, parse_header
from cluster.storage.config import LogConfig
from cluster.storage.disk import MemoryDisk
from cluster.storage.log import PartitionLog
from cluster.storage.txn_index import AbortedTxn, AbortedTxnIndex, ControlMarker, TxnIndexInvalidError

SMALL = LogConfig(segment_bytes=300, index_interval_bytes=100, retention_ms=None)


def test_index_collect_stops_at_an_lso_past_the_bound_and_truncates() -> None:
    index = AbortedTxnIndex()
    index.add(AbortedTxn(7, 0, 4, 5))
    index.add(AbortedTxn(8, 2, 9, 3))  # another transaction (from 3) was open when 8 aborted
    index.add(AbortedTxn(7, 12, 15, 16))
    with pytest.raises(ValueError):
        index.add(AbortedTxn(9, 1, 15, 16))  # not after the last marker
    with pytest.raises(ValueError):
        index.add(AbortedTxn(9, 20, 18, 21))  # starts after its marker
    found: list[AbortedTxn] = []
    assert not index.collect(5, 20, found)  # no entry's LSO reaches 20: later segments may hold more
    assert [e.producer_id for e in found] == [8, 7]
    found = []
    assert index.collect(0, 2, found)  # the first entry's LSO (5) is past 2: nothing later overlaps
    assert [e.producer_id for e in found] == [7]
    found = []
    assert index.collect(16, 30, found) is False and found == []
    assert index.truncate_to(15) == 1
    assert [e.last_offset for e in index.entries()] == [4, 9]


def test_index_file_round_trip_and_checks() -> None:
    index = AbortedTxnIndex()
    index.add(AbortedTxn(7, 100, 104, 105))
    index.add(AbortedTxn(8, 101, 109, 110))
    data = index.encode()
    assert len(data) == 64
    assert AbortedTxnIndex.decode(data, base_offset=100, next_offset=110).entries() == index.entries()
    with pytest.raises(TxnIndexInvalidError, match="not a multiple of 32"):
        AbortedTxnIndex.decode(data[:-3], base_offset=100, next_offset=110)
    with pytest.raises(TxnIndexInvalidError, match="outside the segment"):
        AbortedTxnIndex.decode(data, base_offset=100, next_offset=109)  # the last marker is past the end
    with pytest.raises(TxnIndexInvalidError, match="outside the segment"):
        AbortedTxnIndex.decode(data, base_offset=105, next_offset=110)
    with pytest.raises(TxnIndexInvalidError, match="not after the last one"):
        AbortedTxnIndex.decode(data[32:] + data[:32], base_offset=100, next_offset=110)
    with pytest.raises(TxnIndexInvalidError, match="inconsistent"):
        AbortedTxnIndex.decode(AbortedTxn(7, 100, 104, 200).encode(), base_offset=100, next_offset=110)


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


def test_reopen_restores_index_and_open_transactions() -> None:
    disk = MemoryDisk()
    partition = _partition(disk)
    _write(partition)
    partition.log.flush()
    assert partition.log.segment_count > 1  # the state spans segments
    # The LSO waits for the HWM: a single replica's HWM follows its log end only as leader.
    assert partition.producers.last_stable_offset(6) == 5
    # A's transaction (from 0) was open when B aborted: the LSO after the abort is 0.
    expected = [AbortedTxn(2, 1, 2, 0)]
    assert partition.log.aborted_txns() == expected
    partition.log.close()

    reopened = _partition(disk, high_watermark=6)
    assert reopened.log.recovery.state_batches == 0  # a clean close: the snapshot at the log end
    assert reopened.log.aborted_txns() == expected
    assert reopened.last_stable_offset == 5
    entry = reopened.producers.entry(2)
    assert entry is not None and entry.current_txn_first_offset == 5

    # Truncation below the abort marker takes its entry away and reopens B's transaction.
    reopened.truncate(2)
    assert reopened.log.aborted_txns() == []
    assert reopened.last_stable_offset == 0
    entry = reopened.producers.entry(2)
    assert entry is not None and entry.current_txn_first_offset == 1


def test_log_start_past_an_aborted_transaction_drops_it() -> None:
    disk = MemoryDisk()
    partition = _partition(disk)
    _write(partition)
    partition.high_watermark = 6
    assert [(a.producer_id, a.first_offset) for a in partition.aborted_transactions(0, 6)] == [(2, 1)]
    partition.log.delete_records_before(3)
    assert partition.aborted_transactions(3, 6) == []
    assert partition.log.aborted_txns() == []


def test_ended_transactions_hold_the_lso_until_the_hwm_passes_their_marker_then_are_forgotten() -> None:
    table = ProducerStateTable()

    def header(offset: int, producer_id: int, *, marker: bool = False) -> tuple[BatchHeader, bytes]:
        batch = (build_control_batch(committed=True, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0, base_offset=offset,
                                     timestamp_ms=0) if marker else
                 build_batch([Record(b"k", b"v")], base_offset=offset, timestamp_ms=0, attributes=ATTR_TRANSACTIONAL,
                             producer_id=producer_id, producer_epoch=0, base_sequence=offset))
        return parse_header(batch), batch

    table.replay(*header(0, 7))
    table.replay(*header(1, 8))
    table.replay(*header(2, 7, marker=True))  # 7 commits at 2; 8 is still open from 1
    assert table.last_stable_offset(2) == 0  # 7's marker is not below the HWM yet
    assert table.last_stable_offset(3) == 1  # now it is: 8's open transaction holds the LSO
    empty_size = len(table.snapshot())
    # A follower's table: nothing asks for the LSO, the HWM moves on; ended transactions go.
    for offset in range(3, 3003, 2):
        table.replay(*header(offset, 9))
        table.replay(*header(offset + 1, 9, marker=True))
        table.on_high_watermark(offset + 2)
    assert len(table.snapshot()) == empty_size + 1 * (8 + 2 + 8 + 4 + 8 + 1) + 5 * 24  # producer 9 and its five batches
    assert table.last_stable_offset(3003) == 1
