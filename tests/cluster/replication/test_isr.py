"""ISR maintenance by the leader: a follower that stops fetching leaves the ISR after
replica.lag.time.max.ms; one that catches up rejoins, but only from the start of the leader's
epoch (KAFKA-7128); ISR changes bump the partition epoch, not the leader epoch."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.cluster.replication.replica_fixture import SECOND_MS, Replica
from tests.cluster.replication.scenario import answer, followers, leader, produce, replica, start, wait_isr


def test_a_follower_that_stops_fetching_leaves_the_isr_and_rejoins_once_caught_up() -> None:
    sim = start(min_isr=1)
    lead = leader(sim)
    near, far = followers(sim, lead)
    before = replica(sim, lead).state
    assert before is not None
    sim.isolate([[lead], [far]])
    sim.run_for(1500)
    assert set(replica(sim, lead).isr) == {0, 1, 2}, "shrunk before replica.lag.time.max.ms"
    wait_isr(sim, {lead, near})
    for i in range(5):
        assert answer(sim, produce(sim, lead, f"v{i}".encode()))[0] == ErrorCode.none
    assert replica(sim, far).log_end_offset == 0
    sim.heal()
    wait_isr(sim, {0, 1, 2}, timeout_ms=40_000)
    assert replica(sim, far).log_end_offset == 5
    after = replica(sim, lead).state
    assert after is not None
    assert after.leader_epoch == before.leader_epoch, "an ISR change moved the leader epoch"
    assert after.partition_epoch >= before.partition_epoch + 2  # one shrink, one expansion


def test_a_follower_rejoins_only_once_it_reaches_the_start_of_the_leaders_epoch() -> None:
    leader_replica = Replica(broker_id=1)
    leader_replica.state(leader=1, leader_epoch=1, isr=(1, 2))
    leader_replica.append(5)
    p = leader_replica.partition
    p.on_follower_fetch(2, 3, broker_epoch=10, now_ms=1 * SECOND_MS)
    assert p.high_watermark == 3
    # Re-elected in epoch 2 with broker 3 (not heard from in this epoch) in the ISR and 2
    # out: the HWM stays at 3 while the epoch starts at the log end, 5.
    leader_replica.state(leader=1, leader_epoch=2, isr=(1, 3), now_ms=2 * SECOND_MS)
    assert (p.high_watermark, p.epoch_start_offset) == (3, 5)
    p.on_follower_fetch(2, 4, broker_epoch=10, now_ms=3 * SECOND_MS)
    assert p.followers[2].log_end_offset == 4
    assert p.expandable_followers(3 * SECOND_MS) == [], "a follower past the HWM but short of the epoch start was let in"
    p.on_follower_fetch(2, 5, broker_epoch=10, now_ms=4 * SECOND_MS)
    assert p.expandable_followers(4 * SECOND_MS) == [2]


def test_a_follower_long_out_of_touch_is_not_let_back_in() -> None:
    leader_replica = Replica(broker_id=1)
    leader_replica.state(leader=1, leader_epoch=1, isr=(1,))
    p = leader_replica.partition
    p.on_follower_fetch(2, 0, broker_epoch=10, now_ms=1 * SECOND_MS)
    leader_replica.append(3)
    assert p.expandable_followers(2 * SECOND_MS) == []  # behind the HWM (3)
    leader_replica.state(leader=1, leader_epoch=1, isr=(1,), now_ms=40 * SECOND_MS)
    # Its last fetch reached the HWM of the time, but that was replica.lag.time.max.ms ago.
    assert p.followers[2].log_end_offset == 0 and p.high_watermark == 3
    p.on_follower_fetch(2, 3, broker_epoch=10, now_ms=41 * SECOND_MS)
    assert p.expandable_followers(41 * SECOND_MS) == [2]
    assert p.expandable_followers(80 * SECOND_MS) == []


def test_lagging_followers_are_those_not_caught_up_within_the_lag_time() -> None:
    leader_replica = Replica(broker_id=1)
    leader_replica.state(leader=1, leader_epoch=1, isr=(1, 2, 3), now_ms=0)
    p = leader_replica.partition
    leader_replica.append(2)
    p.on_follower_fetch(2, 2, broker_epoch=10, now_ms=10 * SECOND_MS)  # at the log end: caught up now
    p.on_follower_fetch(3, 1, broker_epoch=11, now_ms=10 * SECOND_MS)  # behind the log end (2)
    assert p.lagging_followers(29 * SECOND_MS) == []
    assert p.lagging_followers(31 * SECOND_MS) == [3], "never caught up in this epoch, for longer than the lag time"
    leader_replica.append(1)
    # Behind the log end again (3), but at the log end of its previous fetch (2): caught up
    # as of that fetch, 10 s in, as Kafka counts it.
    p.on_follower_fetch(3, 2, broker_epoch=11, now_ms=32 * SECOND_MS)
    assert p.lagging_followers(32 * SECOND_MS) == []
    p.on_follower_fetch(2, 3, broker_epoch=10, now_ms=33 * SECOND_MS)
    assert p.lagging_followers(39 * SECOND_MS) == []
    assert p.lagging_followers(41 * SECOND_MS) == [3]
