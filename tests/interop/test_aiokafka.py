"""aiokafka's admin client and producer/consumer against one and three brokers: topic
metadata, configs (describe, alter), produce and a group consumer's read and commit."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

TIMEOUT_S = 15


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_aiokafka_admin_creates_lists_describes_and_alters_a_topic(interop_cluster, names) -> None:
    topic = f"{names}-t"

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 2, min(3, len(interop_cluster.brokers)))])
            listed = await admin.list_topics()
            described = await admin.describe_topics([topic])
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "3600000"})])
            # Another broker may apply the committed change a few ms later than the answer.
            for _ in range(100):
                configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
                if any(c[0] == "retention.ms" and c[3] == 1 for c in configs[0].resources[0][4]):
                    break
                await asyncio.sleep(0.05)
            return listed, described, configs
        finally:
            await admin.close()

    listed, described, configs = _run(scenario())
    assert topic in listed
    (entry,) = described
    assert (entry["topic"], entry["error_code"]) == (topic, 0)
    assert sorted(p["partition"] for p in entry["partitions"]) == [0, 1]
    (response,) = configs
    (resource,) = response.resources
    seen = {c[0]: (c[1], c[3]) for c in resource[4]}  # name -> (value, source)
    assert seen["retention.ms"] == ("3600000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert seen["min.insync.replicas"] == ("1", 5)  # DEFAULT_CONFIG


def test_aiokafka_produce_and_group_consume_with_commit(interop_cluster, names) -> None:
    topic, group, count = f"{names}-t", f"{names}-g", 50

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 3, min(3, len(interop_cluster.brokers)))])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=interop_cluster.bootstrap_servers, acks="all")
        await producer.start()
        try:
            for i in range(count):
                await producer.send_and_wait(topic, str(i).encode(), key=str(i % 7).encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=interop_cluster.bootstrap_servers, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            values: list[int] = []
            while len(values) < count:
                batches = await consumer.getmany(timeout_ms=1000)
                values += [int(m.value) for records in batches.values() for m in records]
            await consumer.commit()
            committed = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
            ends = await consumer.end_offsets(list(consumer.assignment()))
            return values, committed, {tp.partition: offset for tp, offset in ends.items()}
        finally:
            await consumer.stop()

    values, committed, ends = _run(scenario())
    assert sorted(values) == list(range(count))
    assert committed == ends and sum(ends.values()) == count


BASE_TIMESTAMP_MS = 1_700_000_000_000


def test_aiokafka_consumer_seeks_and_admin_lists_groups_offsets_and_deletes_the_topic(interop_cluster, names) -> None:
    from aiokafka.structs import TopicPartition

    topic, group = f"{names}-t", f"{names}-g"
    tp = TopicPartition(topic, 0)

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, min(3, len(interop_cluster.brokers)))])
            producer = AIOKafkaProducer(bootstrap_servers=interop_cluster.bootstrap_servers, acks="all")
            await producer.start()
            try:
                assert await producer.partitions_for(topic) == {0}
                # One batch per record: the broker answers ListOffsets by timestamp per batch.
                for i in range(3):
                    await (await producer.send(topic, f"v{i}".encode(), partition=0, timestamp_ms=BASE_TIMESTAMP_MS + 1000 * i))
                batch = producer.create_batch()
                batch.append(key=None, value=b"v3", timestamp=BASE_TIMESTAMP_MS + 3000)
                await (await producer.send_batch(batch, topic, partition=0))
                await producer.flush()
            finally:
                await producer.stop()
            consumer = AIOKafkaConsumer(bootstrap_servers=interop_cluster.bootstrap_servers, group_id=group, enable_auto_commit=False)
            await consumer.start()
            try:
                assert topic in await consumer.topics()
                consumer.assign([tp])
                assert await consumer.beginning_offsets([tp]) == {tp: 0}
                # The assignment brought the topic into the consumer's metadata cache.
                assert consumer.partitions_for_topic(topic) == {0}
                by_time = (await consumer.offsets_for_times({tp: BASE_TIMESTAMP_MS + 1500}))[tp].offset
                await consumer.seek_to_end(tp)
                end = await consumer.position(tp)
                await consumer.seek_to_beginning(tp)
                first = await consumer.getone()
                consumer.seek(tp, 3)
                fourth = await consumer.getone()
                await consumer.commit({tp: 2})
                await consumer.seek_to_committed(tp)
                after_committed = await consumer.position(tp)
                consumer.unsubscribe()
            finally:
                await consumer.stop()
            coordinator = await admin.find_coordinator(group)
            groups = await admin.list_consumer_groups()
            described = await admin.describe_consumer_groups([group])
            offsets = await admin.list_consumer_group_offsets(group)
            await admin.delete_topics([topic])
            for _ in range(100):
                if topic not in await admin.list_topics():
                    break
                await asyncio.sleep(0.05)
            remaining = await admin.list_topics()
            return by_time, end, first, fourth, after_committed, coordinator, groups, described, offsets, remaining
        finally:
            await admin.close()

    by_time, end, first, fourth, after_committed, coordinator, groups, described, offsets, remaining = _run(scenario())
    assert (by_time, end, after_committed) == (2, 4, 2)
    assert (first.offset, first.value, fourth.offset, fourth.value) == (0, b"v0", 3, b"v3")
    assert coordinator in {b.broker_id for b in interop_cluster.brokers}
    assert group in {g[0] for g in groups}
    assert group in str(described)
    assert {p: o.offset for p, o in offsets.items()} == {tp: 2}
    assert topic not in remaining
