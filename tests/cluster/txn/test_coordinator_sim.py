"""The transaction coordinator on three simulated brokers: its transitions are replicated in
__transaction_state (RF 3, min ISR 2) before they are answered, and when its broker dies the
new leader of the state partition takes over the transactional ids with their producer ids,
epochs and states, prepared transactions included (it resends their markers).

The coordinator's APIs are called on the broker cores directly; markers go over the virtual
network to the partitions' leaders."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.broker.topics import TRANSACTION_STATE_TOPIC
from cluster.broker.txn.metadata import TxnMetadata, TxnState
from cluster.broker.txn.state_log import partition_for_transactional_id
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCall, SimCluster
from cluster.storage.batch import ATTR_TRANSACTIONAL
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, req

TXN_ID = "sim-txn"
STATE_PARTITIONS = 3


def started(seed: int) -> SimCluster:
    sim = SimCluster(3, {"transaction.state.log.num.partitions": str(STATE_PARTITIONS)}, seed=seed)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    return sim


def coordinator_broker(sim: SimCluster) -> int:
    """Ask until some broker names a coordinator that has loaded the id's partition."""
    found: list[int] = []

    def ready() -> bool:
        for broker in sim.running_brokers():
            error, node, _, _ = broker.txn.find_coordinator(TXN_ID)
            if error is ErrorCode.none and sim.is_running(node):
                if sim.broker(node).txn.coordinator.coordinator_error(TXN_ID) is ErrorCode.none:
                    found[:] = [node]
                    return True
        return False

    sim.run_until(ready, 30_000, what="a loaded transaction coordinator")
    return found[0]


def send_txn_batch(sim: SimCluster, broker: int, index: int, producer_id: int, producer_epoch: int) -> SimCall:
    data_cls = req(ApiKey.PRODUCE, 9, "PartitionProduceData")
    topic_cls = req(ApiKey.PRODUCE, 9, "TopicProduceData")
    batch = build_batch([Record(None, b"v")], base_offset=0, timestamp_ms=sim.clock.wall_ms(), attributes=ATTR_TRANSACTIONAL,
                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0)
    pending = sim.send(broker, ApiKey.PRODUCE, 9, transactional_id=TXN_ID, acks=-1, timeout=datetime.timedelta(seconds=5),
                       topic_data=(topic_cls(name="events", partition_data=(data_cls(index=index, records=batch),)),))
    sim.run_until(lambda: pending.done, 30_000, step_ms=1, what="the produce answer")
    return pending


def call(sim: SimCluster, start, *args):  # type: ignore[no-untyped-def]
    """Run a coordinator call `start(*args, done)` to its answer."""
    answer: list[tuple] = []
    start(*args, lambda *result: answer.append(result))
    sim.run_until(lambda: bool(answer), 30_000, step_ms=1, what="the coordinator's answer")
    return answer[0]


def test_the_next_leader_of_the_state_partition_takes_over_the_transactions() -> None:
    sim = started(seed=7)
    assert create_topic(sim, 0, "events", 2, 3).error_code is ErrorCode.none
    first = coordinator_broker(sim)
    coordinator = sim.broker(first).txn.coordinator
    error, pid, epoch = call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert error is ErrorCode.none
    (error,) = call(sim, coordinator.add_partitions, TXN_ID, pid, epoch, [TopicPartition("events", 0), TopicPartition("events", 1)])
    assert error is ErrorCode.none
    for index in (0, 1):  # a transactional batch on each partition, verified with the coordinator (KIP-890)
        info = partition_info(sim, 0, "events", index)
        assert info is not None
        assert produce_result(send_txn_batch(sim, info.leader, index, pid, epoch))[0] is ErrorCode.none
    (error,) = call(sim, coordinator.end_txn, TXN_ID, pid, epoch, True)
    assert error is ErrorCode.none
    prepared: TxnMetadata = coordinator.txns[TXN_ID]
    assert prepared.state is TxnState.PREPARE_COMMIT
    sim.kill(first)
    second = coordinator_broker(sim)
    assert second != first
    taken_over = sim.broker(second).txn.coordinator
    assert taken_over.txns[TXN_ID] == prepared
    index = partition_for_transactional_id(TXN_ID, STATE_PARTITIONS)
    state_partition = sim.broker(second).partition(TRANSACTION_STATE_TOPIC, index)
    assert state_partition is not None and taken_over.coordinator_epoch(TXN_ID) == state_partition.leader_epoch
    # The prepared commit binds the new coordinator too: its producer may not start another
    # until the new coordinator has written the markers (WriteTxnMarkers to the partitions'
    # leaders) and CompleteCommit. The next transaction's AddPartitionsToTxn waits for that
    # (transaction.add.partitions.wait.max.ms) and is answered only then.
    def markers_closed() -> bool:
        for index in (0, 1):
            leader = next(b for b in sim.running_brokers() if (p := b.partition("events", index)) is not None and p.is_leader)
            partition = leader.partition("events", index)
            assert partition is not None
            entry = partition.producers.entry(pid)
            assert partition.high_watermark >= 2  # the batch and its commit marker (the old coordinator's may have landed too)
            if entry is None or entry.current_txn_first_offset >= 0:
                return False  # the marker has not closed its transaction there
        return True

    answered: list[tuple[ErrorCode, TxnState | None, bool]] = []
    taken_over.add_partitions(TXN_ID, pid, epoch, [TopicPartition("events", 0)], lambda error: answered.append(
        (error, taken_over.txns[TXN_ID].state, markers_closed())))
    assert not answered and taken_over.parked.count(TXN_ID) == 1
    sim.run_until(lambda: bool(answered), 30_000, step_ms=1, what="the parked AddPartitionsToTxn answered")
    assert answered == [(ErrorCode.none, TxnState.ONGOING, True)]
    assert taken_over.txns[TXN_ID].partitions == {TopicPartition("events", 0)}


def test_a_transition_is_not_answered_while_the_state_partition_lacks_its_min_isr() -> None:
    sim = started(seed=11)
    leader = coordinator_broker(sim)
    coordinator = sim.broker(leader).txn.coordinator
    error, pid, epoch = call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert error is ErrorCode.none
    for other in sim.broker_ids:
        if other != leader:
            sim.kill(other)
    error, _, _ = call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert error in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator)
    assert coordinator.txns.get(TXN_ID) is None or coordinator.txns[TXN_ID].producer_epoch == epoch  # the bump was not installed
