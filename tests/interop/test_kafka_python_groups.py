"""kafka-python's producer, consumer and admin calls on topics, groups and offsets against one
and three brokers: send with timestamps, a manually assigned consumer (seek, position,
beginning/end offsets, offsets by time), a group consumer (subscribe, poll, commit, committed,
unsubscribe), and the admin client creating, waiting for and deleting topics, listing and
describing groups, listing, altering and resetting committed offsets, listing partition
offsets."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic, OffsetSpec
from kafka.structs import OffsetAndMetadata

TIMEOUT_S = 15
BASE_TIMESTAMP_MS = 1_700_000_000_000


def _admin(cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)


def _topic_with_records(cluster, admin: KafkaAdminClient, topic: str, count: int) -> None:
    """A one-partition topic holding `count` records, record i stamped BASE + 1000*i ms, one
    batch each (the broker answers ListOffsets by timestamp at batch granularity)."""
    admin.create_topics([NewTopic(topic, 1, min(3, len(cluster.brokers)))], timeout_ms=TIMEOUT_S * 1000)
    admin.wait_for_topics([topic], timeout_ms=TIMEOUT_S * 1000)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        assert producer.partitions_for(topic) == {0}
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), partition=0, timestamp_ms=BASE_TIMESTAMP_MS + 1000 * i).get(TIMEOUT_S)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()


def _group_reads(cluster, topic: str, group: str, count: int) -> list[tuple[int, bytes]]:
    """A group consumer reads `count` records and commits; returns (offset, value) read."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.subscribe([topic])
        read: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(read) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                read += [(r.offset, r.value) for r in records]
        consumer.commit()
        tp = TopicPartition(topic, 0)
        assert consumer.committed(tp) == count
        pending = consumer.commit_async()
        deadline = time.monotonic() + TIMEOUT_S
        while not pending.is_done and time.monotonic() < deadline:
            consumer.poll(timeout_ms=100)  # the consumer's I/O runs inside poll
        assert pending.succeeded(), pending.exception
        consumer.unsubscribe()
        assert consumer.subscription() is None
        return read
    finally:
        consumer.close()


def test_kafka_python_assigned_consumer_seeks_and_reads_offsets(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _admin(interop_cluster)
    try:
        _topic_with_records(interop_cluster, admin, topic, 4)
    finally:
        admin.close()
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=interop_cluster.bootstrap_servers, enable_auto_commit=False)
    try:
        consumer.bootstrap(timeout_ms=TIMEOUT_S * 1000)
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        assert consumer.beginning_offsets([tp]) == {tp: 0} and consumer.end_offsets([tp]) == {tp: 4}
        assert consumer.offsets_for_times({tp: BASE_TIMESTAMP_MS + 1500})[tp].offset == 2
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 4
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
        consumer.seek(tp, 3)
        records: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while not records and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=500).get(tp, [])
        assert [(r.offset, r.value) for r in records] == [(3, b"v3")]
    finally:
        consumer.close()


def test_kafka_python_admin_groups_and_offsets(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    admin = _admin(interop_cluster)
    tp = TopicPartition(topic, 0)
    try:
        _topic_with_records(interop_cluster, admin, topic, 3)
        assert _group_reads(interop_cluster, topic, group, 3) == [(0, b"v0"), (1, b"v1"), (2, b"v2")]
        assert group in {g["group_id"] for g in admin.list_groups()}
        described = admin.describe_groups([group])
        assert group in str(described) and "Empty" in str(described)
        assert admin.list_group_offsets({group: [tp]})[group][tp].offset == 3
        assert admin.alter_group_offsets(group, {tp: OffsetAndMetadata(1, "", -1)})[tp].__name__ == "NoError"
        assert admin.list_group_offsets({group: None})[group][tp].offset == 1
        admin.reset_group_offsets(group, {tp: OffsetSpec.EARLIEST})
        assert admin.list_group_offsets({group: [tp]})[group][tp].offset == 0
        offsets = admin.list_partition_offsets({tp: OffsetSpec.LATEST})
        assert offsets[tp].offset == 3
        assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
        admin.delete_topics([topic], timeout_ms=TIMEOUT_S * 1000)
        deadline = time.monotonic() + TIMEOUT_S
        while topic in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert topic not in admin.list_topics()
    finally:
        admin.close()
