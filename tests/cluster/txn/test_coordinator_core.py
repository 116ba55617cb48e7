"""The transaction coordinator in one broker core (in-process, virtual time): lookup,
InitProducerId and fencing (KIP-360 retries, KIP-588 errors by version), AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn transitions, every transition in __transaction_state and loaded
again after a crash, and the timeout abort."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.offsets_log import partition_for_group
from cluster.broker.partition import TopicPartition
from cluster.broker.topics import TRANSACTION_STATE_TOPIC
from cluster.broker.txn.metadata import TxnState
from cluster.broker.txn.state_log import decode_batch, partition_for_transactional_id
from cluster.storage.batch import parse_header
from tests.cluster.broker.core_driver import BROKER_ID, CoreDriver
from tests.cluster.broker.requests import create_topic
from tests.cluster.txn.txn_requests import (TXN_PROPERTIES, add_offsets, add_partitions, await_txn_coordinator, end_txn, find_txn_coordinator,
                                            init_txn_producer)

TXN_ID = "txn-1"


def driver_with_topic(**extra: str) -> CoreDriver:
    driver = CoreDriver({**TXN_PROPERTIES, **extra})
    assert create_topic(driver, "events", 2).topics[0].error_code is ErrorCode.none
    await_txn_coordinator(driver, TXN_ID)
    return driver


def state_log(driver: CoreDriver, transactional_id: str) -> list[tuple[TxnState, int, int]]:
    """(state, producer id, epoch) of every record of `transactional_id` in its partition."""
    partition = driver.broker.partition(TRANSACTION_STATE_TOPIC, partition_for_transactional_id(transactional_id, 3))
    assert partition is not None
    out = []
    position = partition.log_start_offset
    while position < partition.log_end_offset:
        for batch in partition.read_for_replica(position, 1 << 20):
            out += [(r.state, r.producer_id, r.producer_epoch) for r in decode_batch(batch, "test") if r.transactional_id == transactional_id]
            position = parse_header(batch).next_offset
    return out


def test_find_coordinator_key_type_1_creates_the_state_topic_and_names_this_broker() -> None:
    driver = CoreDriver(TXN_PROPERTIES)
    assert find_txn_coordinator(driver, TXN_ID).error_code is ErrorCode.coordinator_not_available  # created now
    driver.run_until(lambda: find_txn_coordinator(driver, TXN_ID).error_code is ErrorCode.none, 10_000, "the coordinator")
    found = find_txn_coordinator(driver, TXN_ID)
    assert found.node_id == BROKER_ID
    topic = driver.broker.topics.by_name(TRANSACTION_STATE_TOPIC)
    assert topic is not None and topic.num_partitions == 3 and topic.configs.get("min.insync.replicas") == "1"


def test_init_producer_id_allocates_then_bumps_and_kip360_retries_get_the_same_answer() -> None:
    driver = driver_with_topic()
    first = init_txn_producer(driver, TXN_ID)
    assert first.error_code is ErrorCode.none and first.producer_epoch == 0
    pid = first.producer_id
    second = init_txn_producer(driver, TXN_ID)  # a new instance of the producer: epoch bump
    assert (second.error_code, second.producer_id, second.producer_epoch) == (ErrorCode.none, pid, 1)
    # KIP-360: the producer at epoch 1 bumps its own epoch; a retry of that request (its
    # answer lost) gets the same epoch back, not another bump.
    bumped = init_txn_producer(driver, TXN_ID, producer_id=pid, producer_epoch=1)
    assert (bumped.error_code, bumped.producer_epoch) == (ErrorCode.none, 2)
    retried = init_txn_producer(driver, TXN_ID, producer_id=pid, producer_epoch=1)
    assert (retried.error_code, retried.producer_epoch) == (ErrorCode.none, 2)
    stale = init_txn_producer(driver, TXN_ID, producer_id=pid, producer_epoch=0)
    assert stale.error_code is ErrorCode.producer_fenced
    assert init_txn_producer(driver, TXN_ID, producer_id=pid, producer_epoch=0, version=3).error_code is ErrorCode.invalid_producer_epoch
    assert init_txn_producer(driver, TXN_ID, timeout_ms=900_001).error_code is ErrorCode.invalid_transaction_timeout
    assert [e for _, _, e in state_log(driver, TXN_ID)] == [0, 1, 2]


def test_a_transaction_goes_ongoing_then_prepare_commit_and_refuses_stale_and_concurrent_requests() -> None:
    driver = driver_with_topic()
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0, 7]}) == {("events", 0): ErrorCode.operation_not_attempted,
                                                                                ("events", 7): ErrorCode.unknown_topic_or_partition}
    assert add_partitions(driver, TXN_ID, pid, epoch + 1, {"events": [0]}) == {("events", 0): ErrorCode.producer_fenced}
    assert add_partitions(driver, TXN_ID, pid, epoch + 1, {"events": [0]}, version=1) == {("events", 0): ErrorCode.invalid_producer_epoch}
    assert add_partitions(driver, TXN_ID, pid + 1, epoch, {"events": [0]}) == {("events", 0): ErrorCode.invalid_producer_id_mapping}
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.invalid_txn_state  # nothing begun
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0, 1]}) == {("events", 0): ErrorCode.none, ("events", 1): ErrorCode.none}
    assert add_offsets(driver, TXN_ID, pid, epoch, "group-a") is ErrorCode.none
    txn = driver.broker.txn.coordinator.txns[TXN_ID]
    offsets_tp = TopicPartition("__consumer_offsets", partition_for_group("group-a", 3))
    assert txn.state is TxnState.ONGOING
    assert txn.partitions == {TopicPartition("events", 0), TopicPartition("events", 1), offsets_tp}
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    assert driver.broker.txn.coordinator.txns[TXN_ID].state is TxnState.PREPARE_COMMIT
    # Until the markers are written the transaction is still ending.
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.concurrent_transactions
    assert end_txn(driver, TXN_ID, pid, epoch, committed=False) is ErrorCode.invalid_txn_state
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0]}) == {("events", 0): ErrorCode.concurrent_transactions}
    assert init_txn_producer(driver, TXN_ID).error_code is ErrorCode.concurrent_transactions
    assert [s for s, _, _ in state_log(driver, TXN_ID)] == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING, TxnState.PREPARE_COMMIT]


def test_a_restarted_coordinator_reloads_its_transactions_from_the_state_log() -> None:
    driver = driver_with_topic()
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [1]}) == {("events", 1): ErrorCode.none}
    other = "txn-2"
    await_txn_coordinator(driver, other)
    other_init = init_txn_producer(driver, other)
    assert add_partitions(driver, other, other_init.producer_id, 0, {"events": [0]}) == {("events", 0): ErrorCode.none}
    assert end_txn(driver, other, other_init.producer_id, 0, committed=False) is ErrorCode.none
    before = dict(driver.broker.txn.coordinator.txns)
    driver.restart()  # RF 1: a power loss would drop the unflushed log, as in Kafka
    await_txn_coordinator(driver, TXN_ID)
    await_txn_coordinator(driver, other)
    after = driver.broker.txn.coordinator.txns
    assert after[TXN_ID] == before[TXN_ID] and after[TXN_ID].state is TxnState.ONGOING
    # The prepared abort is loaded as prepared: the new coordinator resends its markers.
    assert after[other] == before[other] and after[other].state is TxnState.PREPARE_ABORT
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none


def test_a_new_producer_instance_fences_the_open_transaction_with_an_epoch_bump() -> None:
    driver = driver_with_topic()
    init = init_txn_producer(driver, TXN_ID)
    pid = init.producer_id
    assert add_partitions(driver, TXN_ID, pid, 0, {"events": [0]}) == {("events", 0): ErrorCode.none}
    assert init_txn_producer(driver, TXN_ID).error_code is ErrorCode.concurrent_transactions
    txn = driver.broker.txn.coordinator.txns[TXN_ID]
    assert (txn.state, txn.producer_id, txn.producer_epoch) == (TxnState.PREPARE_ABORT, pid, 1)
    assert end_txn(driver, TXN_ID, pid, 0, committed=True) is ErrorCode.producer_fenced
    assert end_txn(driver, TXN_ID, pid, 0, committed=True, version=1) is ErrorCode.invalid_producer_epoch


def test_an_ongoing_transaction_past_its_timeout_is_aborted_with_an_epoch_bump() -> None:
    driver = driver_with_topic(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    init = init_txn_producer(driver, TXN_ID, timeout_ms=1000)
    pid = init.producer_id
    assert add_partitions(driver, TXN_ID, pid, 0, {"events": [0]}) == {("events", 0): ErrorCode.none}
    coordinator = driver.broker.txn.coordinator
    driver.scheduler.advance(500)
    assert coordinator.txns[TXN_ID].state is TxnState.ONGOING
    driver.run_until(lambda: coordinator.txns[TXN_ID].state is TxnState.PREPARE_ABORT, 5_000, "the timed-out transaction aborted")
    assert coordinator.txns[TXN_ID].producer_epoch == 1
    assert add_partitions(driver, TXN_ID, pid, 0, {"events": [1]}) == {("events", 1): ErrorCode.producer_fenced}


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    driver = driver_with_topic(**{"transactional.id.expiration.ms": "1000", "transaction.remove.expired.transaction.cleanup.interval.ms": "500"})
    init_txn_producer(driver, TXN_ID)
    coordinator = driver.broker.txn.coordinator
    driver.run_until(lambda: TXN_ID not in coordinator.txns, 5_000, "the idle id expired")
    driver.restart()  # RF 1: a power loss would drop the unflushed log, as in Kafka
    await_txn_coordinator(driver, TXN_ID)
    assert TXN_ID not in driver.broker.txn.coordinator.txns
    fresh = init_txn_producer(driver, TXN_ID)
    assert (fresh.error_code, fresh.producer_epoch) == (ErrorCode.none, 0)


def test_describe_and_list_transactions() -> None:
    from cluster.protocol.versions import ApiKey
    from tests.cluster.txn.txn_requests import call

    driver = driver_with_topic()
    init = init_txn_producer(driver, TXN_ID)
    assert add_partitions(driver, TXN_ID, init.producer_id, 0, {"events": [1, 0]}) == {("events", 0): ErrorCode.none,
                                                                                      ("events", 1): ErrorCode.none}
    await_txn_coordinator(driver, "idle")
    idle = init_txn_producer(driver, "idle")
    # Only an ongoing transaction has a start time; the others carry -1, as Kafka sends them,
    # which kio's decoder refuses, so this test describes the ongoing one.
    described = call(driver, ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(TXN_ID,)).transaction_states
    assert [(s.transactional_id, s.error_code, s.transaction_state, s.producer_id) for s in described] == [
        (TXN_ID, ErrorCode.none, "Ongoing", init.producer_id)]
    assert described[0].transaction_start_time.timestamp() * 1000 == driver.broker.txn.coordinator.txns[TXN_ID].start_ms
    assert [(t.topic, t.partitions) for t in described[0].topics] == [("events", (0, 1))]
    assert described[0].transaction_timeout.total_seconds() == 60
    listed = call(driver, ApiKey.LIST_TRANSACTIONS, 1, state_filters=(), producer_id_filters=(), duration_filter=-1)
    assert sorted((s.transactional_id, s.transaction_state) for s in listed.transaction_states) == [("idle", "Empty"), (TXN_ID, "Ongoing")]
    ongoing = call(driver, ApiKey.LIST_TRANSACTIONS, 1, state_filters=("Ongoing", "Bogus"), producer_id_filters=(), duration_filter=-1)
    assert [s.transactional_id for s in ongoing.transaction_states] == [TXN_ID] and ongoing.unknown_state_filters == ("Bogus",)
    by_pid = call(driver, ApiKey.LIST_TRANSACTIONS, 0, state_filters=(), producer_id_filters=(idle.producer_id,))
    assert [s.transactional_id for s in by_pid.transaction_states] == ["idle"]
    long_running = call(driver, ApiKey.LIST_TRANSACTIONS, 1, state_filters=(), producer_id_filters=(), duration_filter=3_600_000)
    assert long_running.transaction_states == ()


def test_the_state_log_is_not_deleted_by_retention() -> None:
    # Tiny segments and a short retention: a user topic would lose its old segments.
    driver = driver_with_topic(**{"log.retention.ms": "1000", "log.segment.bytes": "200", "log.retention.check.interval.ms": "500"})
    init_txn_producer(driver, TXN_ID)
    for _ in range(5):
        init_txn_producer(driver, TXN_ID)
    partition = driver.broker.partition(TRANSACTION_STATE_TOPIC, partition_for_transactional_id(TXN_ID, 3))
    assert partition is not None and partition.log.segment_count > 1
    driver.scheduler.advance(5_000)
    assert partition.log_start_offset == 0
    driver.restart()
    await_txn_coordinator(driver, TXN_ID)
    assert driver.broker.txn.coordinator.txns[TXN_ID].producer_epoch == 5
