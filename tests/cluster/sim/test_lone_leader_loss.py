"""The last replica standing loses its page cache (KIP-966's scenario, reference
kafka-reliability.md §1.4 S6), on the simulator so that whether a write was flushed before
the crash is decided by virtual time, not by a race with a real flush timer.

Both followers crash, the ISR shrinks to the leader, a write arrives, and the leader crashes
losing everything it had not fsynced (log.crash.lose.unflushed). With min.insync.replicas=1
the leader acknowledged that write and it is lost; with 2 it refused it, and nothing that was
acknowledged is lost.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic, produce_result, read_all, send_produce
from tests.cluster.sim.test_sim_cluster import TOPIC, produce_acked, wait_isr, wait_leader

FLUSH_INTERVAL_MS = 1_000


def _lone_leader_loses_its_page_cache(min_isr: str) -> tuple[list[bytes], list[bytes], ErrorCode]:
    """(acknowledged values, values read back at the end, the lone leader's answer)."""
    sim = SimCluster(3, {"min.insync.replicas": min_isr, "log.crash.lose.unflushed": "true",
                         "log.flush.interval.ms": str(FLUSH_INTERVAL_MS)}, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    assert create_topic(sim, 0, TOPIC, 1, 3).error_code == ErrorCode.none
    wait_isr(sim, 0, {0, 1, 2})
    acked = [f"before-{i}".encode() for i in range(10)]
    for value in acked:
        produce_acked(sim, [value])
    sim.run_for(3 * FLUSH_INTERVAL_MS)  # every replica has flushed what the full ISR acknowledged

    leader = wait_leader(sim, 0)
    followers = [b for b in sim.broker_ids if b != leader]
    for b in followers:
        sim.kill(b, lose_unflushed=True)
    wait_isr(sim, leader, {leader})

    # flush.ms counts from the last flush (as in Kafka): write once, wait until the leader has
    # flushed it, and write "lone" at once, so it is certainly unflushed FLUSH_INTERVAL_MS later.
    log = sim.broker(leader).partitions[TopicPartition(TOPIC, 0)].log
    warm = send_produce(sim, leader, TOPIC, 0, [b"warm"], acks=1)
    sim.run_until(lambda: warm.done, 5_000, step_ms=1, what="the warm-up write's answer")
    assert produce_result(warm)[0] == ErrorCode.none
    acked.append(b"warm")
    sim.run_until(lambda: log.recovery_point == log.log_end_offset, 5 * FLUSH_INTERVAL_MS, step_ms=1,
                  what="the leader's flush of the warm-up write")
    lone = send_produce(sim, leader, TOPIC, 0, [b"lone"], acks=-1)
    sim.run_until(lambda: lone.done, 5_000, step_ms=1, what="the lone leader's answer")
    error, _ = produce_result(lone)
    if error == ErrorCode.none:
        acked.append(b"lone")
    sim.run_for(50)  # far less than the flush interval
    sim.kill(leader, lose_unflushed=True)

    sim.start_broker(leader)
    for b in followers:
        sim.start_broker(b)
    wait_isr(sim, leader, {0, 1, 2}, timeout_ms=60_000)
    read = [v for _, v in read_all(sim, wait_leader(sim, leader), TOPIC)]
    return acked, read, error


def test_min_isr_1_loses_the_write_the_lone_leader_acknowledged_before_losing_its_page_cache() -> None:
    acked, read, error = _lone_leader_loses_its_page_cache("1")
    assert error == ErrorCode.none, "with min.insync.replicas=1 the lone leader takes the write"
    assert b"lone" not in read, "the acknowledged write survived a crash that lost every unflushed byte of its only copy"
    assert [v for v in acked if v != b"lone"] == read, "writes flushed before the crash must survive"


def test_min_isr_2_refuses_the_write_and_loses_nothing() -> None:
    acked, read, error = _lone_leader_loses_its_page_cache("2")
    assert error in (ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append), error
    assert read == acked
