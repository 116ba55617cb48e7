"""describe_cluster through every client, on one and three brokers: every broker, and a
controller id among them (the bundled cluster names a broker, as KRaft clusters do)."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

TIMEOUT_S = 15


def test_confluent_describe_cluster(interop_cluster) -> None:
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    described = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert sorted(n.id for n in described.nodes) == sorted(b.broker_id for b in interop_cluster.brokers)
    assert described.cluster_id


def test_kafka_python_describe_cluster(interop_cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    brokers = sorted(b.broker_id for b in interop_cluster.brokers)
    assert sorted(b["broker_id"] for b in described["brokers"]) == brokers
    assert described["controller_id"] in brokers and described["cluster_id"]


def test_aiokafka_describe_cluster(interop_cluster) -> None:
    async def describe():
        admin = AIOKafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers)
        await admin.start()
        try:
            return await admin.describe_cluster()
        finally:
            await admin.close()

    described = asyncio.run(asyncio.wait_for(describe(), 60))
    assert sorted(b["node_id"] for b in described["brokers"]) == sorted(b.broker_id for b in interop_cluster.brokers)
