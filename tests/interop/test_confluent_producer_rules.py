"""Kafka's producer-side rules as confluent-kafka meets them, on one and three brokers: an
idempotent producer gets its own producer id (InitProducerId without a transactional id) and
writes each record once, in order, and DescribeProducers (kafka-python) lists both producers; a user topic named "__..." is an ordinary topic, while
appends to Kafka's internal topics are refused."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition as KPTopicPartition

TIMEOUT_S = 15


def _read_all(cluster, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(expected, 1.0) if m.error() is None]
        return values
    finally:
        consumer.close()


def _produce(cluster, topic: str, values: list[bytes], **config) -> list[object]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **config})
    errors: list[object] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: errors.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return errors


def test_idempotent_confluent_producers_write_each_record_once_in_order(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, min(3, len(interop_cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    first = [f"a{i}".encode() for i in range(200)]
    second = [f"b{i}".encode() for i in range(200)]
    config = {"enable.idempotence": True, "max.in.flight.requests.per.connection": 5, "linger.ms": 1, "batch.num.messages": 7}
    assert _produce(interop_cluster, topic, first, **config) == [None] * len(first)
    assert _produce(interop_cluster, topic, second, **config) == [None] * len(second)
    assert _read_all(interop_cluster, topic, 400) == first + second
    # Two producers, two producer ids (InitProducerId gives each a new one), each at its last
    # sequence on the partition, as kafka-python's describe_producers reads them from the leader.
    admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        (state,) = admin.describe_producers([KPTopicPartition(topic, 0)]).values()
    finally:
        admin.close()
    producers = state.active_producers
    assert len({p.producer_id for p in producers}) == 2
    assert [(p.producer_epoch, p.last_sequence, p.current_transaction_start_offset) for p in producers] == [(0, 199, -1)] * 2
    assert all(p.last_timestamp > 1_700_000_000_000 for p in producers)


def test_a_double_underscore_user_topic_is_created_written_and_read(interop_cluster, names) -> None:
    topic = f"__{names}"
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, min(3, len(interop_cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    values = [f"v{i}".encode() for i in range(20)]
    assert _produce(interop_cluster, topic, values) == [None] * len(values)
    assert _read_all(interop_cluster, topic, len(values)) == values


def test_producing_to_the_offsets_topic_is_an_invalid_topic_error(interop_cluster, names) -> None:
    # A group commit makes the coordinator create __consumer_offsets first.
    consumer = Consumer({"bootstrap.servers": interop_cluster.bootstrap_servers, "group.id": f"{names}-g"})
    try:
        topic = f"{names}-t"
        admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    errors = _produce(interop_cluster, "__consumer_offsets", [b"forged"], **{"message.send.max.retries": 0})
    assert len(errors) == 1 and isinstance(errors[0], KafkaError)
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors[0]


def test_a_user_topic_named_with_two_underscores_is_not_internal_and_can_be_deleted(interop_cluster, names) -> None:
    # Kafka's Topic.isInternal names only __consumer_offsets and __transaction_state: Metadata
    # reports any other "__" topic as a user topic, and DeleteTopics deletes it.
    topic = f"__{names}"
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert described.is_internal is False
    admin.delete_topics([topic], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics
