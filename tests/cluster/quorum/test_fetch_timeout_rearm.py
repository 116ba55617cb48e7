"""A follower's fetch-timeout check that finds the leader silent for a hair (under a
nanosecond's worth of float) less than the timeout must still move simulated time on: before
the fix it re-armed itself at the same instant forever (a hunt's simulated run hung)."""

from cluster.quorum.raft import Role
from cluster.sim.quorum_harness import QuorumSim


def test_a_fetch_timeout_check_a_nanosecond_short_moves_time_on() -> None:
    sim = QuorumSim(3, 1, {"controller.quorum.fetch.timeout.ms": "1000"})
    sim.run_until(lambda: sim.leader() is not None, 20_000, what="a leader")
    follower = next(sim.node(n) for n in sim.node_ids if sim.node(n).role is Role.FOLLOWER)
    now_ns = sim.clock.monotonic_ns()
    # 999,999,999 ns of silence: 1000 - 999.999999 ms is 0.99999999 ns in floats.
    follower._last_leader_contact_ns = now_ns - 999_999_999
    follower._check_fetch_timeout()
    assert follower._timer is not None and follower._timer.deadline_ns > now_ns
