"""The classic group protocol through the sans-I/O core, with virtual time: joins,
generations, sync, heartbeats, session expiry, leave, commit fencing, and offsets that
survive a restart by replaying __consumer_offsets."""

from __future__ import annotations

import datetime
import struct

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver, Pending
from tests.cluster.broker.requests import create_topic

SESSION_MS = 6000
GROUPS = ("g", "h", "v3", "standalone", "never-seen")


def group_driver(properties: dict[str, str] | None = None) -> CoreDriver:
    """A broker that coordinates every group these tests use (after FindCoordinator has
    created __consumer_offsets and the broker has loaded its partitions)."""
    driver = CoreDriver(properties)
    driver.await_coordinator(*GROUPS)
    return driver


def send_join(driver: CoreDriver, member_id: str = "", group: str = "g", protocols=(("range", b"meta"),), version: int = 5) -> Pending:
    protocol_cls = driver.request_class(ApiKey.JOIN_GROUP, version, "JoinGroupRequestProtocol")
    return driver.send(
        ApiKey.JOIN_GROUP, version, group_id=group, session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
        rebalance_timeout=datetime.timedelta(milliseconds=10_000), member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocols=tuple(protocol_cls(name=n, metadata=m) for n, m in protocols),
    )


def join(driver: CoreDriver, member_id: str = "", group: str = "g", protocols=(("range", b"meta"),), version: int = 5) -> Pending:
    """JoinGroup as librdkafka does it: a new member first learns its id (v4+), then joins."""
    if not member_id and version >= 4:
        first = send_join(driver, "", group, protocols, version)
        if first.body.error_code is not ErrorCode.member_id_required:
            return first
        member_id = first.body.member_id
    return send_join(driver, member_id, group, protocols, version)


def sync(driver: CoreDriver, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, group: str = "g") -> Pending:
    cls = driver.request_class(ApiKey.SYNC_GROUP, 4, "SyncGroupRequestAssignment")
    return driver.send(ApiKey.SYNC_GROUP, 4, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                       assignments=tuple(cls(member_id=m, assignment=a) for m, a in (assignments or {}).items()))


def heartbeat(driver: CoreDriver, member_id: str, generation: int, group: str = "g") -> ErrorCode:
    return driver.call(ApiKey.HEARTBEAT, 4, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None).error_code


