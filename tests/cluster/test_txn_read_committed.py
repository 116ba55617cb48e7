"""The log side of transactions on three broker processes: transactional batches and
WriteTxnMarkers sent over the raw protocol (the coordinator's part is another module's), read
by unmodified read_committed consumers (confluent-kafka, kafka-python, aiokafka), across a
SIGKILL of the partition leader and a restart that recovers the state from its files (the
segments' `.txnindex` and the producer-state snapshot of the last roll, the active segment's
index rebuilt from its batches).

Kafka's rules checked: a read_committed consumer sees the records of committed transactions
and of no aborted one, and stops at the last stable offset (the first offset of an open
transaction) even though later records are committed; read_uncommitted sees everything below
the high watermark; followers keep the same state, so a new leader serves the same, and the
restarted broker answers read_committed Fetch (records and aborted transactions) as the
leader did before it."""

from __future__ import annotations

import asyncio
import datetime
import os
import time

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.launcher import LocalCluster
from cluster.protocol.client import WireClient
from cluster.protocol.codec import build, payload_class
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import ATTR_TRANSACTIONAL, split_batches
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


def _fetch_read_committed(client: WireClient) -> tuple[list[int], list[tuple[int, int]]]:
    """One read_committed Fetch from offset 0 (all of this small log below the LSO): the base
    offsets of the batches returned and the aborted transactions listed with them."""
    partition_cls = payload_class(ApiKey.FETCH, 12, "FetchPartition", EntityType.request)
    topic_cls = payload_class(ApiKey.FETCH, 12, "FetchTopic", EntityType.request)
    body = client.request(ApiKey.FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 24, isolation_level=1,
                          session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                          topics=(build(topic_cls, topic=TOPIC, partitions=(build(
                              partition_cls, partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=1 << 20),)),))
    answer = body.responses[0].partitions[0]
    assert answer.error_code is ErrorCode.none, answer.error_code
    offsets = [header.base_offset for header, _ in split_batches(answer.records or b"")]
    return offsets, sorted((int(a.producer_id), int(a.first_offset)) for a in answer.aborted_transactions)


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
    # Small segments: the log spans several, each with its .txnindex and a snapshot at its base.
    create_topic(bootstrap, TOPIC, 1, config={"segment.bytes": "700"}, replication_factor=3)
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
        rounds = 8  # 7..30: B aborts a transaction around a plain record, eight times
        for i in range(rounds):
            assert _produce(client, b"x%d" % i, b, 1 + i) is ErrorCode.none
            assert _produce(client, b"q%d" % i) is ErrorCode.none
            assert _marker(client, b, committed=False) is ErrorCode.none
    committed = ["a0", "a1"]
    assert _confluent(bootstrap, committed=True) == committed
    later = [v for i in range(rounds) for v in (f"x{i}", f"q{i}")]
    assert _confluent(bootstrap, committed=False) == ["a0", "b0", "a1", "c0", "p0", *later]
    assert _kafka_python_read_committed(bootstrap) == committed
    assert _aiokafka_read_committed(bootstrap) == committed

    # SIGKILL the leader: a follower that replicated the markers leads and serves the same.
    cluster.kill(leader)
    new_leader = _leader(bootstrap, not_this=leader)
    assert _confluent(bootstrap, committed=True) == committed
    with _client(cluster, new_leader) as client:
        assert _marker(client, c, committed=True) is ErrorCode.none  # 31: C commits on the new leader
        fetched = _fetch_read_committed(client)
    all_committed = ["a0", "a1", "c0", "p0", *(f"q{i}" for i in range(rounds))]
    assert _confluent(bootstrap, committed=True) == all_committed
    assert fetched[0][-1] == 31 and len(fetched[1]) == 1 + rounds and fetched[1][0] == (b, 1)

    # Restart the killed broker and leave it alone: it recovered the state from its files.
    cluster.start(leader)
    wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) is not None and set(v.isr) == {0, 1, 2}, 60, f"broker {leader} back in the ISR")
    for other in {0, 1, 2} - {leader}:
        cluster.stop(other)
    wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) is not None and v.leader == leader, 60, f"broker {leader} leading alone")
    with _client(cluster, leader) as client:
        assert _fetch_read_committed(client) == fetched
    assert _confluent(bootstrap, committed=True) == all_committed
    assert _kafka_python_read_committed(bootstrap) == all_committed
    # It opened from the snapshot of its last roll, not from its first batch, and keeps an
    # aborted-transaction index per segment.
    with open(cluster.brokers[leader].log_path, errors="replace") as broker_log:
        opened = [line for line in broker_log if f"{TOPIC}-0: producer state from" in line]
    assert opened and "from the snapshot at" in opened[-1], opened
    names = os.listdir(f"{cluster.brokers[leader].data_dir}/{TOPIC}-0")
    segments = sorted(n[:20] for n in names if n.endswith(".log"))
    assert len(segments) >= 3 and segments == sorted(n[:20] for n in names if n.endswith(".txnindex"))
    assert any(n.endswith(".snapshot") for n in names)
