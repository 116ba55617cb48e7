"""DeleteRecords through every client, on one and three brokers: the leader's log start moves
to the requested offset (-1: the high watermark), earliest offsets and consumers start there,
and an offset beyond the high watermark is OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.structs import TopicPartition as AIOTopicPartition
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaAdminClient, TopicPartition as KPTopicPartition

TIMEOUT_S = 15


def _topic_with_records(cluster, topic: str, count: int) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, min(3, len(cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    return admin


def _earliest(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=TIMEOUT_S)[tp].result(TIMEOUT_S).offset


def test_confluent_delete_records_moves_the_log_start(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 10)
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=TIMEOUT_S)
    (result,) = [f.result(TIMEOUT_S) for f in deleted.values()]
    assert result.low_watermark == 4
    assert _earliest(admin, topic) == 4
    consumer = Consumer({"bootstrap.servers": interop_cluster.bootstrap_servers, "group.id": f"{names}-g", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(30):
            message = consumer.poll(1.0)
            if message is not None:
                break
        assert message is not None and message.error() is None and (message.offset(), message.value()) == (4, b"v4")
    finally:
        consumer.close()
    # -1: up to the high watermark.
    (result,) = [f.result(TIMEOUT_S) for f in admin.delete_records([TopicPartition(topic, 0, -1)], request_timeout=TIMEOUT_S).values()]
    assert result.low_watermark == 10 and _earliest(admin, topic) == 10


def test_confluent_delete_records_beyond_the_high_watermark_is_offset_out_of_range(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 3)
    (future,) = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=TIMEOUT_S).values()
    error = future.exception(TIMEOUT_S)
    assert isinstance(error, KafkaException) and error.args[0].code() == 1, error  # OFFSET_OUT_OF_RANGE
    assert _earliest(admin, topic) == 0


def test_kafka_python_delete_records(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 5)
    client = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        result = client.delete_records({KPTopicPartition(topic, 0): 2}, timeout_ms=TIMEOUT_S * 1000)
    finally:
        client.close()
    assert result[KPTopicPartition(topic, 0)] == {"partition_index": 0, "low_watermark": 2, "error_code": 0}
    assert _earliest(admin, topic) == 2


def test_aiokafka_delete_records(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 5)

    async def delete():
        client = AIOKafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
        await client.start()
        try:
            return await client.delete_records({AIOTopicPartition(topic, 0): RecordsToDelete(before_offset=3)})
        finally:
            await client.close()

    result = asyncio.run(asyncio.wait_for(delete(), 60))
    assert result == {AIOTopicPartition(topic, 0): 3}
    assert _earliest(admin, topic) == 3



def test_followers_take_the_leaders_log_start_so_a_new_leader_keeps_the_deletion(tmp_path) -> None:
    from cluster.launcher import LocalCluster
    from tests.cluster.conftest import TEST_BROKER_CONFIG

    config = {**TEST_BROKER_CONFIG, "replica.fetch.wait.max.ms": "100"}
    with LocalCluster(brokers=3, base_dir=tmp_path, config=config) as cluster:
        topic = "deleted-then-failed-over"
        admin = _topic_with_records(cluster, topic, 6)
        old_leader = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions[0].leader
        (result,) = [f.result(TIMEOUT_S) for f in admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=TIMEOUT_S).values()]
        assert result.low_watermark == 5
        # Followers learn the new log start from their next fetch responses: an idle
        # partition's long poll ends every replica.fetch.wait.max.ms (100 ms here).
        time.sleep(2)
        cluster.stop(old_leader)  # controlled shutdown: an ISR follower takes over
        survivor = AdminClient({"bootstrap.servers": next(b.address for b in cluster.brokers if b.broker_id != old_leader)})
        deadline = time.monotonic() + TIMEOUT_S
        leader = old_leader
        while leader in (-1, old_leader) and time.monotonic() < deadline:
            leader = survivor.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions[0].leader
            time.sleep(0.05)
        assert leader not in (-1, old_leader)
        assert _earliest(survivor, topic) == 5


def test_delete_records_answers_once_every_replica_moved_its_log_start(interop_cluster, names) -> None:
    """Kafka answers DeleteRecords when the low watermark (every live replica's log start)
    reaches the offset: by then each replica's log start offset is on its disk."""
    import glob
    import os

    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 10)
    for offset in (3, 7):
        (result,) = [f.result(TIMEOUT_S) for f in admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=TIMEOUT_S).values()]
        assert result.low_watermark == offset
        starts = []
        for directory in glob.glob(os.path.join(interop_cluster.base_dir, "broker-*", f"{topic}-0")):
            with open(os.path.join(directory, "log-start-offset")) as file:
                starts.append(int(file.read()))
        assert starts == [offset] * len(interop_cluster.brokers), starts
