"""Clock faults have Kafka's effects: the leader measures replica lag on its wall clock
(Kafka's Partition uses time.milliseconds()), so a wall clock that jumps forward makes caught-up
followers look lagging, and one that jumps back keeps a dead follower in the ISR longer.

Runs the real broker and controller cores in the simulator, where each broker's wall clock can
be skewed alone (as libfaketime skews one broker process) while time itself runs on.
"""

from __future__ import annotations

from cluster.broker.partition import TopicPartition
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.test_sim_cluster import TOPIC, started, wait_isr, wait_leader

HOUR_MS = 3_600_000
LAG_MS = 2_000  # replica.lag.time.max.ms in the simulator (SIM_DEFAULTS)


def _leader_isr_sizes(sim: SimCluster, leader: int, duration_ms: int, *, jump_every_ms: int = 0) -> list[int]:
    """The leader's own ISR size every simulated ms for `duration_ms` (a shrink and the
    expansion after it can be a few ms apart); with `jump_every_ms`, its wall clock steps an
    hour forward that often (a strobe that only ever moves ahead)."""
    partition = sim.broker(leader).partitions[TopicPartition(TOPIC, 0)]
    sizes = []
    skew_ms = 0
    for elapsed_ms in range(duration_ms):
        if jump_every_ms and elapsed_ms and elapsed_ms % jump_every_ms == 0:
            skew_ms += HOUR_MS
            sim.skew_clock(leader, skew_ms)
        sim.run_for(1)
        sizes.append(len(partition.isr))
    return sizes


def test_caught_up_followers_stay_in_sync_while_the_clocks_agree() -> None:
    sim = started(seed=5)
    leader = wait_leader(sim, 0)
    assert min(_leader_isr_sizes(sim, leader, 5_000)) == 3


def test_a_leader_whose_wall_clock_jumps_forward_drops_caught_up_followers_and_takes_them_back() -> None:
    sim = started(seed=5)
    leader = wait_leader(sim, 0)
    # Whether a jump finds a follower lagging depends on where it falls between the leader's
    # ISR checks and the follower's next fetch, as in Kafka: many jumps, unevenly spaced.
    sizes = _leader_isr_sizes(sim, leader, 10_000, jump_every_ms=237)
    assert min(sizes) < 3, "no forward jump of the leader's wall clock shrank the ISR of followers that kept fetching"
    # The followers never stopped fetching: with the clock left alone they rejoin.
    wait_isr(sim, leader, {0, 1, 2}, timeout_ms=10_000)


def test_a_leader_whose_wall_clock_steps_back_keeps_a_cut_off_follower_in_the_isr() -> None:
    sim = started(seed=5)
    leader = wait_leader(sim, 0)
    follower = next(b for b in sim.broker_ids if b != leader)
    partition = sim.broker(leader).partitions[TopicPartition(TOPIC, 0)]

    sim.skew_clock(leader, -HOUR_MS)
    sim.run_for(500)  # the other follower fetches under the stepped-back clock
    # Cut the follower off from the leader only: it keeps heartbeating to the controller, so
    # it is not fenced (fencing would take it out of the ISR whatever the clocks say).
    sim.block(follower, leader)
    sim.block(leader, follower)
    sim.run_for(5 * LAG_MS)
    assert follower in partition.isr, ("a follower cut off for 5× replica.lag.time.max.ms left the ISR although the "
                                       "leader's wall clock stepped back an hour (Kafka measures the lag on the wall clock)")

    sim.skew_clock(leader, 0)  # the clock is corrected: the follower's caught-up time is an hour behind now
    wait_isr(sim, leader, set(sim.broker_ids) - {follower}, timeout_ms=2 * LAG_MS)


def test_without_the_clock_step_a_cut_off_follower_leaves_the_isr_after_the_lag_time() -> None:
    sim = started(seed=5)
    leader = wait_leader(sim, 0)
    follower = next(b for b in sim.broker_ids if b != leader)
    sim.block(follower, leader)
    sim.block(leader, follower)
    wait_isr(sim, leader, set(sim.broker_ids) - {follower}, timeout_ms=2 * LAG_MS)
