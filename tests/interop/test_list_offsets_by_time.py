"""ListOffsets by timestamp answers at record granularity, as Kafka does: the first record whose
own timestamp reaches the target, with that record's timestamp, even when the records share
one batch (uncompressed, and gzip, which the broker can read), on one and three brokers."""

from __future__ import annotations

import glob
import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from cluster.storage.batch import split_batches

TIMEOUT_S = 15
BASE_TIMESTAMP_MS = 1_700_000_000_000
RECORDS = 5


def _batches_on_disk(cluster, topic: str) -> list[tuple[int, int]]:
    """(base offset, record count) of each batch in one replica's log of `topic`-0."""
    for directory in glob.glob(os.path.join(cluster.base_dir, "broker-*", f"{topic}-0")):
        out = []
        for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
            with open(path, "rb") as file:
                out += [(h.base_offset, h.record_count) for h, _ in split_batches(file.read())]
        if out:
            return out
    return []


def _wait_for_leader(producer: Producer, topic: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        partitions = producer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions
        if 0 in partitions and partitions[0].leader >= 0 and partitions[0].error is None:
            return
        time.sleep(0.1)
    raise AssertionError(f"{topic}-0 has no leader in the producer's metadata after {TIMEOUT_S} s")


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_offsets_for_times_inside_one_batch(interop_cluster, names, compression):
    topic = f"{names}-{compression}"
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, min(3, len(interop_cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    # A linger longer than the test and one flush: the five records go out as one batch. (With
    # 500 ms, a make test under load once saw five one-record batches: librdkafka sends what is
    # queued once the oldest message has waited the linger, so a stalled produce loop splits it.)
    # The producer learns the new partition's leader first, and is idempotent: a make test saw
    # batches of 1, 1 and 3 on three brokers, as a Produce refused while the leader was still
    # being elected is retried, and a plain producer re-batches retried messages where an
    # idempotent one resends its batches whole.
    producer = Producer({"bootstrap.servers": interop_cluster.bootstrap_servers, "acks": "all", "linger.ms": 60_000,
                         "compression.type": compression, "enable.idempotence": True})
    _wait_for_leader(producer, topic)
    errors: list[object] = []
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=BASE_TIMESTAMP_MS + 1000 * i,
                         on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None] * RECORDS
    assert _batches_on_disk(interop_cluster, topic) == [(0, RECORDS)]

    consumer = Consumer({"bootstrap.servers": interop_cluster.bootstrap_servers, "group.id": names})
    try:
        for target, expected in [(BASE_TIMESTAMP_MS, 0), (BASE_TIMESTAMP_MS + 1, 1), (BASE_TIMESTAMP_MS + 2500, 3),
                                 (BASE_TIMESTAMP_MS + 4000, 4), (BASE_TIMESTAMP_MS + 4001, -1)]:
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=TIMEOUT_S)
            assert found.error is None and found.offset == expected, (target, found)
    finally:
        consumer.close()
    # The admin client also shows the timestamp answered: the record's own, not the batch's max.
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 1500)}, request_timeout=TIMEOUT_S)[tp].result(TIMEOUT_S)
    assert (info.offset, info.timestamp) == (2, BASE_TIMESTAMP_MS + 2000)
