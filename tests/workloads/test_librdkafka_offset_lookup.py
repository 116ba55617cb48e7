"""The librdkafka 2.16 behaviour the queue client works around by assigning explicit start
offsets (workloads/clients/confluent.py, QueueClient._start_offsets; README, "Invalid verdicts
on the safe cluster"), pinned against the real broker with confluent-kafka's own debug log.

A partition assigned at a logical offset (BEGINNING, or STORED with nothing committed) gets
its start from a ListOffsets request. When that partition's assignment changes before the
answer arrives, the answer is outdated, and rd_kafka_toppar_handle_Offset answers an outdated
reply with rd_kafka_toppar_offset_retry(): fetch state forced to OFFSET_QUERY and the offset
query timer armed, whatever the partition's state is by then. 0.5 s later the timer sends a
new ListOffsets for the old logical offset, and its answer moves the fetch position there:

- re-assigned at an explicit offset and already read from there, the partition is read again
  from its beginning (the re-read from offset 0 of the invalid safe-cluster runs);
- removed from the assignment, it is fetched anyway, unassigned.

The window is wide because the lookup queues behind a long-poll Fetch on the leader's
connection (one request at a time per connection, as on a Kafka broker): up to
fetch.wait.max.ms (500 ms). If a librdkafka upgrade makes these tests fail, the workaround
may no longer be needed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 15
RECORDS = 3
# Long enough for the first assign's fetch start to send its ListOffsets, far shorter than the
# long-poll Fetch it queues behind.
LOOKUP_OUT_S = 0.02
# The offset query timer is 500 ms; a second more for its ListOffsets and the fetch after it.
WATCH_S = 1.5
# The lookup's answer beats the second assign only if the parked Fetch ends within
# LOOKUP_OUT_S (about 4% of tries): a few tries make a false failure negligible.
TRIES = 3


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def topic(cluster, request) -> Iterator[str]:
    """A two-partition topic with RECORDS records in each partition."""
    name = f"lookup-{request.node.name[-40:].replace('[', '-').replace(']', '')}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=TIMEOUT_S)[name].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for partition in (0, 1):
        for i in range(RECORDS):
            producer.produce(name, str(i).encode(), partition=partition)
    assert producer.flush(TIMEOUT_S) == 0
    yield name


def _consumer(cluster, try_no: int) -> tuple[Consumer, _Lines]:
    lines = _Lines()
    logger = logging.getLogger(f"{__name__}.rdkafka.{try_no}.{time.monotonic_ns()}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(lines)
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap_servers,
        "group.id": "lookup-readers",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "debug": "topic,fetch,cgrp,consumer",
        "logger": logger,
    })
    return consumer, lines


def _read_partition_0_to_its_end(consumer: Consumer, topic: str) -> None:
    """Leaves the fetcher long-polling the leader (partition 0 at its end), and partition 1
    known from metadata but never fetched, so its BEGINNING needs a ListOffsets."""
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
            return
    raise AssertionError("partition 0 never reached its end")


def _offsets_read(consumer: Consumer, partition: int, seconds: float) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is None and msg.partition() == partition:
            out.append(msg.offset())
    return out


def test_an_outdated_lookup_rewinds_a_partition_reassigned_at_an_explicit_offset(cluster, topic):
    tries = []
    for try_no in range(TRIES):
        consumer, lines = _consumer(cluster, try_no)
        try:
            _read_partition_0_to_its_end(consumer, topic)
            consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
            time.sleep(LOOKUP_OUT_S)
            consumer.assign([TopicPartition(topic, 1, 1)])
            read = _offsets_read(consumer, 1, WATCH_S)
        finally:
            consumer.close()
        tries.append((read, lines.lines))
        if 0 in read:
            break
    read, log_lines = tries[-1]
    # Assigned at offset 1, the partition is read from its beginning: nobody asked for that.
    # (Typically [1, 2, 0, 1, 2]: from 1 at once, from 0 after the timer.)
    assert 0 in read and read[-RECORDS:] == [0, 1, 2], [t[0] for t in tries]
    assert any(f"{topic} [1]: outdated offset response" in line for line in log_lines)
    assert any(f"Topic {topic} [1]: timed offset query for offset BEGINNING" in line for line in log_lines)


def test_an_outdated_lookup_makes_a_removed_partition_fetch_unassigned(cluster, topic):
    tries = []
    for try_no in range(TRIES):
        consumer, lines = _consumer(cluster, try_no)
        try:
            _read_partition_0_to_its_end(consumer, topic)
            consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
            time.sleep(LOOKUP_OUT_S)
            consumer.assign([TopicPartition(topic, 0, RECORDS)])
            read = _offsets_read(consumer, 1, WATCH_S)
            assignment = [(tp.topic, tp.partition) for tp in consumer.assignment()]
        finally:
            consumer.close()
        # librdkafka's log of what partition 1 did after it left the assignment
        after_removal = []
        for line in lines.lines:
            if f"Removing {topic} [1] from assignment" in line or after_removal:
                after_removal.append(line)
        tries.append((read, assignment, after_removal))
        if any("fetch queue" in line and f"{topic} [1]" in line for line in after_removal):
            break
    read, assignment, after_removal = tries[-1]
    assert assignment == [(topic, 0)]
    assert read == []  # its fetch queue is no longer forwarded to the application
    assert any(f"Partition {topic} [1] changed fetch state stopped -> offset-query" in line for line in after_removal)
    assert any(f"Partition {topic} [1] changed fetch state offset-wait -> active" in line for line in after_removal)
    # and records of the unassigned partition were fetched from the broker
    assert any(f"on {topic} [1] fetch queue" in line for line in after_removal), [len(t[2]) for t in tries]
