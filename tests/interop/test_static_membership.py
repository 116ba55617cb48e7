"""Static membership (KIP-345) with confluent-kafka on one and three brokers: consumers with
group.instance.id; one restarts within its session timeout and takes its partition back
without a rebalance (the other consumer is neither revoked nor reassigned); kafka-python's
remove_group_members removes a closed static member by instance id; and a group
consumer without group.instance.id still forms a group as before."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import MemberToRemove
from kafka.errors import NoError

TIMEOUT_S = 15


def _topic(cluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, min(3, len(cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for partition in range(partitions):
        producer.produce(topic, b"x", partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


class _Member:
    """A consumer that records every assignment and revocation it is told of."""

    def __init__(self, cluster, group: str, topic: str, instance_id: str | None) -> None:
        config = {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 30_000, "heartbeat.interval.ms": 500}
        if instance_id is not None:
            config["group.instance.id"] = instance_id
        self.consumer = Consumer(config)
        self.events: list[tuple[str, list[int]]] = []
        self.consumer.subscribe([topic], on_assign=lambda c, ps: self.events.append(("assign", sorted(p.partition for p in ps))),
                                on_revoke=lambda c, ps: self.events.append(("revoke", sorted(p.partition for p in ps))))

    def poll(self) -> None:
        self.consumer.poll(0.2)

    def assigned(self) -> list[int]:
        return sorted(p.partition for p in self.consumer.assignment())


def _poll_until(members: list[_Member], done, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        for member in members:
            member.poll()
    assert done(), what


def test_a_restarted_static_consumer_takes_its_partition_back_without_a_rebalance(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    _topic(interop_cluster, topic, 2)
    first = _Member(interop_cluster, group, topic, "instance-1")
    second = _Member(interop_cluster, group, topic, "instance-2")
    try:
        _poll_until([first, second], lambda: len(first.assigned()) == 1 and len(second.assigned()) == 1, "one partition each")
        first_events = list(first.events)
        second_partition = second.assigned()
        second.consumer.close()  # a static member sends no LeaveGroup: its place is kept for its session
        restarted = _Member(interop_cluster, group, topic, "instance-2")
        try:
            _poll_until([first, restarted], lambda: restarted.assigned() == second_partition, "the restarted member's old partition")
            deadline = time.monotonic() + 3  # heartbeats would report a rebalance within this
            while time.monotonic() < deadline:
                first.poll()
                restarted.poll()
            assert first.events == first_events, "the other static member went through a rebalance"
            assert restarted.events == [("assign", second_partition)]
        finally:
            restarted.consumer.close()
        # The closed static member still holds its place until an admin removes it by instance id.
        admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
        try:
            removed = admin.remove_group_members(group, [MemberToRemove(group_instance_id="instance-2")])
            assert removed == {"instance-2": NoError}
        finally:
            admin.close()
        _poll_until([first], lambda: first.assigned() == [0, 1], "the remaining member takes both partitions")
    finally:
        first.consumer.close()


def test_dynamic_consumers_still_share_a_group(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    _topic(interop_cluster, topic, 2)
    members = [_Member(interop_cluster, group, topic, None) for _ in range(2)]
    try:
        _poll_until(members, lambda: [m.assigned() for m in members] in ([[0], [1]], [[1], [0]]), "one partition each")
    finally:
        for member in members:
            member.consumer.close()
