"""CreatePartitions through every client, on one and three brokers: the controller adds the
partitions (placed, with leaders), metadata shows them, and a producer and a consumer use the
new ones; growing to fewer partitions is INVALID_PARTITIONS."""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions as AIONewPartitions
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KPNewPartitions

TIMEOUT_S = 15


def _create(cluster, topic: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, min(3, len(cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    return admin


def _partitions(admin: AdminClient, topic: str, expected: int | None = None) -> dict[int, int]:
    """partition -> leader. With `expected`, waits until as many are listed: the broker that
    answered CreatePartitions shows them at once, another may apply them a few ms later."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        listed = {i: p.leader for i, p in admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions.items()}
        if expected is None or len(listed) >= expected or time.monotonic() > deadline:
            return listed
        time.sleep(0.05)


def test_confluent_create_partitions_then_produce_to_and_consume_from_the_new_one(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _create(interop_cluster, topic)
    admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    leaders = _partitions(admin, topic, 3)
    assert sorted(leaders) == [0, 1, 2] and all(leader >= 0 for leader in leaders.values())
    producer = Producer({"bootstrap.servers": interop_cluster.bootstrap_servers, "acks": "all"})
    errors: list[object] = []
    producer.produce(topic, b"in-2", partition=2, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert errors == [None]
    consumer = Consumer({"bootstrap.servers": interop_cluster.bootstrap_servers, "group.id": f"{names}-g", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 2, 0)])
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None and (message.partition(), message.value()) == (2, b"in-2")
    finally:
        consumer.close()


def test_confluent_create_partitions_to_a_smaller_count_is_invalid_partitions(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _create(interop_cluster, topic)
    admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    error = admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=TIMEOUT_S)[topic].exception(TIMEOUT_S)
    assert error is not None and error.args[0].code() == 37, error  # INVALID_PARTITIONS
    assert sorted(_partitions(admin, topic)) == [0, 1]


def test_kafka_python_create_partitions(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _create(interop_cluster, topic)
    client = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        client.create_partitions({topic: KPNewPartitions(total_count=4)})
    finally:
        client.close()
    assert sorted(_partitions(admin, topic, 4)) == [0, 1, 2, 3]


def test_aiokafka_create_partitions(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _create(interop_cluster, topic)

    async def grow():
        client = AIOKafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers)
        await client.start()
        try:
            await client.create_partitions({topic: AIONewPartitions(total_count=2)})
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(grow(), 60))
    assert sorted(_partitions(admin, topic, 2)) == [0, 1]
