"""The group coordinator follows leadership of `__consumer_offsets` partitions: three real
broker cores and the real controller on a virtual network (SimCluster), clients speaking
real frames. A group's committed offsets and generation survive the loss of its
coordinator's broker, FindCoordinator moves to the new leader, the old coordinator refuses
the group once it is a follower, and a commit is acknowledged only once the ISR has it."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.cluster.coordinator.group_requests import (
    Membership,
    answer,
    commit,
    commit_error,
    describe_error,
    fetch_committed,
    heartbeat,
    join_and_sync,
    send_commit,
    send_join,
    started_cluster,
    wait_coordinator,
)


def test_committed_offsets_and_generation_survive_the_coordinators_broker() -> None:
    sim = started_cluster()
    old = wait_coordinator(sim, 0)
    member = join_and_sync(sim, old)
    assert commit(sim, old, member, 42) is ErrorCode.none
    sim.kill(old)
    survivor = next(b for b in sim.broker_ids if b != old)
    new = wait_coordinator(sim, survivor, not_=old)
    assert fetch_committed(sim, new) == (ErrorCode.none, 42)
    # The member is carried over with its generation, as Kafka's coordinator loads the group
    # record: it keeps heartbeating and committing without a rebalance, and a stranger is unknown.
    assert heartbeat(sim, new, member) is ErrorCode.none
    assert commit(sim, new, member, 43) is ErrorCode.none
    assert commit(sim, new, Membership("stranger", member.generation), 44) is ErrorCode.unknown_member_id
    assert fetch_committed(sim, new) == (ErrorCode.none, 43)


def test_the_old_coordinator_refuses_the_group_after_it_restarts_as_a_follower() -> None:
    sim = started_cluster()
    old = wait_coordinator(sim, 0)
    member = join_and_sync(sim, old)
    assert commit(sim, old, member, 7) is ErrorCode.none
    sim.kill(old)
    survivor = next(b for b in sim.broker_ids if b != old)
    new = wait_coordinator(sim, survivor, not_=old)
    sim.start_broker(old)
    sim.run_until(lambda: sim.broker(old).ready, 10_000, what="the old coordinator back")
    # Every broker, the restarted one included, names the new coordinator.
    assert wait_coordinator(sim, old) == new
    assert answer(sim, send_join(sim, old), "JoinGroup at the old coordinator").error_code is ErrorCode.not_coordinator
    assert fetch_committed(sim, old) == (ErrorCode.not_coordinator, -1)
    assert describe_error(sim, old) is ErrorCode.not_coordinator
    assert describe_error(sim, new) is ErrorCode.none
    assert fetch_committed(sim, new) == (ErrorCode.none, 7)


def test_a_commit_is_answered_only_once_the_followers_have_it() -> None:
    sim = started_cluster()
    coordinator = wait_coordinator(sim, 0)
    member = join_and_sync(sim, coordinator)
    followers = [b for b in sim.broker_ids if b != coordinator]
    for b in followers:
        sim.pause(b)
    pending = send_commit(sim, coordinator, member, 99)
    sim.run_for(300)  # well inside replica.lag.time.max.ms and the session timeout
    assert not pending.done, "acknowledged before any follower could have the record"
    # (An OffsetFetch now would queue behind the commit on the client's connection.)
    assert sim.broker(coordinator).groups.committed("g") == {}, "visible before it is committed"
    for b in followers:
        sim.resume(b)
    answer(sim, pending, "the commit after the followers resumed")
    assert commit_error(pending) is ErrorCode.none
    assert fetch_committed(sim, coordinator) == (ErrorCode.none, 99)


def test_a_commit_the_isr_cannot_take_fails_with_a_retriable_coordinator_error() -> None:
    sim = started_cluster()
    coordinator = wait_coordinator(sim, 0)
    member = join_and_sync(sim, coordinator)
    followers = [b for b in sim.broker_ids if b != coordinator]
    sim.isolate([followers, [coordinator, "controller", "client"]])
    # Timed out waiting for the ISR, or refused once the ISR shrank below
    # min.insync.replicas: either way Kafka's coordinator answers COORDINATOR_NOT_AVAILABLE,
    # so the client looks the coordinator up again and retries.
    assert commit(sim, coordinator, member, 5) is ErrorCode.coordinator_not_available
    assert fetch_committed(sim, coordinator) == (ErrorCode.none, -1)
