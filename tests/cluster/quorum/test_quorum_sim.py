"""A simulated quorum of 1, 3 and 5 real Raft nodes on the virtual network: elections,
replication, failover, restarts and faults, with the safety checks after every run."""

from __future__ import annotations

import pytest

from cluster.quorum.elections import majority
from cluster.sim.link_fault import LinkFault
from cluster.sim.quorum_harness import QuorumSim


def elect(sim: QuorumSim) -> int:
    sim.run_until(lambda: sim.leader() is not None, 20_000, what="a leader")
    leader = sim.leader()
    assert leader is not None
    return leader.node_id


def write(sim: QuorumSim, count: int, prefix: str = "v", gap_ms: float = 3) -> int:
    proposed = 0
    for i in range(count):
        proposed += sim.propose(f"{prefix}{i}".encode())
        sim.run_for(gap_ms)
    return proposed


def assert_safe(sim: QuorumSim) -> None:
    violations = sim.check()
    assert violations == [], "\n".join(map(str, violations))


@pytest.mark.parametrize("n", [1, 3, 5])
def test_a_leader_is_elected_and_appends_commit_on_every_node(n: int) -> None:
    sim = QuorumSim(n, seed=n)
    leader = elect(sim)
    assert write(sim, 20) == 20
    sim.run_for(1_000)
    assert len(sim.acknowledged) == 20
    states = [q.state for q in sim.running()]
    assert {s.leader_id for s in states} == {leader}
    assert {s.high_watermark for s in states} == {states[0].log_end_offset}
    # every node applied the same 20 records, in order
    for node_id in sim.node_ids:
        assert [v for _, _, v in sim.machine(node_id).values] == [f"v{i}".encode() for i in range(20)]
    assert sim.machine(leader).leader_epochs == [sim.node(leader).epoch]
    assert_safe(sim)


@pytest.mark.parametrize("n", [3, 5])
def test_killing_the_leader_elects_another_within_the_fetch_timeout_and_keeps_every_acknowledged_append(n: int) -> None:
    sim = QuorumSim(n, seed=10 + n)
    old = elect(sim)
    write(sim, 10)
    sim.run_for(200)
    epoch = sim.node(old).epoch
    sim.kill(old)
    took_ms = sim.run_until(lambda: sim.leader() is not None, 20_000, step_ms=1, what="a new leader")
    new = sim.leader()
    assert new is not None and new.node_id != old and new.epoch > epoch
    # followers notice after controller.quorum.fetch.timeout.ms (2000) without an answer,
    # then one pre-vote and one vote round
    assert took_ms <= 2_000 + 1_000
    write(sim, 10, prefix="w")
    sim.start(old)
    sim.run_for(2_000)
    assert sim.node(old).state.leader_id == new.node_id
    assert sim.node(old).high_watermark == new.high_watermark
    assert len(sim.acknowledged) == 20
    assert_safe(sim)


def test_a_graceful_leader_shutdown_hands_over_without_waiting_for_the_fetch_timeout() -> None:
    sim = QuorumSim(3, seed=4)
    old = elect(sim)
    write(sim, 5)
    sim.run_for(100)
    sim.stop(old)
    took_ms = sim.run_until(lambda: sim.leader() is not None, 10_000, step_ms=1, what="a new leader")
    assert took_ms < 500  # EndQuorumEpoch: the first preferred successor stands at once
    assert_safe(sim)


def test_a_minority_partition_cannot_elect_and_the_isolated_leader_resigns() -> None:
    sim = QuorumSim(5, seed=7)
    old = elect(sim)
    others = [n for n in sim.node_ids if n != old]
    minority, majority_side = [old, others[0]], others[1:]
    sim.isolate([minority, majority_side])
    sim.run_for(6_000)
    assert not sim.node(old).is_leader  # check-quorum: no fetches from a majority
    leaders = sim.leaders()
    assert len(leaders) == 1 and leaders[0] in majority_side
    # pre-vote: the minority never bumped its epoch while it could not win
    assert sim.node(others[0]).epoch <= sim.node(leaders[0]).epoch
    write(sim, 5)
    sim.heal()
    sim.run_for(3_000)
    assert {q.state.leader_id for q in sim.running()} == {leaders[0]}
    assert len({q.high_watermark for q in sim.running()}) == 1
    assert_safe(sim)


def test_a_node_cut_off_alone_does_not_raise_the_epoch_thanks_to_pre_vote() -> None:
    sim = QuorumSim(3, seed=8)
    leader = elect(sim)
    epoch = sim.node(leader).epoch
    lonely = next(n for n in sim.node_ids if n != leader)
    sim.isolate([[lonely], [n for n in sim.node_ids if n != lonely]])
    sim.run_for(10_000)
    assert sim.node(lonely).epoch == epoch  # it pre-voted, lost, and never became a candidate
    sim.heal()
    sim.run_for(3_000)
    assert sim.leader() is not None and sim.leader().node_id == leader and sim.node(leader).epoch == epoch
    assert_safe(sim)


def test_link_loss_delay_and_duplication_keep_the_quorum_safe_and_live() -> None:
    sim = QuorumSim(3, seed=9)
    elect(sim)
    for node_id in sim.node_ids:
        sim.set_node_fault(node_id, LinkFault(delay_ms=5, jitter_ms=20, loss=0.05, duplicate=0.2, reorder=0.1))
    write(sim, 40, gap_ms=20)
    sim.clear_link_faults()
    sim.run_for(3_000)
    assert sim.leader() is not None
    assert len(sim.acknowledged) >= 30
    assert_safe(sim)


def test_a_paused_leader_is_replaced_and_follows_after_it_resumes() -> None:
    sim = QuorumSim(3, seed=12)
    old = elect(sim)
    sim.pause(old)
    sim.run_for(4_000)
    leaders = [q for q in sim.running() if q.is_leader and q.node_id != old]
    assert len(leaders) == 1
    sim.resume(old)
    sim.run_for(2_000)
    assert sim.node(old).state.leader_id == leaders[0].node_id
    assert_safe(sim)


def test_a_restart_that_loses_unflushed_bytes_keeps_votes_and_commits() -> None:
    # every append and vote is fsynced before it counts, so power loss changes nothing
    sim = QuorumSim(3, seed=13)
    leader = elect(sim)
    write(sim, 10)
    sim.run_for(100)
    for node_id in sim.node_ids:
        sim.restart(node_id, lose_unflushed=True)
    sim.run_until(lambda: sim.leader() is not None, 20_000, what="a leader after a full power loss")
    sim.run_for(500)
    for node_id in sim.node_ids:
        assert [v for _, _, v in sim.machine(node_id).values] == [f"v{i}".encode() for i in range(10)]
    assert len(sim.acknowledged) == 10
    assert_safe(sim)


def test_majority_counts() -> None:
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
