"""The group APIs on the wire: translate kio requests of every offered version into
GroupCoordinator calls and its results back into responses.

Shape changes handled here: LeaveGroup v3+ (a members array), OffsetFetch v8+ (a groups
array), JoinGroup/DescribeGroups adding group_instance_id.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo, Reply
from cluster.broker.groups import GroupState, JoinResult, OffsetToCommit, SyncResult
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

NO_THROTTLE = datetime.timedelta(0)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def handle_join_group(broker: Broker, request: Request, client: ClientInfo, reply: Reply) -> None:
    body = request.body
    version = request.api_version
    cls = response_class(ApiKey.JOIN_GROUP, version)
    member_cls = payload_class(ApiKey.JOIN_GROUP, version, "JoinGroupResponseMember")
    session_ms = _ms(body.session_timeout)
    rebalance_ms = _ms(body.rebalance_timeout) if hasattr(body, "rebalance_timeout") else session_ms

    def answer(result: JoinResult) -> None:
        reply(
            broker.respond(
                request,
                build(
                    cls,
                    throttle_time=NO_THROTTLE,
                    error_code=result.error,
                    generation_id=result.generation_id,
                    protocol_type=result.protocol_type,
                    protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
                    leader=result.leader_id,
                    skip_assignment=False,
                    member_id=result.member_id,
                    members=tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata) for m in result.members),
                ),
            )
        )

    broker.groups.join(
        body.group_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        client.client_id or "",
        client.client_host,
        session_ms,
        rebalance_ms,
        body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols],
        answer,
        require_known_member_id=version >= 4 and getattr(body, "group_instance_id", None) is None,
    )


def handle_sync_group(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    cls = response_class(ApiKey.SYNC_GROUP, request.api_version)

    def answer(result: SyncResult) -> None:
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=result.error, protocol_type=result.protocol_type,
                                            protocol_name=result.protocol_name, assignment=result.assignment)))

    if broker.groups.fenced(body.group_id, body.member_id, getattr(body, "group_instance_id", None)):
        answer(SyncResult(ErrorCode.fenced_instance_id))
        return
    assignments = {a.member_id: a.assignment for a in body.assignments}
    broker.groups.sync(body.group_id, body.member_id, body.generation_id, assignments, answer)


def handle_heartbeat(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    if broker.groups.fenced(body.group_id, body.member_id, getattr(body, "group_instance_id", None)):
        error = ErrorCode.fenced_instance_id
    else:
        error = broker.groups.heartbeat(body.group_id, body.member_id, body.generation_id)
    reply(broker.respond(request, build(response_class(ApiKey.HEARTBEAT, request.api_version), throttle_time=NO_THROTTLE, error_code=error)))


def handle_leave_group(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    version = request.api_version
    cls = response_class(ApiKey.LEAVE_GROUP, version)
    if version < 3:
        error, _ = broker.groups.leave(body.group_id, [body.member_id])
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=error)))
        return
    member_cls = payload_class(ApiKey.LEAVE_GROUP, version, "MemberResponse")
    error, results = broker.groups.leave(body.group_id, [m.member_id for m in body.members], [m.group_instance_id for m in body.members])
    members = tuple(
        build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=r) for m, r in zip(body.members, results)
    )
    reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=error, members=members)))


def handle_offset_commit(broker: Broker, request: Request, reply: Reply) -> None:
    """Validate, append to __consumer_offsets, and answer once the append is committed (or
    failed: the error already mapped as Kafka's coordinator maps it)."""
    body = request.body
    version = request.api_version
    topic_cls = payload_class(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponseTopic")
    partition_cls = payload_class(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponsePartition")
    if broker.groups.fenced(body.group_id, body.member_id, getattr(body, "group_instance_id", None)):
        group_error = ErrorCode.fenced_instance_id
    else:
        group_error = broker.groups.validate_commit(body.group_id, body.generation_id_or_member_epoch, body.member_id)
    accepted: list[OffsetToCommit] = []
    errors: list[list[ErrorCode]] = []
    for topic in body.topics:
        topic_errors = []
        info = broker.topics.by_name(topic.name)
        for p in topic.partitions:
            metadata = p.committed_metadata or ""
            if group_error is not ErrorCode.none:
                topic_errors.append(group_error)
            elif info is None or p.partition_index not in info.partitions:
                topic_errors.append(ErrorCode.unknown_topic_or_partition)
            elif len(metadata.encode()) > broker.config.offset_metadata_max_bytes:
                topic_errors.append(ErrorCode.offset_metadata_too_large)
            else:
                topic_errors.append(ErrorCode.none)
                accepted.append(OffsetToCommit(topic.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1), metadata))
        errors.append(topic_errors)

    def answer(stored: ErrorCode) -> None:
        outcome = [[stored if e is ErrorCode.none else e for e in t] for t in errors]
        topics = tuple(
            build(topic_cls, name=topic.name, partitions=tuple(build(partition_cls, partition_index=p.partition_index, error_code=e)
                                                               for p, e in zip(topic.partitions, topic_errors)))
            for topic, topic_errors in zip(body.topics, outcome)
        )
        reply(broker.respond(request, build(response_class(ApiKey.OFFSET_COMMIT, version), throttle_time=NO_THROTTLE, topics=topics)))

    if accepted:
        broker.groups.commit(body.group_id, accepted, answer)
    else:
        answer(ErrorCode.none)


def _offsets_for(broker: Broker, version: int, group_id: str, topics: Any, topic_cls: type, partition_cls: type,
                 require_stable: bool = False) -> tuple[Any, ...]:
    """With `require_stable` (KIP-447, v7+; librdkafka sets it for read_committed consumers),
    a partition whose offset a transaction has committed but not yet completed answers
    UNSTABLE_OFFSET_COMMIT, and the consumer asks again, instead of the older offset."""
    committed = broker.groups.committed(group_id)
    wanted: list[tuple[str, list[int]]]
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            by_topic.setdefault(topic, []).append(partition)
        wanted = list(by_topic.items())
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in topics]
    out = []
    for name, indexes in wanted:
        partitions = []
        for index in indexes:
            entry = committed.get((name, index))
            if require_stable and broker.txn_offsets.is_pending(group_id, name, index):
                partitions.append(build(partition_cls, partition_index=index, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                                        error_code=ErrorCode.unstable_offset_commit))
                continue
            partitions.append(
                build(
                    partition_cls,
                    partition_index=index,
                    committed_offset=entry.offset if entry else -1,
                    committed_leader_epoch=entry.leader_epoch if entry else -1,
                    metadata=entry.metadata if entry else "",
                    error_code=ErrorCode.none,
                )
            )
        out.append(build(topic_cls, name=name, partitions=tuple(partitions)))
    return tuple(out)


def handle_offset_fetch(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    version = request.api_version
    cls = response_class(ApiKey.OFFSET_FETCH, version)
    if version < 8:
        topic_cls = payload_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseTopic")
        partition_cls = payload_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponsePartition")
        topics = _offsets_for(broker, version, body.group_id, body.topics, topic_cls, partition_cls, bool(getattr(body, "require_stable", False)))
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=ErrorCode.none)))
        return
    group_cls = payload_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseGroup")
    topic_cls = payload_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponseTopics")
    partition_cls = payload_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchResponsePartitions")
    groups = []
    for g in body.groups:
        error = broker.group_error(g.group_id)
        topics = (_offsets_for(broker, version, g.group_id, g.topics, topic_cls, partition_cls, bool(body.require_stable))
                  if error is ErrorCode.none else ())
        groups.append(build(group_cls, group_id=g.group_id, topics=topics, error_code=error))
    reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))))