def commit(driver: CoreDriver, member_id: str, generation: int, offset: int, topic: str = "t", group: str = "g") -> ErrorCode:
    topic_cls = driver.request_class(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestTopic")
    part_cls = driver.request_class(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestPartition")
    body = driver.call(ApiKey.OFFSET_COMMIT, 9, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
                       topics=(topic_cls(name=topic, partitions=(part_cls(partition_index=0, committed_offset=offset, committed_leader_epoch=0, committed_metadata="m"),)),))
    return body.topics[0].partitions[0].error_code


def fetch_offset(driver: CoreDriver, topic: str = "t", group: str = "g", version: int = 9) -> int:
    if version >= 8:
        group_cls = driver.request_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestGroup")
        topics_cls = driver.request_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestTopics")
        body = driver.call(ApiKey.OFFSET_FETCH, version, require_stable=False,
                           groups=(group_cls(group_id=group, member_id=None, member_epoch=-1, topics=(topics_cls(name=topic, partition_indexes=(0,)),)),))
        return body.groups[0].topics[0].partitions[0].committed_offset
    topic_cls = driver.request_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestTopic")
    body = driver.call(ApiKey.OFFSET_FETCH, version, group_id=group, require_stable=False, topics=(topic_cls(name=topic, partition_indexes=(0,)),))
    return body.topics[0].partitions[0].committed_offset


def _form_group_of_two(driver: CoreDriver) -> tuple[str, str, int]:
    first = join(driver)
    assert first.done  # no initial delay configured: a lone member completes at once
    a = first.body.member_id
    assert first.body.generation_id == 1 and first.body.leader == a
    sync(driver, a, 1, {a: b"all"})
    assert heartbeat(driver, a, 1) is ErrorCode.none
    second = join(driver)
    assert not second.done  # parked until the existing member rejoins
    assert heartbeat(driver, a, 1) is ErrorCode.rebalance_in_progress
    rejoin = join(driver, a)
    assert rejoin.done and second.done
    b = second.body.member_id
    assert rejoin.body.generation_id == second.body.generation_id == 2
    assert rejoin.body.leader == a and {m.member_id for m in rejoin.body.members} == {a, b}
    assert second.body.members == ()
    follower_sync = sync(driver, b, 2)
    assert not follower_sync.done
    leader_sync = sync(driver, a, 2, {a: b"p0", b: b"p1"})
    assert leader_sync.body.assignment == b"p0" and follower_sync.body.assignment == b"p1"
    return a, b, 2


def test_two_members_form_a_generation_and_get_their_assignments() -> None:
    driver = group_driver()
    a, b, generation = _form_group_of_two(driver)
    assert heartbeat(driver, a, generation) is ErrorCode.none
    assert heartbeat(driver, b, generation - 1) is ErrorCode.illegal_generation
    assert heartbeat(driver, "stranger", generation) is ErrorCode.unknown_member_id


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    driver = group_driver()
    a, b, generation = _form_group_of_two(driver)
    for _ in range(4):
        driver.scheduler.advance(SESSION_MS / 2)
        assert heartbeat(driver, a, generation) in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert b not in driver.broker.groups.groups["g"].members
    assert heartbeat(driver, a, generation) is ErrorCode.rebalance_in_progress
    rejoined = join(driver, a)
    assert rejoined.done and rejoined.body.generation_id == generation + 1 and len(rejoined.body.members) == 1


def test_a_wall_clock_jump_on_the_coordinator_neither_expires_nor_extends_sessions() -> None:
    # Kafka's classic coordinator times sessions in its purgatory's timing wheel, which runs on
    # Time.hiResClockMs (System.nanoTime), and expires a member by a flag (hasSatisfiedHeartbeat),
    # not by comparing wall times: a libfaketime skew (wall time only) does not touch them.
    driver = group_driver()
    a, b, generation = _form_group_of_two(driver)
    driver.clock.wall_offset_ms += 10 * SESSION_MS
    driver.scheduler.advance(SESSION_MS / 2)
    assert heartbeat(driver, a, generation) is ErrorCode.none
    assert heartbeat(driver, b, generation) is ErrorCode.none
    driver.clock.wall_offset_ms -= 20 * SESSION_MS
    for _ in range(3):
        driver.scheduler.advance(SESSION_MS / 2)
        assert heartbeat(driver, a, generation) in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert b not in driver.broker.groups.groups["g"].members


def test_leave_group_v3_members_array() -> None:
    driver = group_driver()
    a, b, _ = _form_group_of_two(driver)
    identity = driver.request_class(ApiKey.LEAVE_GROUP, 4, "MemberIdentity")
    body = driver.call(ApiKey.LEAVE_GROUP, 4, group_id="g", members=(identity(member_id=b, group_instance_id=None), identity(member_id="ghost", group_instance_id=None)))
    assert [m.error_code for m in body.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert list(driver.broker.groups.groups["g"].members) == [a]


def test_commits_are_fenced_by_generation_and_member() -> None:
    driver = group_driver()
    create_topic(driver, "t", 1)
    a, b, generation = _form_group_of_two(driver)
    assert commit(driver, a, generation, 10) is ErrorCode.none
    assert commit(driver, a, generation - 1, 11) is ErrorCode.illegal_generation
    assert commit(driver, "zombie", generation, 12) is ErrorCode.unknown_member_id
    assert commit(driver, a, generation, 5, topic="missing") is ErrorCode.unknown_topic_or_partition
    assert fetch_offset(driver) == 10 and fetch_offset(driver, version=7) == 10
    assert commit(driver, "", -1, 99, group="standalone") is ErrorCode.none
    assert commit(driver, "x", 3, 99, group="never-seen") is ErrorCode.illegal_generation


def test_offsets_generation_and_members_survive_restart_and_crash() -> None:
    driver = group_driver({"log.flush.interval.messages": "1"})
    create_topic(driver, "t", 1)
    a, b, generation = _form_group_of_two(driver)
    assert commit(driver, a, generation, 42) is ErrorCode.none
    driver.restart()
    driver.await_coordinator(*GROUPS)
    assert fetch_offset(driver) == 42
    # The members come back with the stored generation, as Kafka's coordinator loads them: a
    # member that keeps heartbeating carries on without a rebalance.
    assert heartbeat(driver, a, generation) is ErrorCode.none
    assert heartbeat(driver, "stranger", generation) is ErrorCode.unknown_member_id
    fresh = join(driver)  # a new member: the restored group rebalances
    assert heartbeat(driver, a, generation) is ErrorCode.rebalance_in_progress
    rejoined = [send_join(driver, member, "g", (("range", b"meta"),), 5) for member in (a, b)]
    assert {p.body.generation_id for p in (fresh, *rejoined)} == {generation + 1}  # generations never repeat
    driver.restart(crash=True)
    driver.await_coordinator(*GROUPS)
    assert fetch_offset(driver) == 42


def test_initial_rebalance_delay_gathers_members_into_one_generation() -> None:
    driver = group_driver({"group.initial.rebalance.delay.ms": "3000"})
    first = join(driver)
    driver.scheduler.advance(2000)
    second = join(driver)  # arrives within the delay and extends it to 2000 + 3000 ms
    driver.scheduler.advance(2999)
    assert not first.done and not second.done
    driver.scheduler.advance(1)
    assert first.done and second.done
    assert first.body.generation_id == second.body.generation_id == 1


def test_describe_and_list_groups() -> None:
    driver = group_driver()
    a, b, _ = _form_group_of_two(driver)
    described = driver.call(ApiKey.DESCRIBE_GROUPS, 5, groups=("g", "unknown"), include_authorized_operations=False).groups
    assert described[0].group_state == "Stable" and described[0].protocol_data == "range"
    assert {m.member_id for m in described[0].members} == {a, b}
    assert described[1].group_state == "Dead"
    listed = driver.call(ApiKey.LIST_GROUPS, 4, states_filter=()).groups
    assert [(g.group_id, g.group_state) for g in listed] == [("g", "Stable")]


def test_join_rejects_bad_session_timeouts_and_inconsistent_protocols() -> None:
    driver = group_driver()
    first = join(driver)
    assert first.body.error_code is ErrorCode.none
    other = join(driver, protocols=(("roundrobin", b""),))
    assert other.body.error_code is ErrorCode.inconsistent_group_protocol
    protocol_cls = driver.request_class(ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol")
    short = driver.call(ApiKey.JOIN_GROUP, 5, group_id="h", session_timeout=datetime.timedelta(milliseconds=10),
                        rebalance_timeout=datetime.timedelta(seconds=1), member_id="", group_instance_id=None,
                        protocol_type="consumer", protocols=(protocol_cls(name="range", metadata=b""),))
    assert short.error_code is ErrorCode.invalid_session_timeout


def test_member_id_required_from_v4_and_expiry_of_unused_ids() -> None:
    driver = group_driver()
    first = send_join(driver)
    assert first.body.error_code is ErrorCode.member_id_required and first.body.member_id.startswith("tester-")
    assert driver.broker.groups.groups["g"].members == {}
    unused = send_join(driver).body.member_id
    driver.scheduler.advance(SESSION_MS + 1)
    assert send_join(driver, unused).body.error_code is ErrorCode.unknown_member_id  # never came back: forgotten
    old_style = send_join(driver, group="v3", version=3)
    assert old_style.body.error_code is ErrorCode.none and old_style.body.generation_id == 1


def test_groups_answer_load_in_progress_until_their_partition_is_replayed() -> None:
    driver = group_driver()
    create_topic(driver, "t", 1)
    topic_cls = driver.request_class(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestTopic")
    part_cls = driver.request_class(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestPartition")
    # More than one replay chunk (1 MiB) of commit records for the group's partition.
    for offset in range(300):
        body = driver.call(ApiKey.OFFSET_COMMIT, 9, group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                           topics=(topic_cls(name="t", partitions=(part_cls(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                                                            committed_metadata="m" * 4000),)),))
        assert body.topics[0].partitions[0].error_code is ErrorCode.none
    driver.restart(wait=False)
    broker = driver.broker
    during_load: list[ErrorCode] = []
    restore = broker.groups.restore_offset

    def observing_restore(*args, **kwargs):  # type: ignore[no-untyped-def]
        # A client's heartbeat arriving while the partition is being replayed.
        during_load.append(heartbeat(driver, "someone", 1))
        restore(*args, **kwargs)

    broker.groups.restore_offset = observing_restore  # type: ignore[method-assign]
    driver.run_until(lambda: broker.coordinates("g"), 10_000, "group g loaded")
    assert len(during_load) == 300 and set(during_load) == {ErrorCode.coordinator_load_in_progress}
    assert heartbeat(driver, "someone", 1) is ErrorCode.unknown_member_id  # loaded: now the coordinator answers
    assert fetch_offset(driver) == 299


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (the metadata a Java-protocol consumer joins with)."""
    body = struct.pack(">hi", 0, len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return body + struct.pack(">i", -1)  # null user data


def delete_groups(driver: CoreDriver, *groups: str) -> list[tuple[str, ErrorCode]]:
    body = driver.call(ApiKey.DELETE_GROUPS, 2, groups_names=groups)
    return [(r.group_id, r.error_code) for r in body.results]


def offset_delete(driver: CoreDriver, group: str, *topics: str) -> tuple[ErrorCode, dict[str, ErrorCode]]:
    topic_cls = driver.request_class(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestTopic")
    part_cls = driver.request_class(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition")
    body = driver.call(ApiKey.OFFSET_DELETE, 0, group_id=group, topics=tuple(topic_cls(name=t, partitions=(part_cls(partition_index=0),)) for t in topics))
    return body.error_code, {t.name: t.partitions[0].error_code for t in body.topics}


def test_delete_groups_and_offsets_as_kafka_and_the_deletion_survives_restart() -> None:
    driver = group_driver({"log.flush.interval.messages": "1"})
    create_topic(driver, "t", 1)
    create_topic(driver, "u", 1)
    joined = join(driver, protocols=(("range", _subscription("t")),))
    member, generation = joined.body.member_id, joined.body.generation_id
    assert sync(driver, member, generation, {member: b"t-0"}).body.error_code is ErrorCode.none
    assert commit(driver, member, generation, 10, topic="t") is ErrorCode.none
    assert commit(driver, member, generation, 20, topic="u") is ErrorCode.none
    assert commit(driver, "", -1, 7, topic="t", group="h") is ErrorCode.none
    assert commit(driver, "", -1, 8, topic="u", group="h") is ErrorCode.none

    assert delete_groups(driver, "g", "never-seen", "") == [
        ("g", ErrorCode.non_empty_group), ("never-seen", ErrorCode.group_id_not_found), ("", ErrorCode.invalid_group_id)]
    assert offset_delete(driver, "never-seen", "t") == (ErrorCode.group_id_not_found, {})
    # A member subscribes to t: its offsets stay; u's go; an unknown topic is named as such.
    assert offset_delete(driver, "g", "t", "u", "missing") == (
        ErrorCode.none, {"t": ErrorCode.group_subscribed_to_topic, "u": ErrorCode.none, "missing": ErrorCode.unknown_topic_or_partition})
    assert (fetch_offset(driver, "t"), fetch_offset(driver, "u")) == (10, -1)
    assert offset_delete(driver, "h", "u") == (ErrorCode.none, {"u": ErrorCode.none})  # h is Empty: anything goes

    identity = driver.request_class(ApiKey.LEAVE_GROUP, 4, "MemberIdentity")
    driver.call(ApiKey.LEAVE_GROUP, 4, group_id="g", members=(identity(member_id=member, group_instance_id=None),))
    assert delete_groups(driver, "g") == [("g", ErrorCode.none)]
    assert "g" not in driver.broker.groups.groups and fetch_offset(driver, "t") == -1
    assert delete_groups(driver, "g") == [("g", ErrorCode.group_id_not_found)]

    for crash in (False, True):
        driver.restart(crash=crash)
        driver.await_coordinator(*GROUPS)
        assert "g" not in driver.broker.groups.groups, "the group tombstone was not replayed"
        assert (fetch_offset(driver, "t", group="h"), fetch_offset(driver, "u", group="h")) == (7, -1)
    # A deleted group's id starts afresh.
    assert commit(driver, "", -1, 3, topic="t") is ErrorCode.none and fetch_offset(driver, "t") == 3


def static_join(driver: CoreDriver, instance_id: str, member_id: str = "", version: int = 5) -> Pending:
    protocol_cls = driver.request_class(ApiKey.JOIN_GROUP, version, "JoinGroupRequestProtocol")
    return driver.send(ApiKey.JOIN_GROUP, version, group_id="g", session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
                       rebalance_timeout=datetime.timedelta(milliseconds=10_000), member_id=member_id, group_instance_id=instance_id,
                       protocol_type="consumer", protocols=(protocol_cls(name="range", metadata=b"meta"),))


def static_heartbeat(driver: CoreDriver, member_id: str, generation: int, instance_id: str) -> ErrorCode:
    return driver.call(ApiKey.HEARTBEAT, 4, group_id="g", generation_id=generation, member_id=member_id, group_instance_id=instance_id).error_code


def test_a_static_member_that_restarts_keeps_its_assignment_without_a_rebalance_and_fences_its_old_id() -> None:
    driver = group_driver()
    create_topic(driver, "t", 1)
    first = static_join(driver, "instance-a")
    assert first.done and first.body.error_code is ErrorCode.none  # a static member needs no MEMBER_ID_REQUIRED round trip
    a = first.body.member_id
    assert sync(driver, a, 1, {a: b"all"}).body.assignment == b"all"
    second = join(driver)  # a dynamic member: a real rebalance
    rejoin = static_join(driver, "instance-a", a)
    assert rejoin.done and second.done and rejoin.body.generation_id == 2 and rejoin.body.leader == a
    b = second.body.member_id
    follower = sync(driver, b, 2)
    assert sync(driver, a, 2, {a: b"p0", b: b"p1"}).body.assignment == b"p0" and follower.body.assignment == b"p1"

    # instance-a restarts: it joins with no member id, and the group stays at generation 2.
    restarted = static_join(driver, "instance-a")
    assert restarted.done and restarted.body.error_code is ErrorCode.none
    a2 = restarted.body.member_id
    assert a2 != a and restarted.body.generation_id == 2
    assert restarted.body.leader == a and restarted.body.members == ()  # the old leader id: a2 does not assign
    assert sync(driver, a2, 2, group="g").body.assignment == b"p0"
    assert heartbeat(driver, b, 2) is ErrorCode.none  # no rebalance for the other member
    assert static_heartbeat(driver, a2, 2, "instance-a") is ErrorCode.none
    # The old incarnation is fenced everywhere.
    assert static_heartbeat(driver, a, 2, "instance-a") is ErrorCode.fenced_instance_id
    assert static_join(driver, "instance-a", a).body.error_code is ErrorCode.fenced_instance_id
    part_cls = driver.request_class(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestPartition")
    topic_cls = driver.request_class(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestTopic")
    stale = driver.call(ApiKey.OFFSET_COMMIT, 9, group_id="g", generation_id_or_member_epoch=2, member_id=a, group_instance_id="instance-a",
                        topics=(topic_cls(name="t", partitions=(part_cls(partition_index=0, committed_offset=5, committed_leader_epoch=0, committed_metadata=""),)),))
    assert stale.topics[0].partitions[0].error_code is ErrorCode.fenced_instance_id
    # LeaveGroup by instance id alone (kafka-python's remove_group_members) removes it and rebalances.
    identity = driver.request_class(ApiKey.LEAVE_GROUP, 4, "MemberIdentity")
    left = driver.call(ApiKey.LEAVE_GROUP, 4, group_id="g", members=(identity(member_id="", group_instance_id="instance-a"),))
    assert [m.error_code for m in left.members] == [ErrorCode.none]
    assert list(driver.broker.groups.groups["g"].members) == [b]
    assert heartbeat(driver, b, 2) is ErrorCode.rebalance_in_progress


def test_group_deletions_before_the_coordinator_is_ready_say_not_coordinator() -> None:
    driver = CoreDriver()  # no __consumer_offsets yet: this broker coordinates no group
    assert delete_groups(driver, "g") == [("g", ErrorCode.not_coordinator)]
    assert offset_delete(driver, "g", "t") == (ErrorCode.not_coordinator, {})
