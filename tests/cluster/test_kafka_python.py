"""kafka-python 3.0.12 (a client no one here wrote, pure Python, its own protocol code)
against a real broker process: admin operations, acks=all idempotent and acks=1 plain
producers, a group consumer with manual commits, a second group member resuming from the
committed offsets, and messages crossing between kafka-python and confluent-kafka."""

from __future__ import annotations

import datetime
import time
from collections import defaultdict

import pytest
from kio.index import EntityType
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from cluster.launcher import LocalCluster
from cluster.protocol.client import WireClient
from cluster.protocol.codec import payload_class
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import LOG_OVERHEAD, NO_PRODUCER_ID, BatchHeader, parse_header
from tests.cluster.conftest import TEST_BROKER_CONFIG
from tests.cluster.kafka_helpers import Consumed, check_exactly, check_order_per_key, consumer, create_topic, drain, produce_numbered

PARTITIONS = 6
KEYS = 50
IDLE_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(base_dir=tmp_path_factory.mktemp("kafka-python"), config=TEST_BROKER_CONFIG) as shared:
        yield shared


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, client_id="lq-admin")
    try:
        yield client
    finally:
        client.close()


def send_numbered(bootstrap: str, topic: str, numbers: range, **producer_config) -> None:
    """Send "k<key>:<n>" keyed by k<key>; every send must be acknowledged."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="lq-producer", linger_ms=5, **producer_config)
    try:
        futures = [producer.send(topic, key=f"k{n % KEYS}".encode(), value=f"k{n % KEYS}:{n}".encode()) for n in numbers]
        producer.flush(timeout=60)
        for future in futures:
            future.get(timeout=10)  # raises the delivery error, if any
    finally:
        producer.close(timeout=10)


def new_consumer(bootstrap: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="lq-consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )


def poll_until(consumer_: KafkaConsumer, expected: int) -> list[tuple[int, int, str, str]]:
    """(partition, offset, key, value) until `expected` records or IDLE_TIMEOUT_S without any."""
    records: list[tuple[int, int, str, str]] = []
    last_progress = time.monotonic()
    while len(records) < expected and time.monotonic() - last_progress < IDLE_TIMEOUT_S:
        for messages in consumer_.poll(timeout_ms=500).values():
            for m in messages:
                records.append((m.partition, m.offset, m.key.decode(), m.value.decode()))
                last_progress = time.monotonic()
    return records


def stored_batch_headers(cluster: LocalCluster, topic: str, partition: int) -> list[BatchHeader]:
    """The record batch headers the broker serves for one partition, read over the wire."""
    fetch_topic = payload_class(ApiKey.FETCH, 4, "FetchTopic", EntityType.request)
    fetch_partition = payload_class(ApiKey.FETCH, 4, "FetchPartition", EntityType.request)
    broker = cluster.brokers[0]
    with WireClient(broker.host, broker.port) as client:
        response = client.request(
            ApiKey.FETCH, 4, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=64 << 20, isolation_level=0,
            topics=(fetch_topic(topic=topic, partitions=(fetch_partition(partition=partition, fetch_offset=0, partition_max_bytes=64 << 20),)),),
        )
    data = response.responses[0].partitions[0]
    assert data.error_code.value == 0, f"fetch of {topic}-{partition} answered {data.error_code}"
    records = data.records or b""
    headers, pos = [], 0
    while pos < len(records):
        header = parse_header(records, pos)
        headers.append(header)
        pos += LOG_OVERHEAD + header.batch_length
    return headers


def test_admin_creates_describes_and_deletes_a_topic(cluster, admin) -> None:
    admin.create_topics([NewTopic("kp-admin", PARTITIONS, 1)])
    assert "kp-admin" in admin.list_topics()
    (described,) = admin.describe_topics(["kp-admin"])
    assert described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == list(range(PARTITIONS))
    assert all(p["leader_id"] == 0 and p["isr_nodes"] == [0] for p in described["partitions"])
    cluster_info = admin.describe_cluster()
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster_info["brokers"]] == [(0, cluster.brokers[0].host, cluster.brokers[0].port)]
    admin.delete_topics(["kp-admin"])
    assert "kp-admin" not in admin.list_topics()


@pytest.mark.parametrize(
    "producer_config",
    [
        pytest.param({"acks": "all", "enable_idempotence": True}, id="acks-all-idempotent"),
        pytest.param({"acks": 1, "enable_idempotence": False}, id="acks-1"),
        pytest.param({"acks": "all", "enable_idempotence": True, "compression_type": "gzip"}, id="acks-all-gzip"),
    ],
)
def test_produce_and_group_consume_with_manual_commits(cluster, admin, producer_config) -> None:
    topic = "kp-roundtrip-" + "-".join(f"{v}" for v in producer_config.values()).lower()
    group = f"{topic}-group"
    count = 5000
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    send_numbered(cluster.bootstrap_servers, topic, range(count), **producer_config)

    headers = [h for p in range(PARTITIONS) for h in stored_batch_headers(cluster, topic, p)]
    assert sum(h.record_count for h in headers) == count
    if producer_config.get("enable_idempotence"):
        assert all(h.producer_id != NO_PRODUCER_ID and h.base_sequence >= 0 for h in headers), "idempotent producer wrote batches without a producer id"
    else:
        assert all(h.producer_id == NO_PRODUCER_ID for h in headers)

    reader = new_consumer(cluster.bootstrap_servers, group)
    try:
        reader.subscribe([topic])
        records = poll_until(reader, count)
        reader.commit()
    finally:
        reader.close(autocommit=False)
    check_exactly([r[3] for r in records], range(count), KEYS)
    check_order_per_key(records)
    committed = admin.list_group_offsets(group)[group]
    ends = admin.list_partition_offsets({TopicPartition(topic, p): -1 for p in range(PARTITIONS)})
    assert {tp.partition: om.offset for tp, om in committed.items()} == {tp.partition: ot.offset for tp, ot in ends.items()}


def test_a_second_group_member_starts_from_the_committed_offsets(cluster, admin) -> None:
    topic, group = "kp-resume", "kp-resume-group"
    count = 3000
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    send_numbered(cluster.bootstrap_servers, topic, range(count), acks="all")

    first = new_consumer(cluster.bootstrap_servers, group)
    try:
        first.subscribe([topic])
        seen = poll_until(first, count)
        assert len(seen) == count
        # Commit a point in the middle of each partition, not the end: the next member must
        # start exactly there, so re-reading what was consumed but not committed.
        ends: dict[int, int] = defaultdict(int)
        for partition, offset, _, _ in seen:
            ends[partition] = max(ends[partition], offset + 1)
        middle = {p: end // 2 for p, end in ends.items()}
        first.commit({TopicPartition(topic, p): OffsetAndMetadata(offset, "", -1) for p, offset in middle.items()})
    finally:
        first.close(autocommit=False)

    groups = {g["group_id"]: g for g in admin.list_groups()}
    assert group in groups and groups[group]["protocol_type"] == "consumer"

    second = new_consumer(cluster.bootstrap_servers, group)
    try:
        second.subscribe([topic])
        expected = sum(ends[p] - middle[p] for p in ends)
        resumed = poll_until(second, expected)
        description = admin.describe_groups([group])[group]
        assert description["group_state"] == "Stable" and len(description["members"]) == 1
    finally:
        second.close(autocommit=False)
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _, _ in resumed:
        by_partition[partition].append(offset)
    assert {p: offsets for p, offsets in by_partition.items()} == {p: list(range(middle[p], ends[p])) for p in ends if ends[p] > middle[p]}


def test_confluent_kafka_produces_and_kafka_python_consumes(cluster) -> None:
    topic, count = "kp-from-confluent", 4000
    create_topic(cluster.bootstrap_servers, topic, PARTITIONS)
    errors = produce_numbered(cluster.bootstrap_servers, topic, count, KEYS, extra={"acks": "all", "enable.idempotence": True, "compression.codec": "gzip"})
    assert not errors, errors[:5]
    reader = new_consumer(cluster.bootstrap_servers, "kp-from-confluent-group")
    try:
        reader.subscribe([topic])
        records = poll_until(reader, count)
    finally:
        reader.close(autocommit=False)
    check_exactly([r[3] for r in records], range(count), KEYS)
    check_order_per_key(records)


def test_kafka_python_produces_and_confluent_kafka_consumes(cluster, admin) -> None:
    topic, count = "kp-to-confluent", 4000
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    send_numbered(cluster.bootstrap_servers, topic, range(count), acks="all", enable_idempotence=True, compression_type="gzip")
    reader = consumer(cluster.bootstrap_servers, "kp-to-confluent-group", extra={"check.crcs": True})
    consumed = Consumed()
    try:
        reader.subscribe([topic])
        drain(reader, count, consumed)
    finally:
        reader.close()
    check_exactly(consumed.values(), range(count), KEYS)
    check_order_per_key(consumed.records)
