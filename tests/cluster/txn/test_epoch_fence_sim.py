"""Fencing an ongoing transaction (Kafka's PrepareEpochFence) on three simulated brokers.

Kafka never writes PrepareEpochFence: it is the transactional id's pending state while the
coordinator writes the fencing abort, a PrepareAbort record under the bumped epoch. These
tests kill the coordinator right after that record is written (the next coordinator loads it,
aborts the transaction, the old producer stays fenced and the new one initialises; nothing
hangs and read_committed reads none of the aborted records), and make the write fail (Kafka's
hasFailedEpochFence: the bump stays in memory, the old producer stays fenced, the retried
fence reuses the epoch)."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.broker.txn.metadata import TxnState
from cluster.protocol.codec import build
from cluster.protocol.records import Record, build_batch, read_records
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCluster
from cluster.storage.batch import ATTR_TRANSACTIONAL, split_batches
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, req
from tests.cluster.txn.test_coordinator_sim import TXN_ID, call, coordinator_broker, started

EVENTS = [TopicPartition("events", 0), TopicPartition("events", 1)]


def leader_of(sim: SimCluster, tp: TopicPartition) -> int:
    found: list[int] = []

    def led() -> bool:
        for broker in sim.running_brokers():
            partition = broker.partition(tp.topic, tp.partition)
            if partition is not None and partition.is_leader:
                found[:] = [broker.config.broker_id]
                return True
        return False

    sim.run_until(led, 30_000, what=f"a leader of {tp}")
    return found[0]


def produce_txn(sim: SimCluster, tp: TopicPartition, producer_id: int, producer_epoch: int, sequence: int, value: bytes) -> ErrorCode:
    data_cls = req(ApiKey.PRODUCE, 9, "PartitionProduceData")
    topic_cls = req(ApiKey.PRODUCE, 9, "TopicProduceData")
    batch = build_batch([Record(None, value)], base_offset=0, timestamp_ms=sim.clock.wall_ms(), attributes=ATTR_TRANSACTIONAL,
                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=sequence)
    pending = sim.send(leader_of(sim, tp), ApiKey.PRODUCE, 9, transactional_id=TXN_ID, acks=-1, timeout=datetime.timedelta(seconds=5),
                       topic_data=(topic_cls(name=tp.topic, partition_data=(data_cls(index=tp.partition, records=batch),)),))
    sim.run_until(lambda: pending.done, 30_000, step_ms=1, what="the produce answer")
    return produce_result(pending)[0]


def read_committed(sim: SimCluster, tp: TopicPartition) -> list[bytes]:
    """What a read_committed consumer returns from offset 0: Fetch with isolation level 1,
    then the client's filtering of the aborted transactions the answer lists."""
    part_cls = req(ApiKey.FETCH, 12, "FetchPartition")
    topic_cls = req(ApiKey.FETCH, 12, "FetchTopic")
    values: list[bytes] = []
    offset = 0
    while True:
        body = sim.call(leader_of(sim, tp), ApiKey.FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 24,
                        isolation_level=1, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                        topics=(build(topic_cls, topic=tp.topic, partitions=(build(
                            part_cls, partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=1 << 20),)),))
        answer = body.responses[0].partitions[0]
        assert answer.error_code is ErrorCode.none, answer.error_code
        if not answer.records:
            return values
        aborted = sorted(((int(a.producer_id), int(a.first_offset)) for a in answer.aborted_transactions), key=lambda a: a[1])
        skipping: set[int] = set()
        for header, batch in split_batches(answer.records):
            while aborted and aborted[0][1] <= header.base_offset:
                skipping.add(aborted.pop(0)[0])
            if header.is_control:
                skipping.discard(header.producer_id)  # the abort (or commit) marker ends what it closes
            elif not (header.is_transactional and header.producer_id in skipping):
                values += [r.value or b"" for r in read_records(bytes(batch))]
            offset = header.next_offset


