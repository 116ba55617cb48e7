"""The log side of transactions on three broker processes: transactional batches and
WriteTxnMarkers sent over the raw protocol (the coordinator's part is another module's), read
by unmodified read_committed consumers (confluent-kafka, kafka-python, aiokafka), across a
SIGKILL of the partition leader and a restart that rebuilds the state from the log.

Kafka's rules checked: a read_committed consumer sees the records of committed transactions
and of no aborted one, and stops at the last stable offset (the first offset of an open
transaction) even though later records are committed; read_uncommitted sees everything below
the high watermark; followers keep the same state, so a new leader serves the same."""

from __future__ import annotations

import asyncio
import datetime
import time

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.launcher import LocalCluster
from cluster.protocol.client import WireClient
from cluster.protocol.codec import payload_class
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import ATTR_TRANSACTIONAL
from tests.cluster.kafka_helpers import create_topic, partition_view, wait_for
from tests.cluster.replication_helpers import FAST_FAILOVER, read_partition

TOPIC = "txlog"


def _client(cluster: LocalCluster, broker_id: int) -> WireClient:
    broker = cluster.brokers[broker_id]
    return WireClient(broker.host, broker.port, timeout_s=40)


def _producer_id(client: WireClient) -> int:
    body = client.request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                          producer_id=-1, producer_epoch=-1)
    assert body.error_code is ErrorCode.none
    return int(body.producer_id)


def _produce(client: WireClient, value: bytes, producer_id: int = -1, sequence: int = -1) -> ErrorCode:
    transactional = producer_id >= 0
    batch = build_batch([Record(None, value)], base_offset=0, timestamp_ms=int(time.time() * 1000),
                        attributes=ATTR_TRANSACTIONAL if transactional else 0, producer_id=producer_id,
                        producer_epoch=0 if transactional else -1, base_sequence=sequence)
    topic_cls = payload_class(ApiKey.PRODUCE, 9, "TopicProduceData", EntityType.request)
    partition_cls = payload_class(ApiKey.PRODUCE, 9, "PartitionProduceData", EntityType.request)
    body = client.request(ApiKey.PRODUCE, 9, transactional_id="raw-txn" if transactional else None, acks=-1,
                          timeout=datetime.timedelta(seconds=30),
                          topic_data=(topic_cls(name=TOPIC, partition_data=(partition_cls(index=0, records=batch),)),))
    return body.responses[0].partition_responses[0].error_code


def _marker(client: WireClient, producer_id: int, committed: bool, coordinator_epoch: int = 0) -> ErrorCode:
    marker_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, 1, "WritableTxnMarker", EntityType.request)
    topic_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, 1, "WritableTxnMarkerTopic", EntityType.request)
    body = client.request(ApiKey.WRITE_TXN_MARKERS, 1, markers=(marker_cls(
        producer_id=producer_id, producer_epoch=0, transaction_result=committed, coordinator_epoch=coordinator_epoch,
        topics=(topic_cls(name=TOPIC, partition_indexes=(0,)),)),))
    return body.markers[0].topics[0].partitions[0].error_code


def _leader(bootstrap: str, not_this: int = -1) -> int:
    view = wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) and v.leader >= 0 and v.leader != not_this and v, 60,
                    f"a leader for {TOPIC}-0 other than {not_this}")
    return view.leader


def _kafka_python_read_committed(bootstrap: str) -> list[str]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    try:
        consumer.assign([KTopicPartition(TOPIC, 0)])
        consumer.seek(KTopicPartition(TOPIC, 0), 0)
        out: list[str] = []
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 4:
            batch = consumer.poll(timeout_ms=500)
            for records in batch.values():
                out.extend(r.value.decode() for r in records)
                idle_since = time.monotonic()
        return out
    finally:
        consumer.close()


def _aiokafka_read_committed(bootstrap: str) -> list[str]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def read() -> list[str]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = ATopicPartition(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            out: list[str] = []
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 4:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    out.extend(r.value.decode() for r in records)
                    idle_since = time.monotonic()
            return out
        finally:
            await consumer.stop()

    return asyncio.run(read())


def _confluent(bootstrap: str, committed: bool) -> list[str]:
    extra = {"isolation.level": "read_committed" if committed else "read_uncommitted"}
    return [v for _, v in read_partition(bootstrap, TOPIC, 0, idle_s=4.0, extra=extra)]


def test_read_committed_across_leader_kill_and_restart(make_cluster) -> None:
    # Raw transactional batches with no coordinator: KIP-890's verification would refuse them.
    cluster = make_cluster(brokers=3, config={**FAST_FAILOVER, "default.replication.factor": "3", "min.insync.replicas": "2",
                                              "transaction.partition.verification.enable": "false"})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1, replication_factor=3)
    wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) is not None and len(v.isr) == 3, 60, "ISR of 3")
    leader = _leader(bootstrap)
    with _client(cluster, leader) as client:
        a, b, c = (_producer_id(client) for _ in range(3))
        assert _produce(client, b"a0", a, 0) is ErrorCode.none  # 0
        assert _produce(client, b"b0", b, 0) is ErrorCode.none  # 1
        assert _produce(client, b"a1", a, 1) is ErrorCode.none  # 2
        assert _marker(client, a, committed=True) is ErrorCode.none  # 3
        assert _marker(client, b, committed=False) is ErrorCode.none  # 4
        assert _produce(client, b"c0", c, 0) is ErrorCode.none  # 5: C's transaction stays open
        assert _produce(client, b"p0") is ErrorCode.none  # 6: committed, but past the LSO
        assert _marker(client, a, committed=True, coordinator_epoch=-1) is ErrorCode.transaction_coordinator_fenced
    committed = ["a0", "a1"]
    assert _confluent(bootstrap, committed=True) == committed
    assert _confluent(bootstrap, committed=False) == ["a0", "b0", "a1", "c0", "p0"]
    assert _kafka_python_read_committed(bootstrap) == committed
    assert _aiokafka_read_committed(bootstrap) == committed

    # SIGKILL the leader: a follower that replicated the markers leads and serves the same.
    cluster.kill(leader)
    new_leader = _leader(bootstrap, not_this=leader)
    assert _confluent(bootstrap, committed=True) == committed
    with _client(cluster, new_leader) as client:
        assert _marker(client, c, committed=True) is ErrorCode.none  # 7: C commits on the new leader
    assert _confluent(bootstrap, committed=True) == ["a0", "a1", "c0", "p0"]

    # Restart the killed broker and leave it alone: it rebuilt the state from its log.
    cluster.start(leader)
    wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) is not None and set(v.isr) == {0, 1, 2}, 60, f"broker {leader} back in the ISR")
    for other in {0, 1, 2} - {leader}:
        cluster.stop(other)
    wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) is not None and v.leader == leader, 60, f"broker {leader} leading alone")
    assert _confluent(bootstrap, committed=True) == ["a0", "a1", "c0", "p0"]
    assert _kafka_python_read_committed(bootstrap) == ["a0", "a1", "c0", "p0"]
