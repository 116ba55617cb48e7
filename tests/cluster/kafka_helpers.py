"""Shared confluent-kafka helpers for the end-to-end tests: numbered keyed messages, draining
consumers, and checks of order, loss and duplication."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BATCHING = {"linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000}


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})], operation_timeout=10)
    for future in futures.values():
        future.result(timeout=15)


def produce_numbered(bootstrap: str, topic: str, count: int, keys: int, extra: dict | None = None, start: int = 0) -> list[str]:
    """Send values "k<key>:<n>" for n in [start, start+count); returns delivery errors."""
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, **BATCHING, **(extra or {})})
    for n in range(start, start + count):
        key = f"k{n % keys}"
        while True:
            try:
                producer.produce(topic, key=key, value=f"{key}:{n}", on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} messages still undelivered after 60 s"
    return errors


@dataclass
class Consumed:
    # (partition, offset, key, value) in the order received
    records: list[tuple[int, int, str, str]] = field(default_factory=list)

    def values(self) -> list[str]:
        return [r[3] for r in self.records]


def consumer(bootstrap: str, group: str, extra: dict | None = None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **(extra or {}),
        }
    )


def drain(c: Consumer, expected: int, out: Consumed, commit_every: int = 10_000, idle_timeout_s: float = 20.0) -> None:
    """Poll until `expected` records have arrived (or nothing new for idle_timeout_s),
    committing synchronously every `commit_every` records and at the end."""
    since_commit = 0
    last_progress = time.monotonic()
    while len(out.records) < expected and time.monotonic() - last_progress < idle_timeout_s:
        for msg in c.consume(num_messages=10_000, timeout=0.5):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            out.records.append((msg.partition(), msg.offset(), msg.key().decode(), msg.value().decode()))
            since_commit += 1
            last_progress = time.monotonic()
        if since_commit >= commit_every:
            c.commit(asynchronous=False)
            since_commit = 0
    if since_commit:
        c.commit(asynchronous=False)


def check_order_per_key(records: list[tuple[int, int, str, str]]) -> None:
    """Each key lives in one partition, and its offsets rise with its send sequence."""
    by_key: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for partition, offset, key, value in records:
        by_key[key].append((partition, offset, int(value.split(":")[1])))
    for key, entries in by_key.items():
        partitions = {p for p, _, _ in entries}
        assert len(partitions) == 1, f"key {key} spread over partitions {partitions}"
        by_offset = sorted(entries, key=lambda e: e[1])
        sequence = [n for _, _, n in by_offset]
        assert sequence == sorted(sequence), f"key {key}: offsets out of send order"


def check_exactly(records_values: list[str], expected_numbers: range, keys: int) -> None:
    expected = {f"k{n % keys}:{n}" for n in expected_numbers}
    seen = set(records_values)
    duplicates = len(records_values) - len(seen)
    lost = expected - seen
    extra = seen - expected
    assert not lost and not duplicates and not extra, f"{len(lost)} lost, {duplicates} duplicated, {len(extra)} unexpected"


def committed_offsets(c: Consumer, topic: str, partitions: int) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}


def end_offsets(c: Consumer, topic: str, partitions: int) -> dict[int, int]:
    return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}


@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def partition_view(bootstrap: str, topic: str, partition: int) -> PartitionView | None:
    """The partition's leader, replicas and ISR as the cluster's Metadata reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        metadata = admin.list_topics(topic, timeout=5)
    except Exception:  # noqa: BLE001 - a cluster mid-failover may not answer; the caller polls
        return None
    topic_md = metadata.topics.get(topic)
    if topic_md is None or topic_md.error is not None or partition not in topic_md.partitions:
        return None
    p = topic_md.partitions[partition]
    return PartitionView(p.leader, tuple(p.replicas), tuple(p.isrs))


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll `predicate` until it returns something truthy (returned); fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s} s")
        time.sleep(interval_s)


def group_coordinator(cluster, group: str) -> int | None:
    """The group's coordinator as a live broker answers FindCoordinator, asked directly (not
    through librdkafka, whose admin client can abort on an internal assertion mid-failover)."""
    from cluster.protocol.client import ProtocolClientError, WireClient
    from cluster.protocol.versions import ApiKey

    for broker in cluster.brokers:
        if not cluster.is_alive(broker.broker_id):
            continue
        try:
            with WireClient(broker.host, broker.port, timeout_s=5) as client:
                answer = client.request(ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0)
        except (OSError, ProtocolClientError):
            continue
        if answer.error_code.value == 0:
            return int(answer.node_id)
    return None
