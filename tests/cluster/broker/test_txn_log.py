"""The log side of transactions on one in-process broker: transactional produce, markers
(WriteTxnMarkers), the last stable offset, read_committed Fetch and ListOffsets, the
aborted-transaction index, fencing, and all of it after a crash and restart."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.protocol.codec import build
from cluster.protocol.records import Record, build_batch, read_records
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import ATTR_TRANSACTIONAL, parse_header
from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import create_topic, init_producer_id, topic_id

TOPIC = "t"


def txn_batch(values: list[bytes], producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool = True) -> bytes:
    return build_batch([Record(b"k", v) for v in values], base_offset=0, timestamp_ms=1_700_000_000_000,
                       attributes=ATTR_TRANSACTIONAL if transactional else 0, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)


def produce(driver: CoreDriver, records: bytes, transactional_id: str | None = "txn", partition: int = 0) -> Any:
    data_cls = driver.request_class(ApiKey.PRODUCE, 10, "PartitionProduceData")
    topic_cls = driver.request_class(ApiKey.PRODUCE, 10, "TopicProduceData")
    body = driver.call(ApiKey.PRODUCE, 10, transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=5),
                       topic_data=(topic_cls(name=TOPIC, partition_data=(data_cls(index=partition, records=records),)),))
    return body.responses[0].partition_responses[0]


def write_marker(driver: CoreDriver, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int = 0,
                 partitions: tuple[tuple[str, int], ...] = ((TOPIC, 0),)) -> dict[tuple[str, int], ErrorCode]:
    marker_cls = driver.request_class(ApiKey.WRITE_TXN_MARKERS, 1, "WritableTxnMarker")
    topic_cls = driver.request_class(ApiKey.WRITE_TXN_MARKERS, 1, "WritableTxnMarkerTopic")
    topics = {}
    for name, index in partitions:
        topics.setdefault(name, []).append(index)
    body = driver.call(ApiKey.WRITE_TXN_MARKERS, 1, markers=(marker_cls(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=committed, coordinator_epoch=coordinator_epoch,
        topics=tuple(topic_cls(name=n, partition_indexes=tuple(i)) for n, i in topics.items())),))
    return {(t.name, int(p.partition_index)): p.error_code for m in body.markers for t in m.topics for p in t.partitions}


def fetch(driver: CoreDriver, offset: int, isolation_level: int, max_wait_ms: int = 0) -> Any:
    part_cls = driver.request_class(ApiKey.FETCH, 16, "FetchPartition")
    topic_cls = driver.request_class(ApiKey.FETCH, 16, "FetchTopic")
    fetch_topic = build(topic_cls, topic=TOPIC, topic_id=topic_id(driver, TOPIC), partitions=(part_cls(
        partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),))
    pending = driver.send(ApiKey.FETCH, 16, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
                          max_bytes=1 << 24, isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=(fetch_topic,),
                          forgotten_topics_data=(), rack_id="", cluster_id=None,
                          replica_state=driver.request_class(ApiKey.FETCH, 16, "ReplicaState")())
    return pending


def fetched(pending: Any) -> tuple[Any, list[tuple[int, bytes | None, bool]]]:
    """The partition result and its (offset, value, is control) records."""
    part = pending.body.responses[0].partitions[0]
    out = []
    data = bytes(part.records or b"")
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        for record in read_records(data[pos:pos + header.size_bytes]):
            out.append((record.offset, record.value, header.is_control))
        pos += header.size_bytes
    return part, out


def latest(driver: CoreDriver, isolation_level: int) -> int:
    part_cls = driver.request_class(ApiKey.LIST_OFFSETS, 7, "ListOffsetsPartition")
    topic_cls = driver.request_class(ApiKey.LIST_OFFSETS, 7, "ListOffsetsTopic")
    body = driver.call(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation_level,
                       topics=(topic_cls(name=TOPIC, partitions=(part_cls(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    return int(body.topics[0].partitions[0].offset)


def committed_values(driver: CoreDriver) -> tuple[list[bytes | None], list[tuple[int, int]], int]:
    """What a read_committed consumer keeps from offset 0: values outside aborted transactions,
    the aborted list and the LSO."""
    pending = fetch(driver, 0, 1)
    part, records = fetched(pending)
    aborted = sorted((int(a.producer_id), int(a.first_offset)) for a in (part.aborted_transactions or ()))
    return [v for _, v, control in records if not control], aborted, int(part.last_stable_offset)


def setup() -> tuple[CoreDriver, int, int]:
    # Raw transactional batches with no coordinator: KIP-890's verification would refuse them.
    driver = CoreDriver({"transaction.partition.verification.enable": "false"})
    assert create_topic(driver, TOPIC, 1).topics[0].error_code is ErrorCode.none
    a = int(init_producer_id(driver).producer_id)
    b = int(init_producer_id(driver).producer_id)
    return driver, a, b


def test_commit_and_abort_set_the_lso_and_the_aborted_list() -> None:
    driver, a, b = setup()
    assert produce(driver, txn_batch([b"a1"], a, 0, 0)).error_code is ErrorCode.none  # offset 0
    assert produce(driver, txn_batch([b"b1"], b, 0, 0)).error_code is ErrorCode.none  # offset 1
    assert produce(driver, txn_batch([b"a2"], a, 0, 1)).error_code is ErrorCode.none  # offset 2
    # Both open: nothing is stable; read_uncommitted sees everything below the HWM.
    assert committed_values(driver) == ([], [], 0)
    assert latest(driver, 1) == 0 and latest(driver, 0) == 3
    part, records = fetched(fetch(driver, 0, 0))
    assert [v for _, v, _ in records] == [b"a1", b"b1", b"a2"] and part.aborted_transactions is None
    described = driver.broker.partition(TOPIC, 0).producers.entry(b)
    assert described is not None and described.current_txn_first_offset == 1

    assert write_marker(driver, a, 0, committed=True) == {(TOPIC, 0): ErrorCode.none}  # offset 3
    # B's transaction from offset 1 still holds the LSO back.
    values, aborted, lso = committed_values(driver)
    assert (values, aborted, lso) == ([b"a1"], [], 1)
    assert latest(driver, 1) == 1

    assert write_marker(driver, b, 0, committed=False, coordinator_epoch=3) == {(TOPIC, 0): ErrorCode.none}  # offset 4
    values, aborted, lso = committed_values(driver)
    assert lso == 5 and latest(driver, 1) == 5
    # The consumer gets every record and the aborted transactions to drop: B's from offset 1.
    assert values == [b"a1", b"b1", b"a2"] and aborted == [(b, 1)]
    partition = driver.broker.partition(TOPIC, 0)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in partition.log.aborted_txns()] == [(b, 1, 4)]
    # A fetch from offset 3 still reads B's abort marker, so it is told of B's transaction,
    # as Kafka's index search (last offset >= fetch offset) tells it; past the marker, not.
    part, _ = fetched(fetch(driver, 3, 1))
    assert [(int(t.producer_id), int(t.first_offset)) for t in part.aborted_transactions] == [(b, 1)]
    assert partition.aborted_transactions(5, 6) == []


def test_fencing_and_transactional_rules() -> None:
    driver, a, _ = setup()
    assert produce(driver, txn_batch([b"x"], a, 1, 0)).error_code is ErrorCode.none
    # A non-transactional batch while the transaction is open.
    assert produce(driver, txn_batch([b"y"], a, 1, 1, transactional=False), transactional_id=None).error_code is ErrorCode.invalid_txn_state
    # A transactional batch without a transactional id.
    assert produce(driver, txn_batch([b"y"], a, 1, 1), transactional_id=None).error_code is ErrorCode.transactional_id_authorization_failed
    # An older producer epoch (a zombie).
    assert produce(driver, txn_batch([b"z"], a, 0, 0)).error_code is ErrorCode.invalid_producer_epoch
    assert write_marker(driver, a, 1, committed=True, coordinator_epoch=5) == {(TOPIC, 0): ErrorCode.none}
    # Markers: a stale coordinator epoch, a stale producer epoch, a partition we lack.
    assert write_marker(driver, a, 1, committed=False, coordinator_epoch=4) == {(TOPIC, 0): ErrorCode.transaction_coordinator_fenced}
    assert write_marker(driver, a, 0, committed=False, coordinator_epoch=5) == {(TOPIC, 0): ErrorCode.invalid_producer_epoch}
    assert write_marker(driver, a, 1, committed=False, coordinator_epoch=5, partitions=(("nope", 0),)) == {("nope", 0): ErrorCode.unknown_topic_or_partition}
    # After the marker, the producer writes non-transactionally again.
    assert produce(driver, txn_batch([b"y"], a, 1, 1, transactional=False), transactional_id=None).error_code is ErrorCode.none
    assert committed_values(driver)[0] == [b"x", b"y"]


def test_a_read_committed_long_poll_waits_for_the_lso() -> None:
    driver, a, _ = setup()
    assert produce(driver, txn_batch([b"x"], a, 0, 0)).error_code is ErrorCode.none
    pending = fetch(driver, 0, 1, max_wait_ms=5_000)
    driver.scheduler.advance(100)
    assert not pending.done  # the open transaction's record is not readable yet
    assert write_marker(driver, a, 0, committed=True) == {(TOPIC, 0): ErrorCode.none}
    driver.run_until(lambda: pending.done, 1_000, "the parked read_committed fetch answered")
    _, records = fetched(pending)
    assert [v for _, v, control in records if not control] == [b"x"]


def test_state_and_index_are_rebuilt_after_a_crash() -> None:
    driver, a, b = setup()
    assert produce(driver, txn_batch([b"a1"], a, 0, 0)).error_code is ErrorCode.none
    assert produce(driver, txn_batch([b"b1"], b, 0, 0)).error_code is ErrorCode.none
    assert write_marker(driver, b, 0, committed=False, coordinator_epoch=2) == {(TOPIC, 0): ErrorCode.none}
    assert produce(driver, txn_batch([b"b2"], b, 0, 1)).error_code is ErrorCode.none  # B's next transaction, offset 3
    assert write_marker(driver, a, 0, committed=True) == {(TOPIC, 0): ErrorCode.none}
    before = committed_values(driver)
    assert before == ([b"a1", b"b1"], [(b, 1)], 3)
    driver.broker.replicas.checkpoint_high_watermarks()
    driver.restart(crash=False)
    driver.run_until(lambda: (p := driver.broker.partition(TOPIC, 0)) is not None and p.is_leader and p.high_watermark == 5, 10_000,
                     "the partition led again with its HWM")
    assert committed_values(driver) == before
    partition = driver.broker.partition(TOPIC, 0)
    entry = partition.producers.entry(b)
    assert entry is not None and entry.current_txn_first_offset == 3 and entry.coordinator_epoch == 2
    # The fenced coordinator epoch survives too.
    assert write_marker(driver, b, 0, committed=True, coordinator_epoch=1) == {(TOPIC, 0): ErrorCode.transaction_coordinator_fenced}
    assert write_marker(driver, b, 0, committed=True, coordinator_epoch=2) == {(TOPIC, 0): ErrorCode.none}
    assert committed_values(driver) == ([b"a1", b"b1", b"b2"], [(b, 1)], 6)
