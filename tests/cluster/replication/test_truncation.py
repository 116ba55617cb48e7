"""Followers whose logs diverged from the leader's: the leader names the last epoch they share
(the diverging epoch, from its leader-epoch cache) and the follower truncates and fetches
again, stepping back an epoch at a time until the logs agree (KIP-101, KIP-279, KIP-320)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import Partition
from cluster.sim.cluster import SimCluster
from tests.cluster.replication.replica_fixture import Replica
from tests.cluster.replication.scenario import TOPIC, answer, followers, leader, leads, log_entries, produce, replica, start
from tests.cluster.sim.sim_requests import read_all


def epochs_of(p: Partition) -> list[int]:
    return sorted({epoch for _, _, epoch in log_entries(p)})


def write(sim: SimCluster, broker_id: int, *values: bytes) -> None:
    for value in values:
        assert answer(sim, produce(sim, broker_id, value, acks=1))[0] == ErrorCode.none


def test_a_follower_diverged_over_several_epochs_converges_on_the_leaders_log() -> None:
    """Two replicas each led an epoch the other never saw (L in epoch a, F in epoch b > a),
    then L leads again. F's last epoch b is unknown to L, which answers with a, and F does
    not have a either: F must step back to the end of the epoch before a, then copy L."""
    sim = start(min_isr=1, **{"unclean.leader.election.enable": "true", "replica.socket.timeout.ms": "1000"})
    first = leader(sim)
    assert answer(sim, produce(sim, first, b"base-0"))[0] == ErrorCode.none
    assert answer(sim, produce(sim, first, b"base-1"))[0] == ErrorCode.none
    sim.run_for(500)
    sim.kill(first)
    lead = leader(sim)
    (other,) = [b for b in followers(sim, lead) if b != first]
    sim.isolate([[lead], [other]])
    write(sim, lead, b"L-epoch-a")  # only on lead
    sim.kill(lead)
    sim.heal()
    sim.run_until(lambda: leads(sim, other), 20_000, what="the other follower leading")
    write(sim, other, b"F-epoch-b-0", b"F-epoch-b-1", b"F-epoch-b-2")
    sim.kill(other)
    sim.start_broker(lead)  # out of the ISR: only an unclean election brings it back as leader
    sim.run_until(lambda: leads(sim, lead), 30_000, what="the unclean election of the first diverged replica")
    write(sim, lead, b"L-epoch-c-0", b"L-epoch-c-1", b"L-epoch-c-2")
    lead_epochs = epochs_of(replica(sim, lead))
    sim.isolate([[lead], [other]])  # hold the follower off until we have seen its log
    sim.start_broker(other)
    sim.run_until(lambda: sim.broker(other).partition(TOPIC, 0) is not None, 10_000, what="the follower opening its replica")
    follower_epochs = epochs_of(replica(sim, other))
    # The setup worked: each side has an epoch the other never had, after the shared ones.
    assert follower_epochs[-1] not in lead_epochs and lead_epochs[-2] not in follower_epochs, (follower_epochs, lead_epochs)
    assert follower_epochs[-1] > lead_epochs[-2]
    sim.heal()
    sim.run_until(lambda: log_entries(replica(sim, other)) == log_entries(replica(sim, lead)), 20_000,
                  what="the follower's log matching the leader's batch for batch")
    values = [v for _, v in read_all(sim, lead, TOPIC)]
    assert values == [b"base-0", b"base-1", b"L-epoch-a", b"L-epoch-c-0", b"L-epoch-c-1", b"L-epoch-c-2"], values
    assert replica(sim, other).log.epochs.latest_epoch == replica(sim, lead).log.epochs.latest_epoch


def epoch_history(*runs: tuple[int, int]) -> Partition:
    """A leader's replica whose log holds `count` batches in `epoch` for each (epoch, count)."""
    r = Replica(broker_id=1)
    for epoch, count in runs:
        r.state(leader=1, leader_epoch=epoch, isr=(1,))
        r.append(count)
    return r.partition


def test_the_leader_names_the_last_epoch_a_follower_shares_with_it() -> None:
    p = epoch_history((0, 3), (2, 2), (4, 2))  # epoch 0: [0, 3), 2: [3, 5), 4: [5, 7)
    assert p.diverging_epoch(fetch_offset=7, last_fetched_epoch=4) is None  # in step
    assert p.diverging_epoch(fetch_offset=4, last_fetched_epoch=2) is None  # behind, on our log
    assert p.diverging_epoch(fetch_offset=6, last_fetched_epoch=2) == (2, 5)  # wrote past our end of epoch 2
    assert p.diverging_epoch(fetch_offset=6, last_fetched_epoch=3) == (2, 5)  # an epoch we never had
    assert p.diverging_epoch(fetch_offset=9, last_fetched_epoch=7) == (4, 7)  # newer than any of ours
    assert p.diverging_epoch(fetch_offset=3, last_fetched_epoch=-1) is None  # no epoch given: nothing to compare
