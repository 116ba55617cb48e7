"""An ISR expansion whose answer is lost must not shrink the leader's view of the ISR.

Found by a safe-cluster run (kill,partition, seed 2021, under load): a leader proposed ISR
[0, 1], the controller applied it, the answer never came (the leader was being cut off), and
the leader went back to ISR [0] and acknowledged acks=all writes alone; the controller then
elected broker 1 from ISR [0, 1], and those writes were gone (lost-write). Kafka keeps the
maximal ISR while a proposal's fate is unknown and sends it again
(Partition.handleAlterPartitionError, AlterPartitionManager). Driven step by step on the
simulator, so the lost answer and every cut happen at chosen virtual times.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, read_all, send_produce
from tests.cluster.sim.test_sim_cluster import TOPIC, wait_isr, wait_leader

TP = TopicPartition(TOPIC, 0)


def cut(sim: SimCluster, a: int | str, b: int | str) -> None:
    sim.block(a, b)
    sim.block(b, a)


def produce(sim: SimCluster, broker: int, value: bytes) -> ErrorCode:
    call = send_produce(sim, broker, TOPIC, 0, [value], acks=-1, timeout_ms=3000)
    sim.run_until(lambda: call.done, 10_000, step_ms=1, what=f"broker {broker}'s answer to {value!r}")
    if call.result is None or not call.result.ok:
        return ErrorCode.request_timed_out  # no answer: not acknowledged
    return produce_result(call)[0]


def test_a_leader_whose_isr_expansion_went_unanswered_acknowledges_nothing_the_new_isr_lacks() -> None:
    sim = SimCluster(3, {"min.insync.replicas": "1"}, seed=11)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    assert create_topic(sim, 0, TOPIC, 1, 2).error_code == ErrorCode.none
    leader = wait_leader(sim, 0)
    info = partition_info(sim, leader, TOPIC)
    assert info is not None
    follower = next(b for b in info.replicas if b != leader)
    observer = next(b for b in sim.broker_ids if b not in info.replicas)  # learns the ISR from the controller
    wait_isr(sim, observer, {leader, follower})
    acked: list[bytes] = []

    # 1. The follower falls out of the ISR (cut from its leader past replica.lag.time.max.ms).
    cut(sim, leader, follower)
    wait_isr(sim, observer, {leader})
    for i in range(3):
        assert produce(sim, leader, f"alone-{i}".encode()) == ErrorCode.none  # min ISR 1: documented
        acked.append(f"alone-{i}".encode())

    # 2. The controller's answers to the leader are lost from now on; the follower catches up,
    #    the leader proposes ISR [leader, follower], the controller applies it, no answer comes.
    sim.heal()
    sim.block("controller", leader)
    wait_isr(sim, observer, {leader, follower})
    sim.run_for(2_000)  # the proposal's request times out at the leader (and is sent again)
    partition = sim.broker(leader).partitions[TP]
    assert follower in partition.maximal_isr, "the unanswered expansion must stay in the leader's maximal ISR"

    # 3. The follower is cut off again. An acks=all write to the leader now needs the
    #    follower, which the controller counts in the ISR it elects from.
    cut(sim, leader, follower)
    risky = produce(sim, leader, b"risky")
    if risky == ErrorCode.none:
        acked.append(b"risky")

    # 4. The leader loses the controller: fenced, and the follower (in the committed ISR) leads.
    cut(sim, leader, "controller")
    new_leader = wait_leader(sim, observer, not_=leader)
    assert new_leader == follower
    sim.heal()
    wait_isr(sim, observer, {leader, follower}, timeout_ms=60_000)
    read = [v for _, v in read_all(sim, wait_leader(sim, observer), TOPIC)]
    missing = [v for v in acked if v not in read]
    assert not missing, f"acknowledged acks=all writes lost after a clean election: {missing} (leader answered {risky.name})"
