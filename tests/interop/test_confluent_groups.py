"""confluent-kafka's everyday consumer and group calls, and its admin calls on groups, offsets
and topics, against one and three brokers: produce with timestamps, a group consumer that
consumes, commits, seeks and reads its position; watermarks and offsets by time; the admin
client listing and describing the group, listing and altering its committed offsets, listing
offsets (earliest, latest, by timestamp), describing and deleting topics."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

TIMEOUT_S = 15
BASE_TIMESTAMP_MS = 1_700_000_000_000


def _topic_with_records(cluster, topic: str, count: int) -> AdminClient:
    """A one-partition topic holding `count` records, record i < count-1 stamped BASE + 1000*i ms."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, min(3, len(cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    errors: list[object] = []
    for i in range(count - 1):
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=BASE_TIMESTAMP_MS + 1000 * i,
                         on_delivery=lambda err, msg: errors.append(err))
        # One batch per record (records sharing a batch: test_list_offsets_by_time.py).
        producer.flush(TIMEOUT_S)
    producer.poll(0)
    last = count - 1
    # produce_batch takes no timestamps: the last record is stamped now, later than the others.
    enqueued = producer.produce_batch(topic, [{"value": f"v{last}".encode(), "partition": 0, "callback": lambda err, msg: errors.append(err)}])
    assert enqueued == 1
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None] * count
    assert producer.cluster_id(timeout=TIMEOUT_S) == admin.cluster_id(timeout=TIMEOUT_S) == "logquake-cluster"  # the default cluster.id
    return admin


def _consumer(cluster, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **extra})


def test_confluent_consumer_subscribes_consumes_commits_seeks_and_reads_positions(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    _topic_with_records(interop_cluster, topic, 5)
    consumer = _consumer(interop_cluster, group)
    tp = TopicPartition(topic, 0)
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(5, 1.0) if m.error() is None]
        assert values == [f"v{i}".encode() for i in range(5)]
        assert consumer.assignment() == [tp]
        assert [p.offset for p in consumer.position([tp])] == [5]
        consumer.commit(asynchronous=False)
        assert [p.offset for p in consumer.committed([tp], timeout=TIMEOUT_S)] == [5]
        assert consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S) == (0, 5)
        assert [p.offset for p in consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TIMESTAMP_MS + 2500)], timeout=TIMEOUT_S)] == [3]
        consumer.seek(TopicPartition(topic, 0, 1))
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None and (message.offset(), message.value()) == (1, b"v1")
        assert consumer.cluster_id(timeout=TIMEOUT_S) == "logquake-cluster"  # the broker default cluster.id
        consumer.unsubscribe()
        # The revocation is served by the next polls.
        deadline = time.monotonic() + TIMEOUT_S
        while consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_confluent_consumer_incremental_assign_and_unassign(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _topic_with_records(interop_cluster, topic, 3)
    consumer = _consumer(interop_cluster, f"{names}-g")
    try:
        consumer.incremental_assign([TopicPartition(topic, 0, 2)])
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None and (message.offset(), message.value()) == (2, b"v2")
        consumer.incremental_unassign([TopicPartition(topic, 0)])
        assert consumer.assignment() == []
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.offset() == 0
        consumer.unassign()
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_confluent_admin_lists_describes_and_alters_group_offsets(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    admin = _topic_with_records(interop_cluster, topic, 4)
    consumer = _consumer(interop_cluster, group)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        seen = 0
        while seen < 4 and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(4, 1.0) if m.error() is None)
        consumer.commit(asynchronous=False)
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert group in {g.group_id for g in listed.valid}
        assert group in {g.id for g in admin.list_groups(timeout=TIMEOUT_S)}
        description = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        assert description.group_id == group and len(description.members) == 1
        assert description.members[0].assignment.topic_partitions == [TopicPartition(topic, 0)]
    finally:
        consumer.close()
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    offsets = admin.list_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    assert [(p.partition, p.offset) for p in offsets.topic_partitions] == [(0, 4)]
    # The group is empty once its only member left: its offsets may be altered.
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])],
                                                 request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    assert [(p.partition, p.offset, p.error) for p in altered.topic_partitions] == [(0, 1, None)]
    offsets = admin.list_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    assert [p.offset for p in offsets.topic_partitions] == [1]
    resumed = _consumer(interop_cluster, group)
    try:
        resumed.subscribe([topic])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = resumed.poll(1.0)
        assert message is not None and message.error() is None and message.offset() == 1
    finally:
        resumed.close()


def test_confluent_admin_list_offsets_earliest_latest_and_by_timestamp(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 5)
    tp = TopicPartition(topic, 0)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(), "at": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 3000),
             "after": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 1500)}
    offsets = {name: admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)[tp].result(TIMEOUT_S).offset for name, spec in specs.items()}
    assert offsets == {"earliest": 0, "latest": 5, "at": 3, "after": 2}


def test_confluent_admin_describes_and_deletes_topics(interop_cluster, names) -> None:
    from confluent_kafka import TopicCollection

    topic = f"{names}-t"
    admin = _topic_with_records(interop_cluster, topic, 1)
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert described.name == topic and [p.id for p in described.partitions] == [0]
    assert len(described.partitions[0].replicas) == min(3, len(interop_cluster.brokers))
    admin.delete_topics([topic], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while topic in admin.list_topics(timeout=TIMEOUT_S).topics and time.monotonic() < deadline:
        time.sleep(0.05)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics
