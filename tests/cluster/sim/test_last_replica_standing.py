"""KIP-966's "last replica standing" on the simulator, with one crash: RF 3, min ISR 2,
acks=all, log.crash.lose.unflushed. A write is acknowledged by all three replicas and not
yet flushed by the leader; both followers stall (SIGSTOP) long enough to be fenced, so the
ISR shrinks to the leader; the leader crashes, losing its unflushed tail; the followers
resume. Without eligible leader replicas (eligible.leader.replicas.version=0, Kafka before
4.1) the crashed leader is still the ISR and is elected again with its truncated log, and
the followers truncate the acknowledged write away. With them (the default, as Kafka 4.1's
new clusters) the follower fenced below min ISR is an eligible leader, holds the write and
leads, and the crashed broker registers as after an unclean shutdown, outside every ISR and
ELR. Virtual time decides what was flushed, so the outcome is deterministic.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic, read_all
from tests.cluster.sim.test_sim_cluster import TOPIC, produce_acked, wait_isr, wait_leader

FLUSH_INTERVAL_MS = 10_000  # far beyond the scenario: the leader's last write stays unflushed
SESSION_TIMEOUT_MS = 1_000


def _one_crash_after_the_isr_shrank_to_the_leader(elr_version: str) -> tuple[list[bytes], list[bytes], tuple[int, ...]]:
    """(acknowledged values, values read back at the end, the ELR while the followers were fenced)."""
    sim = SimCluster(3, {"min.insync.replicas": "2", "log.crash.lose.unflushed": "true",
                         "log.flush.interval.ms": str(FLUSH_INTERVAL_MS), "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                         "broker.heartbeat.interval.ms": "250", "eligible.leader.replicas.version": elr_version}, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    assert create_topic(sim, 0, TOPIC, 1, 3).error_code == ErrorCode.none
    wait_isr(sim, 0, {0, 1, 2})
    acked = [f"v{i}".encode() for i in range(5)]
    for value in acked:
        produce_acked(sim, [value])
    leader = wait_leader(sim, 0)
    followers = [b for b in sim.broker_ids if b != leader]
    log = sim.broker(leader).partitions[TopicPartition(TOPIC, 0)].log
    sim.run_until(lambda: log.recovery_point == log.log_end_offset, 2 * FLUSH_INTERVAL_MS, step_ms=1,
                  what="the leader's flush of the first writes")
    produce_acked(sim, [b"tail"])  # acknowledged by all three replicas, unflushed on the leader
    acked.append(b"tail")
    assert log.recovery_point < log.log_end_offset

    def controller_state() -> tuple[tuple[int, ...], tuple[int, ...]]:
        image = sim.controller.image.topic(TOPIC)
        assert image is not None
        p = image.partitions[0]
        return p.isr, p.elr

    for b in followers:
        sim.pause(b)
    sim.run_until(lambda: controller_state()[0] == (leader,), 5 * SESSION_TIMEOUT_MS, what="the followers fenced, ISR [leader]")
    elr_while_alone = controller_state()[1]
    sim.kill(leader, lose_unflushed=True)  # the one crash: the lone ISR member loses its page cache
    for b in followers:
        sim.resume(b)
    sim.run_for(3 * SESSION_TIMEOUT_MS)
    sim.start_broker(leader)
    wait_isr(sim, followers[0], {0, 1, 2}, timeout_ms=60_000)
    read = [v for _, v in read_all(sim, wait_leader(sim, followers[0]), TOPIC)]
    return acked, read, elr_while_alone


def test_without_eligible_leader_replicas_one_crash_of_the_last_isr_member_loses_an_acknowledged_write() -> None:
    acked, read, elr = _one_crash_after_the_isr_shrank_to_the_leader("0")
    assert elr == ()
    assert read == acked[:-1], "the crashed lone ISR member led again and the followers truncated the acknowledged tail"


def test_with_eligible_leader_replicas_the_same_crash_loses_nothing() -> None:
    acked, read, elr = _one_crash_after_the_isr_shrank_to_the_leader("1")
    assert len(elr) == 1, "the follower fenced below min ISR is an eligible leader"
    assert read == acked
