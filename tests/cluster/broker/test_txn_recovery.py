"""Transaction state after a power loss (unclean shutdown) of one in-process broker: what
survived on disk decides the open transactions, the LSO and the aborted-transaction index,
all rebuilt from the log at open; a marker that was never fsynced is gone, so its
transaction is open again, as its log says."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import create_topic, init_producer_id
from tests.cluster.broker.test_txn_log import TOPIC, committed_values, produce, txn_batch, write_marker


def test_a_crash_keeps_what_was_flushed_and_reopens_what_was_not() -> None:
    driver = CoreDriver({"transaction.partition.verification.enable": "false"})  # no coordinator: raw batches
    assert create_topic(driver, TOPIC, 1).topics[0].error_code is ErrorCode.none
    a = int(init_producer_id(driver).producer_id)
    b = int(init_producer_id(driver).producer_id)
    assert produce(driver, txn_batch([b"a1"], a, 0, 0)).error_code is ErrorCode.none  # 0
    assert produce(driver, txn_batch([b"b1"], b, 0, 0)).error_code is ErrorCode.none  # 1
    assert write_marker(driver, b, 0, committed=False, coordinator_epoch=4) == {(TOPIC, 0): ErrorCode.none}  # 2
    partition = driver.broker.partition(TOPIC, 0)
    assert partition is not None
    partition.log.flush()
    driver.broker.replicas.checkpoint_high_watermarks()
    # A's commit marker is appended and acknowledged, but not fsynced before the power loss.
    assert write_marker(driver, a, 0, committed=True) == {(TOPIC, 0): ErrorCode.none}  # 3
    assert committed_values(driver) == ([b"a1", b"b1"], [(b, 1)], 4)
    driver.restart(crash=True)
    driver.run_until(lambda: (p := driver.broker.partition(TOPIC, 0)) is not None and p.is_leader, 10_000, "the partition led again")
    partition = driver.broker.partition(TOPIC, 0)
    assert partition is not None and partition.log_end_offset == 3  # the marker is gone
    # A's transaction is open again from offset 0: nothing is stable; B's abort survived.
    assert committed_values(driver) == ([], [], 0)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in partition.log.aborted_txns()] == [(b, 1, 2)]
    entry_b = partition.producers.entry(b)
    assert entry_b is not None and entry_b.coordinator_epoch == 4
    # The coordinator resends A's marker, as it does after any failure to get an answer.
    assert write_marker(driver, a, 0, committed=True) == {(TOPIC, 0): ErrorCode.none}
    assert committed_values(driver) == ([b"a1", b"b1"], [(b, 1)], 4)


def test_describe_producers_shows_the_open_transaction_and_coordinator_epoch() -> None:
    driver = CoreDriver({"transaction.partition.verification.enable": "false"})
    assert create_topic(driver, TOPIC, 1).topics[0].error_code is ErrorCode.none
    a = int(init_producer_id(driver).producer_id)
    assert produce(driver, txn_batch([b"x"], a, 0, 0)).error_code is ErrorCode.none  # 0
    assert write_marker(driver, a, 0, committed=True, coordinator_epoch=7) == {(TOPIC, 0): ErrorCode.none}  # 1
    assert produce(driver, txn_batch([b"y"], a, 0, 1)).error_code is ErrorCode.none  # 2: the next transaction

    topic_cls = driver.request_class(ApiKey.DESCRIBE_PRODUCERS, 0, "TopicRequest")
    body = driver.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=(topic_cls(name=TOPIC, partition_indexes=(0,)),))
    (state,) = body.topics[0].partitions[0].active_producers
    assert (int(state.producer_id), int(state.coordinator_epoch), int(state.current_txn_start_offset)) == (a, 7, 2)
    assert write_marker(driver, a, 0, committed=False, coordinator_epoch=7) == {(TOPIC, 0): ErrorCode.none}
    body = driver.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=(topic_cls(name=TOPIC, partition_indexes=(0,)),))
    assert int(body.topics[0].partitions[0].active_producers[0].current_txn_start_offset) == -1
