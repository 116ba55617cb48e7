"""A group's members survive the loss of its coordinator (3 brokers, confluent-kafka): the
group record in __consumer_offsets carries the generation's members, as Kafka's
GroupMetadataValue does, so the broker that takes the partition over serves their heartbeats
without a rebalance, and a static member (KIP-345) that restarts afterwards takes its
partition back under the new coordinator, also without one."""

from __future__ import annotations

import time

from cluster.protocol.client import WireClient
from cluster.protocol.versions import ApiKey
from tests.cluster.kafka_helpers import create_topic, group_coordinator, wait_for
from tests.cluster.replication_helpers import FAST_FAILOVER
from tests.interop.test_static_membership import _Member, _poll_until

TOPIC = "work"
GROUP = "static-workers"


def test_static_members_carry_on_through_a_coordinator_failover(make_cluster) -> None:
    cluster = make_cluster(brokers=3, config={**FAST_FAILOVER, "default.replication.factor": "3", "min.insync.replicas": "2",
                                              "group.initial.rebalance.delay.ms": "0"})
    create_topic(cluster.bootstrap_servers, TOPIC, 2, replication_factor=3)
    first = _Member(cluster, GROUP, TOPIC, "instance-1")
    second = _Member(cluster, GROUP, TOPIC, "instance-2")
    try:
        _poll_until([first, second], lambda: len(first.assigned()) == 1 and len(second.assigned()) == 1, "one partition each")
        events = (list(first.events), list(second.events))
        (old,) = wait_for(lambda: (b := group_coordinator(cluster, GROUP)) is not None and b >= 0 and (b,), 30, "the group's coordinator")
        cluster.kill(old)
        # Poll through the failover: librdkafka finds the new coordinator and heartbeats it
        # with the same member id and generation; a coordinator that had lost the members
        # would answer UNKNOWN_MEMBER_ID and force a rebalance (revoke, then assign).
        deadline = time.monotonic() + 60
        new = None
        while time.monotonic() < deadline and new is None:
            first.poll()
            second.poll()
            found = group_coordinator(cluster, GROUP)
            new = found if found is not None and found != old else None
        assert new is not None, "no new coordinator within 60 s"
        settle = time.monotonic() + 6  # a few heartbeat intervals with the new coordinator
        while time.monotonic() < settle:
            first.poll()
            second.poll()
        assert (first.events, second.events) == events, "the coordinator failover caused a rebalance"

        # A static member restarting under the new coordinator keeps its partition, no rebalance.
        partition = second.assigned()
        second.consumer.close()
        second = _Member(cluster, GROUP, TOPIC, "instance-2")
        _poll_until([first, second], lambda: second.assigned() == partition, "the restarted member's old partition")
        assert first.events == events[0], "the restart under the new coordinator caused a rebalance"

        broker = next(b for b in cluster.brokers if b.broker_id == new)
        with WireClient(broker.host, broker.port, timeout_s=10) as client:
            (described,) = client.request(ApiKey.DESCRIBE_GROUPS, 5, groups=[GROUP], include_authorized_operations=False).groups
        assert described.group_state == "Stable"
        assert sorted(m.group_instance_id for m in described.members) == ["instance-1", "instance-2"]
    finally:
        first.consumer.close()
        second.consumer.close()
