"""Real clients for the unsafe-switch scenarios, each step a blocking call that reports what
a history needs: confluent-kafka's transactional producer with the offset of every delivered
record, and a read_committed reader that polls up to the partition's last stable offset."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

CALL_TIMEOUT_S = 30.0


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 0})
    producer.init_transactions(CALL_TIMEOUT_S)
    return producer


def send(producer: Producer, topic: str, partition: int, value: int) -> int:
    """Produce one record and wait for its delivery: its offset (a delivery error raises)."""
    reports: list[object] = []
    producer.produce(topic, value=str(value).encode(), partition=partition, on_delivery=lambda err, msg: reports.append((err, msg)))
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while not reports and time.monotonic() < deadline:
        producer.poll(0.1)
    assert reports, f"no delivery report for {value} within {CALL_TIMEOUT_S} s"
    err, msg = reports[0]  # type: ignore[misc]
    assert err is None, f"delivery of {value} failed: {err}"
    return int(msg.offset())  # type: ignore[attr-defined]


def stable_end(bootstrap: str, topic: str, partition: int, isolation: IsolationLevel = IsolationLevel.READ_COMMITTED) -> int:
    """The partition's last stable offset: ListOffsets LATEST with read_committed (with
    read_uncommitted: the high watermark)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = KafkaTopicPartition(topic, partition)
    return int(admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=isolation,
                                  request_timeout=CALL_TIMEOUT_S)[tp].result(CALL_TIMEOUT_S).offset)


class Reader:
    """A read_committed consumer assigned to one partition from offset 0 (no group)."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                                   "isolation.level": "read_committed", "enable.auto.commit": False,
                                   "enable.partition.eof": True})
        self._consumer.assign([KafkaTopicPartition(topic, partition, 0)])

    def poll_to_stable_end(self) -> list[tuple[int, int]]:
        """(offset, value) of every record delivered until the consumer reports the end of
        the partition at or past the last stable offset the broker answers now: all a
        read_committed consumer may read at this moment, whatever the broker's LSO rule."""
        target = stable_end(self.bootstrap, self.topic, self.partition)
        out: list[tuple[int, int]] = []
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = self._consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= target:
                        return out
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append((int(msg.offset()), int(msg.value().decode())))
        raise AssertionError(f"{self.topic}-{self.partition}: the reader did not reach offset {target} in {CALL_TIMEOUT_S} s")

    def close(self) -> None:
        self._consumer.close()
