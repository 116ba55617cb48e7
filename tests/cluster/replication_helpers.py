"""Helpers for the multi-broker end-to-end tests: a producer that sends continuously from its
own thread and records every acknowledgement and error, a consumer that reads a topic to its
end, and cluster settings that make failover take seconds."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# Failure detection in seconds rather than Kafka's 9 s / 30 s, so each scenario stays short.
FAST_FAILOVER = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "controller.quorum.request.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "3",
}


@dataclass
class Ack:
    value: str
    partition: int
    offset: int
    time_s: float


@dataclass
class ProducerLog:
    acks: list[Ack] = field(default_factory=list)
    errors: list[tuple[str, int, float]] = field(default_factory=list)  # (value, error code, time)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked_values(self) -> set[str]:
        with self.lock:
            return {a.value for a in self.acks}

    def acks_after(self, t: float) -> list[Ack]:
        with self.lock:
            return [a for a in self.acks if a.time_s > t]


class ContinuousProducer:
    """Sends "p<partition>:<n>" to one partition (or round robin) until stopped."""

    def __init__(self, bootstrap: str, topic: str, config: dict, partition: int = 0, interval_s: float = 0.005) -> None:
        self.topic = topic
        self.partition = partition
        self.interval_s = interval_s
        self.log = ProducerLog()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **config})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)
        self.sent = 0
        # A fatal client error (e.g. an idempotent producer finding its sequence numbers
        # broken by lost data) ends production; it is kept for the test to inspect.
        self.fatal: KafkaException | None = None

    def _on_delivery(self, err, msg) -> None:
        value = msg.value().decode()
        now = time.monotonic()
        with self.log.lock:
            if err is None:
                self.log.acks.append(Ack(value, msg.partition(), msg.offset(), now))
            else:
                self.log.errors.append((value, err.code(), now))

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                try:
                    self._producer.produce(self.topic, value=f"p{self.partition}:{n}", partition=self.partition, on_delivery=self._on_delivery)
                    n += 1
                except BufferError:
                    pass
                self._producer.poll(self.interval_s)
        except KafkaException as error:
            self.fatal = error
        self.sent = n

    def __enter__(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def stop(self, flush_s: float = 60.0) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            try:
                self._producer.flush(flush_s)
            except (KafkaException, SystemError) as error:
                self.fatal = self.fatal or KafkaException(str(error))

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_partition(bootstrap: str, topic: str, partition: int, idle_s: float = 5.0, extra: dict | None = None) -> list[tuple[int, str]]:
    """(offset, value) of every record in the partition, read from offset 0 to the end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": True, **(extra or {})})
    out: list[tuple[int, str]] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        last_progress = time.monotonic()
        while time.monotonic() - last_progress < idle_s:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    # At the end: done unless more arrives within a short grace period.
                    if time.monotonic() - last_progress > 1.0:
                        break
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append((msg.offset(), msg.value().decode()))
            last_progress = time.monotonic()
    finally:
        c.close()
    return out


def produce_directly(host: str, port: int, topic: str, partition: int, value: bytes, acks: int, timeout_ms: int) -> str:
    """One Produce straight to one broker over the raw protocol, ignoring metadata (as a
    client with a stale view would); returns the partition's error name ("none" = success)
    or "connection lost"."""
    import datetime

    from cluster.protocol.client import ProtocolClientError, WireClient
    from cluster.protocol.codec import payload_class
    from cluster.protocol.records import Record, build_batch
    from cluster.protocol.versions import ApiKey
    from kio.index import EntityType

    topic_cls = payload_class(ApiKey.PRODUCE, 9, "TopicProduceData", EntityType.request)
    partition_cls = payload_class(ApiKey.PRODUCE, 9, "PartitionProduceData", EntityType.request)
    batch = build_batch([Record(None, value)], base_offset=0, timestamp_ms=int(time.time() * 1000))
    try:
        with WireClient(host, port, timeout_s=timeout_ms / 1000 + 10) as client:
            response = client.request(ApiKey.PRODUCE, 9, transactional_id=None, acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms),
                                      topic_data=(topic_cls(name=topic, partition_data=(partition_cls(index=partition, records=batch),)),))
    except (OSError, ProtocolClientError):
        return "connection lost"
    return response.responses[0].partition_responses[0].error_code.name
