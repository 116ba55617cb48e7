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
