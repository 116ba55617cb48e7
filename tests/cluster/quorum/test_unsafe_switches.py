"""Each unsafe switch, in a seeded scenario on a simulated quorum of 3, loses committed
records, and the checks flag it; the safe default survives the very same schedule."""

from __future__ import annotations

import pytest

from cluster.quorum.raft import Role
from cluster.sim.link_fault import LinkFault
from cluster.sim.quorum_harness import QuorumSim

SKIP_LOG_CHECK = "controller.quorum.vote.skip.log.check"
BY_COUNT = "controller.quorum.commit.previous.epoch.by.count"


def kinds(sim: QuorumSim) -> set[str]:
    return {v.kind for v in sim.check()}


def stale_node_elected(unsafe: bool, seed: int) -> QuorumSim:
    """A lagging node asks for votes while the one up-to-date survivor has just lost its
    leader: granting without the log check lets the lagging node win and truncate
    committed records on the survivor."""
    # Node 1 stands first and leads; node 2 (the survivor) retries its own elections
    # quickly, each round shorter than its messages' way to node 3 below, so it cannot win
    # while that link is slow; node 3 (lagging) keeps KRaft's default timeouts.
    fast = {"controller.quorum.election.timeout.ms": "50", "controller.quorum.election.backoff.max.ms": "100"}
    sim = QuorumSim(3, seed, {SKIP_LOG_CHECK: str(unsafe).lower()},
                    node_properties={1: {"controller.quorum.election.timeout.ms": "10"}, 2: fast})
    sim.run_until(lambda: sim.leader() is not None, 20_000, what="a leader")
    old = sim.leader()
    assert old is not None and old.node_id == 1
    survivor, lagging = 2, 3
    sim.isolate([[lagging], [old.node_id, survivor]])
    for i in range(10):
        assert sim.propose(f"v{i}".encode())
        sim.run_for(2)
    sim.run_for(200)
    assert len(sim.acknowledged) == 10  # committed on the old leader and the survivor
    sim.kill(old.node_id)
    sim.heal()
    # What the survivor sends reaches the lagging node 500 ms late: the survivor's own
    # elections time out before an answer can come back, while the lagging node's rounds
    # (1-2 s) outlast the delay, so once the survivor stops following the dead leader (its
    # fetch timeout) only the lagging node can collect a majority, and only if the survivor
    # grants it.
    sim.set_link_fault(survivor, lagging, LinkFault(delay_ms=500))
    sim.run_for(5_000)
    sim.clear_link_faults()
    sim.run_for(5_000)
    return sim


@pytest.mark.parametrize("seed", [1, 2])
def test_votes_without_the_log_check_elect_a_stale_node_that_erases_committed_records(seed: int) -> None:
    sim = stale_node_elected(unsafe=True, seed=seed)
    found = kinds(sim)
    assert {"committed-lost", "acknowledged-lost", "committed-disagree"} <= found, sim.check()


@pytest.mark.parametrize("seed", [1, 2])
def test_the_log_check_keeps_the_same_schedule_safe(seed: int) -> None:
    sim = stale_node_elected(unsafe=False, seed=seed)
    assert sim.check() == []
    assert sim.leader() is not None
    assert len(sim.acknowledged) == 10


def figure_8(unsafe: bool, seed: int) -> QuorumSim:
    """Raft's Figure 8 on KRaft's log: a leader re-elected after an election it missed
    replicates its old-epoch record to a majority. Counting replicas commits it; the
    leader then dies before its new-epoch record spreads, and a node holding a newer
    epoch's record at that offset wins and overwrites it."""
    sim = QuorumSim(3, seed, {BY_COUNT: str(unsafe).lower(), "controller.quorum.fetch.max.bytes": "1"})
    sim.run_until(lambda: sim.leader() is not None, 20_000, what="a leader")
    a = sim.leader()
    assert a is not None
    for i in range(5):
        sim.propose(f"v{i}".encode())
        sim.run_for(2)
    sim.run_for(300)
    k = a.log.end_offset
    others = [n for n in sim.node_ids if n != a.node_id]
    # 1. The leader is cut off and appends X, which only it holds.
    sim.isolate([[a.node_id], others])
    assert sim.propose(b"X")
    sim.run_for(1)
    assert a.log.end_offset == k + 1
    # 2. The others elect a leader B, whose LeaderChange at offset k is cut off at once.
    sim.run_until(lambda: any(sim.node(n).role is Role.LEADER for n in others), 20_000, step_ms=0.05, what="a second leader")
    b = next(n for n in others if sim.node(n).role is Role.LEADER)
    c = next(n for n in others if n != b)
    sim.isolate([[a.node_id], [b], [c]])
    assert sim.node(b).log.end_offset == k + 1 and sim.node(c).log.end_offset == k
    # 3. A and C meet again: A wins a later epoch and C fetches X, one batch per fetch;
    #    the moment A hears that C holds X, A is cut off (before C gets A's new record).
    sim.isolate([[b], [a.node_id, c]])
    sim.run_until(lambda: a.role is Role.LEADER and a.epoch > sim.node(b).epoch and a._progress[c].end_offset >= k + 1, 30_000,
                  step_ms=0.05, what="the old leader re-elected with X on C")
    sim.isolate([[a.node_id], [b, c]])
    sim.kill(a.node_id)
    # 4. B (its last record is of a newer epoch than C's X) wins and C truncates X.
    sim.run_for(10_000)
    return sim


def test_committing_an_earlier_epoch_by_counting_replicas_loses_a_committed_record() -> None:
    sim = figure_8(unsafe=True, seed=3)
    found = kinds(sim)
    assert {"committed-lost", "committed-disagree"} <= found, sim.check()


def test_the_current_epoch_rule_keeps_the_same_schedule_safe() -> None:
    sim = figure_8(unsafe=False, seed=3)
    assert sim.check() == []
    assert sim.leader() is not None
