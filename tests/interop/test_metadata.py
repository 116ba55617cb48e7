"""Metadata through every client, on one and three brokers: listing every topic (a null
topics array: the request librdkafka 2.16 sent with 3 bytes after its body, which the broker
refused by closing the connection) and describing one topic and the cluster."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer

PARTITIONS = 3
TIMEOUT_S = 15


def _create(cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    replicas = min(3, len(cluster.brokers))
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, replicas)], operation_timeout=TIMEOUT_S)
    futures[topic].result(TIMEOUT_S)


def _check_listing(cluster, metadata, topic: str) -> None:
    assert topic in metadata.topics, sorted(metadata.topics)
    assert metadata.topics[topic].error is None
    assert sorted(metadata.topics[topic].partitions) == list(range(PARTITIONS))
    assert sorted(metadata.brokers) == sorted(b.broker_id for b in cluster.brokers)


def test_confluent_admin_list_topics_without_a_topic(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    _check_listing(interop_cluster, admin.list_topics(timeout=TIMEOUT_S), topic)


def test_confluent_producer_and_consumer_list_topics_without_a_topic(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    producer = Producer({"bootstrap.servers": interop_cluster.bootstrap_servers})
    _check_listing(interop_cluster, producer.list_topics(timeout=TIMEOUT_S), topic)
    producer.flush(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": interop_cluster.bootstrap_servers, "group.id": f"{names}-g"})
    try:
        _check_listing(interop_cluster, consumer.list_topics(timeout=TIMEOUT_S), topic)
    finally:
        consumer.close()


def test_confluent_list_topics_of_one_topic(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
    assert list(metadata.topics) == [topic]
    _check_listing(interop_cluster, metadata, topic)


def test_kafka_python_list_and_describe_topics(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        # kafka-python 3 returns the Metadata response's topic entry as a dict of its fields.
        assert (described["name"], described["error_code"]) == (topic, 0), described
        assert sorted(p["partition_index"] for p in described["partitions"]) == list(range(PARTITIONS))
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        assert topic in consumer.topics()
        assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
    finally:
        consumer.close()
