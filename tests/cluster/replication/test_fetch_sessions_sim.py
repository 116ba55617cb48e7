"""Followers replicate through incremental fetch sessions (KIP-227) on three simulated
brokers: idle followers stay in the ISR though their fetches skip the idle partitions, a
stopped follower still leaves it, a follower whose session the leader lost starts over with
a full fetch, and sessions follow a leader change."""

from __future__ import annotations

from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import read_all
from tests.cluster.sim.test_sim_cluster import TOPIC, produce_acked, started, wait_isr, wait_leader

LAG_MS = 2000  # replica.lag.time.max.ms in the simulator's defaults


def follower_sessions(sim: SimCluster, leader: int) -> dict[int, int]:
    """The leader's fetch sessions of followers: replica id -> session id."""
    return {s.replica_id: s.session_id for s in sim.broker(leader).fetch_sessions.sessions() if s.replica_id >= 0}


def test_idle_followers_fetching_in_sessions_stay_in_the_isr_and_a_stopped_one_leaves_it() -> None:
    sim = started()
    produce_acked(sim, [b"v0"])
    leader = wait_leader(sim, 0)
    followers = sorted(b for b in sim.broker_ids if b != leader)
    assert sorted(follower_sessions(sim, leader)) == followers
    before = {s.session_id: s.epoch for s in sim.broker(leader).fetch_sessions.sessions()}
    sim.run_for(3 * LAG_MS)
    partition = sim.broker(leader).partition(TOPIC, 0)
    assert set(partition.isr) == {0, 1, 2}, "an idle follower in a fetch session was shrunk out of the ISR"
    after = {s.session_id: s.epoch for s in sim.broker(leader).fetch_sessions.sessions()}
    assert all(after.get(sid, 0) > epoch + 10 for sid, epoch in before.items()), "the sessions' fetches did not go on"
    stopped = followers[0]
    sim.pause(stopped)
    wait_isr(sim, leader, {leader, followers[1]}, timeout_ms=3 * LAG_MS)
    sim.resume(stopped)
    wait_isr(sim, leader, {0, 1, 2})


def test_a_follower_whose_session_the_leader_lost_starts_over_with_a_full_fetch() -> None:
    sim = started()
    produce_acked(sim, [b"v0"])
    leader = wait_leader(sim, 0)
    old = follower_sessions(sim, leader)
    cache = sim.broker(leader).fetch_sessions
    for session in cache.sessions():
        cache.remove(session.session_id)
    for i in range(1, 6):
        produce_acked(sim, [f"v{i}".encode()])
    new = follower_sessions(sim, leader)
    assert sorted(new) == sorted(old) and not set(new.values()) & set(old.values())
    assert set(sim.broker(leader).partition(TOPIC, 0).isr) == {0, 1, 2}
    for follower in new:
        sim.run_until(lambda f=follower: sim.broker(f).partition(TOPIC, 0).log_end_offset == 6, 2_000, what="the follower caught up")


def test_sessions_follow_a_leader_change() -> None:
    sim = started()
    for i in range(5):
        produce_acked(sim, [f"v{i}".encode()])
    old = wait_leader(sim, 0)
    sim.kill(old)
    survivor = next(b for b in sim.broker_ids if b != old)
    new = wait_leader(sim, survivor, not_=old)
    for i in range(5, 10):
        produce_acked(sim, [f"v{i}".encode()])
    other = next(b for b in sim.broker_ids if b not in (old, new))
    assert other in follower_sessions(sim, new)
    sim.start_broker(old)
    wait_isr(sim, new, {0, 1, 2})
    assert old in follower_sessions(sim, new)
    for i in range(10, 15):
        produce_acked(sim, [f"v{i}".encode()])
    for broker in sim.broker_ids:
        sim.run_until(lambda b=broker: sim.broker(b).partition(TOPIC, 0).log_end_offset == 15, 2_000, what=f"broker {broker} caught up")
    assert [v for _, v in read_all(sim, new, TOPIC)] == [f"v{i}".encode() for i in range(15)]


def test_a_follower_out_of_step_with_its_session_epoch_closes_it_and_opens_a_new_one() -> None:
    sim = started()
    produce_acked(sim, [b"v0"])
    leader = wait_leader(sim, 0)
    cache = sim.broker(leader).fetch_sessions
    old = follower_sessions(sim, leader)
    for session in cache.sessions():
        session.epoch += 7  # as if requests had been lost: the next incremental fetch is refused
    for i in range(1, 4):
        produce_acked(sim, [f"v{i}".encode()])
    new = follower_sessions(sim, leader)
    assert sorted(new) == sorted(old) and not set(new.values()) & set(old.values())
    assert all(cache.get(sid) is None for sid in old.values()), "the out-of-step sessions were not closed by the full fetches"
    assert set(sim.broker(leader).partition(TOPIC, 0).isr) == {0, 1, 2}
