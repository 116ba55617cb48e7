"""The unsafe switches that need a precise interleaving, shown deterministically in the
simulator: each reproduces the data loss it exists for, and the same schedule without the
switch loses nothing."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, read_all, send_produce
from tests.cluster.sim.test_sim_cluster import TOPIC, wait_isr, wait_leader

TP = TopicPartition(TOPIC, 0)


def started(**props: str) -> SimCluster:
    sim = SimCluster(3, {"min.insync.replicas": "1", **props}, seed=11)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers ready")
    assert create_topic(sim, 0, TOPIC, 1, 3).error_code == ErrorCode.none
    wait_isr(sim, 0, {0, 1, 2})
    return sim


def acked(sim: SimCluster, leader: int, value: bytes, acks: int = -1) -> None:
    call = send_produce(sim, leader, TOPIC, 0, [value], acks=acks)
    sim.run_until(lambda: call.done, 10_000, step_ms=0.05, what=f"the ack of {value!r}")
    assert produce_result(call)[0] == ErrorCode.none


def truncate_to_hwm_scenario(unsafe: bool) -> tuple[list[bytes], int]:
    """KIP-101's lesson in a KRaft cluster: a write is committed, the leader dies before its
    followers learn the new HWM, one follower becomes leader; the other starts following it
    and (with the switch) truncates to its stale HWM, throwing the committed record away;
    then the new leader dies before that follower fetched the record back. Returns what the
    last leader serves, and who it is."""
    sim = started(**({"replica.truncate.to.high.watermark": "true"} if unsafe else {}))
    a = wait_leader(sim, 0)
    acked(sim, a, b"m1")
    sim.run_for(500)  # every replica knows m1 is committed
    acked(sim, a, b"m2")
    sim.kill(a)  # at once: the followers' HWM still stops before m2
    others = [b for b in sim.broker_ids if b != a]
    assert all(sim.broker(b).partitions[TP].high_watermark == 1 for b in others), "the followers already knew m2 was committed"
    replicas = {x: sim.broker(x).partitions[TP] for x in others}

    def following() -> bool:
        # The moment one survivor leads and the other has started following it, before the
        # follower has fetched anything from its new leader.
        return any(p.is_leader for p in replicas.values()) and any(p.role == "follower" and p.leader_id in others for p in replicas.values())

    sim.run_until(following, 10_000, step_ms=0.01, what="a new leader and its follower")
    b = next(x for x, p in replicas.items() if p.is_leader)
    c = next(x for x in others if x != b)
    sim.kill(b)
    last = wait_leader(sim, c, not_=b, timeout_ms=30_000)
    return [v for _, v in read_all(sim, last, TOPIC)], last


def test_truncating_to_the_high_watermark_loses_a_committed_record() -> None:
    served, leader = truncate_to_hwm_scenario(unsafe=True)
    assert served == [b"m1"], f"broker {leader} serves {served}; m2 was acknowledged by acks=all and should be lost"


def test_epoch_based_truncation_keeps_it() -> None:
    served, leader = truncate_to_hwm_scenario(unsafe=False)
    assert served == [b"m1", b"m2"], f"broker {leader} serves {served}"


def read_past_hwm_scenario(unsafe: bool) -> tuple[list[bytes], list[bytes]]:
    """The followers stall, the leader takes an acks=1 write and dies; a follower is elected.
    Returns (what a consumer read from the old leader, what the new leader serves)."""
    sim = started(**({"fetch.read.past.high.watermark": "true"} if unsafe else {}))
    a = wait_leader(sim, 0)
    acked(sim, a, b"m1")
    sim.run_for(500)
    others = [b for b in sim.broker_ids if b != a]
    for b in others:
        sim.pause(b)
    acked(sim, a, b"uncommitted", acks=1)
    seen = [v for _, v in read_all(sim, a, TOPIC)]
    sim.kill(a)
    for b in others:
        sim.resume(b)
    new = wait_leader(sim, others[0], not_=a)
    return seen, [v for _, v in read_all(sim, new, TOPIC)]


def test_reading_past_the_high_watermark_shows_a_record_that_is_then_lost() -> None:
    seen, after = read_past_hwm_scenario(unsafe=True)
    assert b"uncommitted" in seen and b"uncommitted" not in after, (seen, after)


def test_consumers_read_only_committed_records_by_default() -> None:
    seen, after = read_past_hwm_scenario(unsafe=False)
    assert seen == [b"m1"] and after == [b"m1"], (seen, after)
