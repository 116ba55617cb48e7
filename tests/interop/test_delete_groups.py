"""DeleteGroups and OffsetDelete through confluent-kafka and kafka-python, on one and three
brokers: a group with a live member is NON_EMPTY_GROUP and keeps the offsets of the topic it
subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) while others go; once its member has left, the
group and its offsets go; an unknown group is GROUP_ID_NOT_FOUND. (That the tombstones bring
a deletion through a coordinator restart: tests/cluster/broker/test_groups.py.)"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition as KPTopicPartition
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError
from kafka.structs import OffsetAndMetadata

TIMEOUT_S = 15


def _topics(cluster, *topics: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(t, 1, min(3, len(cluster.brokers))) for t in topics], operation_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for topic in topics:
        producer.produce(topic, b"x", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    return admin


def _kafka_python_admin(cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)


def _committed(kp_admin: KafkaAdminClient, group: str) -> dict[str, int]:
    return {tp.topic: o.offset for tp, o in kp_admin.list_group_offsets({group: None}).get(group, {}).items() if o.offset >= 0}


def _member_of(cluster, group: str, topic: str) -> Consumer:
    """A confluent-kafka consumer that has joined `group`, subscribed to `topic` only."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.5)
    assert consumer.assignment() == [TopicPartition(topic, 0)]
    return consumer


def _delete_error(admin: AdminClient, group: str) -> int | None:
    try:
        admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    except KafkaException as error:
        return error.args[0].code()
    return None


def test_confluent_delete_consumer_groups_and_kafka_python_delete_group_offsets(interop_cluster, names) -> None:
    subscribed, other, group = f"{names}-t", f"{names}-u", f"{names}-g"
    admin = _topics(interop_cluster, subscribed, other)
    kp_admin = _kafka_python_admin(interop_cluster)
    consumer = _member_of(interop_cluster, group, subscribed)
    try:
        consumer.commit(offsets=[TopicPartition(subscribed, 0, 1), TopicPartition(other, 0, 1)], asynchronous=False)
        assert _delete_error(admin, group) == KafkaError.NON_EMPTY_GROUP
        assert _delete_error(admin, f"{names}-never") == KafkaError.GROUP_ID_NOT_FOUND
        deleted = kp_admin.delete_group_offsets(group, [KPTopicPartition(subscribed, 0), KPTopicPartition(other, 0)])
        assert deleted == {KPTopicPartition(subscribed, 0): GroupSubscribedToTopicError, KPTopicPartition(other, 0): NoError}
        assert _committed(kp_admin, group) == {subscribed: 1}
    finally:
        consumer.close()  # leaves the group: it is Empty now
    assert _delete_error(admin, group) is None
    assert _committed(kp_admin, group) == {}
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT_S).valid}
    assert _delete_error(admin, group) == KafkaError.GROUP_ID_NOT_FOUND
    kp_admin.close()


def test_kafka_python_delete_groups_and_offsets_of_an_empty_group(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    _topics(interop_cluster, topic)
    kp_admin = _kafka_python_admin(interop_cluster)
    try:
        kp_admin.alter_group_offsets(group, {KPTopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
        # An Empty group may lose any offset.
        assert kp_admin.delete_group_offsets(group, [KPTopicPartition(topic, 0)]) == {KPTopicPartition(topic, 0): NoError}
        assert _committed(kp_admin, group) == {}
        assert kp_admin.delete_groups([group]) == {group: "OK"}
        assert kp_admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
        with pytest.raises(GroupIdNotFoundError):
            kp_admin.delete_group_offsets(group, [KPTopicPartition(topic, 0)])
    finally:
        kp_admin.close()