def handle_describe_groups(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    group_cls = payload_class(ApiKey.DESCRIBE_GROUPS, version, "DescribedGroup")
    member_cls = payload_class(ApiKey.DESCRIBE_GROUPS, version, "DescribedGroupMember")
    out = []
    for group_id in request.body.groups:
        group = broker.groups.groups.get(group_id)
        refused = broker.group_error(group_id)
        if refused is not ErrorCode.none:
            out.append(build(group_cls, error_code=refused, group_id=group_id, group_state="", protocol_type="", protocol_data="", members=(),
                             authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        if group is None:
            out.append(build(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=GroupState.DEAD.value, protocol_type="",
                             protocol_data="", members=(), authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        stable = group.state is GroupState.STABLE
        members = tuple(
            build(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(group.protocol_name or "") if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        out.append(build(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=group.state.value,
                         protocol_type=group.protocol_type or "", protocol_data=(group.protocol_name or "") if stable else "",
                         members=members, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    reply(broker.respond(request, build(response_class(ApiKey.DESCRIBE_GROUPS, version), throttle_time=NO_THROTTLE, groups=tuple(out))))


def handle_list_groups(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    listed_cls = payload_class(ApiKey.LIST_GROUPS, version, "ListedGroup")
    states = set(getattr(request.body, "states_filter", ()) or ())
    groups = tuple(
        build(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value)
        for g in sorted(broker.groups.groups.values(), key=lambda g: g.group_id)
        if not states or g.state.value in states
    )
    reply(broker.respond(request, build(response_class(ApiKey.LIST_GROUPS, version), throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)))


def handle_delete_groups(broker: Broker, request: Request, reply: Reply) -> None:
    """Each named group is deleted by its coordinator (NOT_COORDINATOR for the others, so the
    client looks it up); the answer waits for every group's tombstones."""
    version = request.api_version
    result_cls = payload_class(ApiKey.DELETE_GROUPS, version, "DeletableGroupResult")
    names = list(request.body.groups_names)
    errors: dict[int, ErrorCode] = {}

    def settle(index: int, error: ErrorCode) -> None:
        errors[index] = error
        if len(errors) == len(names):
            results = tuple(build(result_cls, group_id=name, error_code=errors[i]) for i, name in enumerate(names))
            reply(broker.respond(request, build(response_class(ApiKey.DELETE_GROUPS, version), throttle_time=NO_THROTTLE, results=results)))

    if not names:
        reply(broker.respond(request, build(response_class(ApiKey.DELETE_GROUPS, version), throttle_time=NO_THROTTLE, results=())))
        return
    for index, name in enumerate(names):
        refused = ErrorCode.invalid_group_id if not name else broker.group_error(name)
        if refused is not ErrorCode.none:
            settle(index, refused)
        else:
            broker.groups.delete_group(name, lambda error, index=index: settle(index, error))


def handle_offset_delete(broker: Broker, request: Request, reply: Reply) -> None:
    """Reached only on the group's coordinator (Broker.handle checks)."""
    body = request.body
    topic_cls = payload_class(ApiKey.OFFSET_DELETE, request.api_version, "OffsetDeleteResponseTopic")
    partition_cls = payload_class(ApiKey.OFFSET_DELETE, request.api_version, "OffsetDeleteResponsePartition")
    wanted, unknown = [], {}
    for t in body.topics:
        info = broker.topics.by_name(t.name)
        for p in t.partitions:
            if info is None or p.partition_index not in info.partitions:
                unknown[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append((t.name, p.partition_index))

    def answer(error: ErrorCode, results: dict[tuple[str, int], ErrorCode]) -> None:
        results = {**results, **unknown}
        topics = () if error is not ErrorCode.none else tuple(
            build(topic_cls, name=t.name, partitions=tuple(build(partition_cls, partition_index=p.partition_index, error_code=results[(t.name, p.partition_index)])
                                                           for p in t.partitions))
            for t in body.topics
        )
        reply(broker.respond(request, build(response_class(ApiKey.OFFSET_DELETE, request.api_version), error_code=error,
                                            throttle_time=NO_THROTTLE, topics=topics)))

    broker.groups.delete_offsets(body.group_id, wanted, answer)
