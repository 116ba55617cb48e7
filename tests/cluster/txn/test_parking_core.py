"""AddPartitionsToTxn and AddOffsetsToTxn that meet the previous transaction still completing
(PrepareCommit/PrepareAbort durable, markers or Complete* in flight) wait on the coordinator
(`transaction.add.partitions.wait.max.ms`, ours) and are answered once Complete* is
installed, instead of CONCURRENT_TRANSACTIONS at once (which costs librdkafka a fixed 20 ms
backoff per transaction); CONCURRENT_TRANSACTIONS when the bound expires, NOT_COORDINATOR
when the coordinator loses the partition, and as Kafka with the setting at 0."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.offsets_log import partition_for_group
from cluster.broker.partition import TopicPartition
from cluster.broker.txn.metadata import TxnState
from cluster.broker.txn.state_log import partition_for_transactional_id
from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver, Pending
from tests.cluster.txn.test_coordinator_core import TXN_ID, driver_with_topic, state_log
from tests.cluster.txn.test_markers_core import MarkerLeader, begin, state_of
from tests.cluster.txn.txn_requests import add_partitions, end_txn

WAIT_MS = 500  # the default


def send_add_partitions(driver: CoreDriver, producer_id: int, producer_epoch: int, partition: int) -> Pending:
    topic_cls = driver.request_class(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic")
    return driver.send(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=producer_id,
                       v3_and_below_producer_epoch=producer_epoch, v3_and_below_topics=(topic_cls(name="events", partitions=(partition,)),))


def send_add_offsets(driver: CoreDriver, producer_id: int, producer_epoch: int, group_id: str) -> Pending:
    return driver.send(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=TXN_ID, producer_id=producer_id, producer_epoch=producer_epoch,
                       group_id=group_id)


def add_error(pending: Pending) -> Any:
    (topic,) = pending.body.results_by_topic_v3_and_below
    (partition,) = topic.results_by_partition
    return partition.partition_error_code


def test_the_next_transactions_requests_wait_for_complete_commit_and_then_succeed() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    # The first marker request fails retriably: the markers land one retry backoff later.
    leader.errors = [{0: ErrorCode.not_leader_or_follower, 1: ErrorCode.not_leader_or_follower}]
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    assert state_of(driver) is TxnState.PREPARE_COMMIT
    adds = send_add_partitions(driver, pid, epoch, 1)
    offsets = send_add_offsets(driver, pid, epoch, "group-a")
    driver.scheduler.advance(50)
    assert not adds.done and not offsets.done and driver.broker.txn.coordinator.parked.count(TXN_ID) == 2
    driver.run_until(lambda: adds.done and offsets.done, WAIT_MS, "the parked requests answered")
    assert add_error(adds) is ErrorCode.none and offsets.body.error_code is ErrorCode.none
    # Answered after CompleteCommit, each written as its own transition of the next transaction.
    assert [s for s, _, _ in state_log(driver, TXN_ID)][-4:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT, TxnState.ONGOING,
                                                                  TxnState.ONGOING]
    offsets_tp = TopicPartition("__consumer_offsets", partition_for_group("group-a", 3))
    assert driver.broker.txn.coordinator.txns[TXN_ID].partitions == {TopicPartition("events", 1), offsets_tp}


def test_a_parked_request_is_answered_concurrent_transactions_when_the_bound_expires() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    leader.answering = False  # the markers never land
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=False) is ErrorCode.none
    started_ms = driver.clock.wall_ms()
    adds = send_add_partitions(driver, pid, epoch, 0)
    driver.scheduler.advance(WAIT_MS - 10)
    assert not adds.done
    driver.run_until(lambda: adds.done, 100, "the parked request's bound")
    assert add_error(adds) is ErrorCode.concurrent_transactions
    assert driver.clock.wall_ms() - started_ms >= WAIT_MS
    assert driver.broker.txn.coordinator.parked.count(TXN_ID) == 0 and state_of(driver) is TxnState.PREPARE_ABORT


def test_parked_requests_are_told_not_coordinator_when_the_partition_is_unloaded() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    leader.answering = False
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    adds = send_add_partitions(driver, pid, epoch, 0)
    driver.scheduler.advance(10)
    assert not adds.done
    driver.broker.txn.coordinator.unload(partition_for_transactional_id(TXN_ID, 3))  # as when it stops leading the partition
    assert adds.done and add_error(adds) is ErrorCode.not_coordinator


def test_with_the_wait_at_zero_the_coordinator_answers_concurrent_transactions_at_once_as_kafka() -> None:
    driver = driver_with_topic(**{"transaction.add.partitions.wait.max.ms": "0"})
    leader = MarkerLeader(driver)
    leader.errors = [{0: ErrorCode.not_leader_or_follower, 1: ErrorCode.not_leader_or_follower}]
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    adds = send_add_partitions(driver, pid, epoch, 1)
    assert adds.done and add_error(adds) is ErrorCode.concurrent_transactions
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_COMMIT, 5_000, "the commit completed")
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [1]}) == {("events", 1): ErrorCode.none}


def test_only_the_producer_of_the_completing_transaction_waits() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    leader.answering = False
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    stale = send_add_partitions(driver, pid, epoch - 1, 0)
    other = send_add_partitions(driver, pid + 1, epoch, 0)
    assert stale.done and add_error(stale) is ErrorCode.producer_fenced
    assert other.done and add_error(other) is ErrorCode.invalid_producer_id_mapping
    # EndTxn is answered as Kafka answers it (its retry while prepared: CONCURRENT_TRANSACTIONS).
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.concurrent_transactions
