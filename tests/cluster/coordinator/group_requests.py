"""Group-protocol requests against a SimCluster, in the versions librdkafka sends (real frames
through the virtual network), and a started 3-broker cluster for the coordinator tests."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.controller.core import Controller
from cluster.protocol.codec import build
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCall, SimCluster
from cluster.sim.network import SimNode
from tests.cluster.sim.sim_requests import create_topic, req

GROUP = "g"
TOPIC = "t"
SESSION_MS = 10_000
ANSWER_WAIT_MS = 30_000


def started_cluster(seed: int = 1, **props: str) -> SimCluster:
    # Requests forwarded to the controller queue behind the broker's 500 ms metadata long poll
    # on the same connection, so they need a request timeout well above it.
    sim = SimCluster(3, {"min.insync.replicas": "2", "offsets.topic.replication.factor": "3", "controller.quorum.request.timeout.ms": "2000",
                         **props}, seed=seed)
    # The controller must decode with its own version table (BrokerRegistration and friends
    # are not in the broker's); replace its node entry before any message is delivered.
    sim.network.add_node(SimNode(sim.controller_endpoint, lambda r, c, reply: sim.controller.handle(r, c, reply), Controller.versions))
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    assert create_topic(sim, 0, TOPIC, 1, 3).error_code is ErrorCode.none
    return sim


def answer(sim: SimCluster, call: SimCall, what: str) -> Any:
    sim.run_until(lambda: call.done, ANSWER_WAIT_MS, step_ms=1, what=what)
    return call.body


def find_coordinator(sim: SimCluster, ask: int, group: str = GROUP) -> tuple[ErrorCode, int]:
    call = sim.send(ask, ApiKey.FIND_COORDINATOR, 3, request_timeout_ms=5000, key=group, key_type=0)
    sim.run_until(lambda: call.done, 10_000, step_ms=1, what="a FindCoordinator answer")
    if call.result is None or not call.result.ok:
        return ErrorCode.coordinator_not_available, -1
    return call.body.error_code, call.body.node_id


def wait_coordinator(sim: SimCluster, ask: int, *, not_: int | None = None, group: str = GROUP, timeout_ms: float = 30_000) -> int:
    """FindCoordinator through broker `ask` until it names a coordinator (other than `not_`)
    that is running and has loaded the group."""
    found: list[int] = []

    def ready() -> bool:
        error, node = find_coordinator(sim, ask, group)
        if error is ErrorCode.none and node != not_ and sim.is_running(node) and sim.broker(node).coordinates(group):
            found.append(node)
            return True
        sim.run_for(50)
        return False

    sim.run_until(ready, timeout_ms, step_ms=1, what=f"a coordinator for {group} other than {not_}")
    return found[-1]


@dataclass(frozen=True)
class Membership:
    member_id: str
    generation: int


def send_join(sim: SimCluster, broker: int, member_id: str = "", group: str = GROUP) -> SimCall:
    protocol = req(ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol")
    return sim.send(broker, ApiKey.JOIN_GROUP, 5, request_timeout_ms=60_000, group_id=group,
                    session_timeout=datetime.timedelta(milliseconds=SESSION_MS), rebalance_timeout=datetime.timedelta(milliseconds=SESSION_MS),
                    member_id=member_id, group_instance_id=None, protocol_type="consumer",
                    protocols=(protocol(name="range", metadata=b"m"),))


def join_and_sync(sim: SimCluster, broker: int, group: str = GROUP) -> Membership:
    """A lone member joins (learning its id first, as JoinGroup v4+ requires) and syncs."""
    first = answer(sim, send_join(sim, broker, "", group), "JoinGroup")
    assert first.error_code is ErrorCode.member_id_required, first
    joined = answer(sim, send_join(sim, broker, first.member_id, group), "JoinGroup with the member id")
    assert joined.error_code is ErrorCode.none, joined
    assignment = req(ApiKey.SYNC_GROUP, 4, "SyncGroupRequestAssignment")
    synced = answer(sim, sim.send(broker, ApiKey.SYNC_GROUP, 4, request_timeout_ms=60_000, group_id=group, generation_id=joined.generation_id,
                                  member_id=joined.member_id, group_instance_id=None,
                                  assignments=(assignment(member_id=joined.member_id, assignment=b"all"),)), "SyncGroup")
    assert synced.error_code is ErrorCode.none and synced.assignment == b"all", synced
    return Membership(joined.member_id, joined.generation_id)


def heartbeat(sim: SimCluster, broker: int, member: Membership, group: str = GROUP) -> ErrorCode:
    body = answer(sim, sim.send(broker, ApiKey.HEARTBEAT, 4, group_id=group, generation_id=member.generation, member_id=member.member_id,
                                group_instance_id=None), "Heartbeat")
    return body.error_code


def send_commit(sim: SimCluster, broker: int, member: Membership, offset: int, group: str = GROUP) -> SimCall:
    topic = req(ApiKey.OFFSET_COMMIT, 8, "OffsetCommitRequestTopic")
    partition = req(ApiKey.OFFSET_COMMIT, 8, "OffsetCommitRequestPartition")
    return sim.send(broker, ApiKey.OFFSET_COMMIT, 8, request_timeout_ms=60_000, group_id=group, generation_id_or_member_epoch=member.generation,
                    member_id=member.member_id, group_instance_id=None,
                    topics=(topic(name=TOPIC, partitions=(partition(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                                                    committed_metadata=""),)),))


def commit_error(call: SimCall) -> ErrorCode:
    return call.body.topics[0].partitions[0].error_code


def fetch_committed(sim: SimCluster, broker: int, group: str = GROUP) -> tuple[ErrorCode, int]:
    """(group error, committed offset of t-0) by OffsetFetch v8."""
    group_cls = req(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestGroup")
    topics_cls = req(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestTopics")
    body = answer(sim, sim.send(broker, ApiKey.OFFSET_FETCH, 8, require_stable=False,
                                groups=(build(group_cls, group_id=group, topics=(topics_cls(name=TOPIC, partition_indexes=(0,)),)),)),
                  "OffsetFetch")
    answered = body.groups[0]
    if answered.error_code is not ErrorCode.none:
        return answered.error_code, -1
    return ErrorCode.none, answered.topics[0].partitions[0].committed_offset


def commit(sim: SimCluster, broker: int, member: Membership, offset: int, group: str = GROUP) -> ErrorCode:
    call = send_commit(sim, broker, member, offset, group)
    answer(sim, call, "OffsetCommit")
    return commit_error(call)


def describe_error(sim: SimCluster, broker: int, group: str = GROUP) -> ErrorCode:
    body = answer(sim, sim.send(broker, ApiKey.DESCRIBE_GROUPS, 5, groups=(group,), include_authorized_operations=False), "DescribeGroups")
    return body.groups[0].error_code
