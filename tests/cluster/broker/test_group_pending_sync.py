"""A generation's SyncGroup phase as Kafka's classic coordinator runs it: a member parked in
SyncGroup satisfies its heartbeats (ClassicGroupMember.hasSatisfiedHeartbeat), and members
that have not sent SyncGroup when the rebalance timeout passes are removed and the group
rebalances (GroupMetadataManager.expirePendingSync).

Found tracing a simulated eos run (tests/harness/test_eos_safe_replay.py, seed 1 of the
full form, before its client fix): the new generation's leader was a member whose process
was gone; the four live followers parked in SyncGroup were expired by their sessions 6 s
later, where Kafka keeps them and removes only the leader, so they had to join again as new
members."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.cluster.broker.test_groups import SESSION_MS, group_driver, heartbeat, join, sync

REBALANCE_MS = 10_000  # the tests' JoinGroup rebalance timeout (test_groups.send_join)


def _generation_of_two(driver):  # type: ignore[no-untyped-def]
    """Leader a and follower b in generation 2, neither synced yet."""
    first = join(driver)
    a = first.body.member_id
    sync(driver, a, 1, {a: b"all"})
    second = join(driver)
    rejoin = join(driver, a)
    assert rejoin.done and second.done and rejoin.body.leader == a
    return a, second.body.member_id, rejoin.body.generation_id


def test_a_follower_parked_in_sync_outlives_its_session_and_gets_its_assignment() -> None:
    driver = group_driver()
    a, b, generation = _generation_of_two(driver)
    parked = sync(driver, b, generation)
    assert not parked.done
    # The leader takes longer than a session timeout to assign, heartbeating meanwhile.
    for _ in range(3):
        driver.scheduler.advance(SESSION_MS / 2)
        assert heartbeat(driver, a, generation) is ErrorCode.none
    assert not parked.done and b in driver.broker.groups.groups["g"].members
    leader = sync(driver, a, generation, {a: b"p0", b: b"p1"})
    assert leader.body.assignment == b"p0" and parked.body.assignment == b"p1"
    assert heartbeat(driver, b, generation) is ErrorCode.none


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    driver = group_driver()
    a, b, generation = _generation_of_two(driver)
    parked = sync(driver, b, generation)
    # The leader heartbeats (so its session does not end it) but never sends SyncGroup.
    for _ in range(3):
        driver.scheduler.advance(REBALANCE_MS / 4)
        assert heartbeat(driver, a, generation) is ErrorCode.none
        assert not parked.done  # past b's session (6 s): parked, it is alive
    driver.scheduler.advance(REBALANCE_MS / 4 + 1)
    group = driver.broker.groups.groups["g"]
    assert a not in group.members and b in group.members
    assert parked.done and parked.body.error_code is ErrorCode.rebalance_in_progress
    assert heartbeat(driver, a, generation) is ErrorCode.unknown_member_id
    again = join(driver, b)
    assert again.done and again.body.generation_id == generation + 1 and again.body.leader == b
    assert sync(driver, b, generation + 1, {b: b"all"}).body.assignment == b"all"
