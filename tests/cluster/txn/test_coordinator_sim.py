"""The transaction coordinator on three simulated brokers: its transitions are replicated in
__transaction_state (RF 3, min ISR 2) before they are answered, and when its broker dies the
new leader of the state partition takes over the transactional ids with their producer ids,
epochs and states, prepared transactions included (it resends their markers).

The coordinator's APIs are called on the broker cores directly: they are not advertised
(hence not decodable from the network) until the log side serves WriteTxnMarkers."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.broker.topics import TRANSACTION_STATE_TOPIC
from cluster.broker.txn.metadata import TxnMetadata, TxnState
from cluster.broker.txn.state_log import partition_for_transactional_id
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic

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
    # The prepared commit binds the new coordinator too: its producer may not start another.
    (error,) = call(sim, taken_over.add_partitions, TXN_ID, pid, epoch, [TopicPartition("events", 0)])
    assert error is ErrorCode.concurrent_transactions


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