def test_a_coordinator_killed_right_after_writing_the_fence_has_its_abort_finished_by_the_next() -> None:
    sim = started(seed=21)
    assert create_topic(sim, 0, "events", 2, 3).error_code is ErrorCode.none
    first = coordinator_broker(sim)
    coordinator = sim.broker(first).txn.coordinator
    error, pid, epoch = call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert (error, epoch) == (ErrorCode.none, 0)
    (error,) = call(sim, coordinator.add_partitions, TXN_ID, pid, epoch, EVENTS)
    assert error is ErrorCode.none
    for tp in EVENTS:
        assert produce_txn(sim, tp, pid, epoch, 0, f"aborted-{tp.partition}".encode()) is ErrorCode.none

    # A new instance of the producer: the coordinator fences the open transaction. The
    # moment the fencing abort is durable (its answer, CONCURRENT_TRANSACTIONS, is due) the
    # coordinator dies, before a single marker leaves it.
    answers: list[tuple[ErrorCode, int, int]] = []

    def fenced(*answer: object) -> None:
        answers.append(answer)  # type: ignore[arg-type]
        sim.kill(first)

    coordinator.init_producer_id(TXN_ID, 60_000, -1, -1, fenced)
    sim.run_until(lambda: bool(answers), 30_000, step_ms=1, what="the fence written")
    assert answers == [(ErrorCode.concurrent_transactions, -1, -1)]
    second = coordinator_broker(sim)
    assert second != first
    taken_over = sim.broker(second).txn.coordinator
    loaded = taken_over.txns[TXN_ID]
    # The log holds PrepareAbort under the bumped epoch (Kafka writes no PrepareEpochFence).
    assert (loaded.state, loaded.producer_id, loaded.producer_epoch, loaded.last_producer_epoch) == (TxnState.PREPARE_ABORT, pid, 1, -1)
    assert loaded.partitions == frozenset(EVENTS)
    sim.run_until(lambda: taken_over.txns[TXN_ID].state is TxnState.COMPLETE_ABORT, 30_000, what="the new coordinator's abort")

    # The old producer is fenced everywhere: by the coordinator and by the partitions, whose
    # abort markers carry the bumped epoch.
    (error,) = call(sim, taken_over.end_txn, TXN_ID, pid, 0, True)
    assert error is ErrorCode.producer_fenced
    (error,) = call(sim, taken_over.add_partitions, TXN_ID, pid, 0, [EVENTS[0]])
    assert error is ErrorCode.producer_fenced
    assert produce_txn(sim, EVENTS[0], pid, 0, 1, b"zombie") in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced)
    # The new instance retries InitProducerId and gets the next epoch; its transaction commits.
    error, new_pid, new_epoch = call(sim, taken_over.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert (error, new_pid, new_epoch) == (ErrorCode.none, pid, 2)
    (error,) = call(sim, taken_over.add_partitions, TXN_ID, pid, 2, [EVENTS[0]])
    assert error is ErrorCode.none
    assert produce_txn(sim, EVENTS[0], pid, 2, 0, b"committed") is ErrorCode.none
    (error,) = call(sim, taken_over.end_txn, TXN_ID, pid, 2, True)
    assert error is ErrorCode.none
    sim.run_until(lambda: taken_over.txns[TXN_ID].state is TxnState.COMPLETE_COMMIT, 30_000, what="the commit completed")

    # Nothing hangs: no partition has an open transaction and the LSO is the HWM.
    def settled() -> bool:
        for tp in EVENTS:
            partition = sim.broker(leader_of(sim, tp)).partition(tp.topic, tp.partition)
            assert partition is not None
            entry = partition.producers.entry(pid)
            if entry is None or entry.current_txn_first_offset >= 0 or partition.last_stable_offset != partition.high_watermark:
                return False
        return True

    sim.run_until(settled, 30_000, what="every transaction decided and replicated")
    assert read_committed(sim, EVENTS[0]) == [b"committed"]
    assert read_committed(sim, EVENTS[1]) == []


def test_a_failed_fence_keeps_the_bump_in_memory_and_the_retry_reuses_it() -> None:
    sim = started(seed=5)
    assert create_topic(sim, 0, "events", 2, 3).error_code is ErrorCode.none
    leader = coordinator_broker(sim)
    coordinator = sim.broker(leader).txn.coordinator
    error, pid, epoch = call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert error is ErrorCode.none
    (error,) = call(sim, coordinator.add_partitions, TXN_ID, pid, epoch, [EVENTS[0]])
    assert error is ErrorCode.none
    others = [b for b in sim.broker_ids if b != leader]
    for other in others:  # the fencing abort cannot reach the state partition's min ISR
        sim.kill(other)

    answers: list[tuple[ErrorCode, int, int]] = []
    coordinator.init_producer_id(TXN_ID, 60_000, -1, -1, lambda *answer: answers.append(answer))
    assert coordinator.pending_state(TXN_ID) is TxnState.PREPARE_EPOCH_FENCE and not answers
    # While the fence is written the old producer is already refused (Kafka bumps the epoch in
    # memory before the append); what it sees of the id is still Ongoing.
    (error,) = call(sim, coordinator.end_txn, TXN_ID, pid, epoch, True)
    assert error is ErrorCode.producer_fenced
    assert coordinator.txns[TXN_ID].state is TxnState.ONGOING
    sim.run_until(lambda: bool(answers), 30_000, step_ms=1, what="the fence's write failed")
    assert answers[0][0] in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator)
    failed = coordinator.txns[TXN_ID]
    assert (failed.state, failed.producer_epoch, failed.failed_epoch_fence) == (TxnState.ONGOING, 1, True)
    (error,) = call(sim, coordinator.add_partitions, TXN_ID, pid, epoch, [EVENTS[1]])
    assert error is ErrorCode.producer_fenced

    for other in others:
        sim.start_broker(other)
    # The retried InitProducerId fences again with the same epoch (1, not 2), then gets 2.
    retry: list[tuple[ErrorCode, int, int]] = []

    def fenced_again() -> bool:
        retry[:] = [call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)]
        return retry[0][0] is ErrorCode.concurrent_transactions

    sim.run_until(fenced_again, 60_000, step_ms=500, what="the fence written once the ISR is back")
    written = coordinator.txns[TXN_ID]
    assert (written.state, written.producer_epoch, written.failed_epoch_fence) in (
        (TxnState.PREPARE_ABORT, 1, False), (TxnState.COMPLETE_ABORT, 1, False))
    sim.run_until(lambda: coordinator.txns[TXN_ID].state is TxnState.COMPLETE_ABORT, 30_000, what="the abort completed")
    error, _, new_epoch = call(sim, coordinator.init_producer_id, TXN_ID, 60_000, -1, -1)
    assert (error, new_epoch) == (ErrorCode.none, 2)
