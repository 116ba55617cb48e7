"""Throughput of the bundled broker against librdkafka's built-in mock cluster.

    python -m bench.bench_broker [--messages 1000000] [--size 100] [--partitions 4]

Produces and consumes N messages with confluent-kafka against (a) a 1-broker LocalCluster
and (b) the mock cluster the confluent-kafka wheel ships (`test.mock.num.brokers`), in the
same run, and prints messages/s for both and their ratio. The mock keeps only the newest
part of each log, so its consume figure is measured over whatever it still holds (the
count is printed). Client and broker share the machine's cores: the figures are lower
bounds, usually client-bound.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.launcher import LocalCluster

TOPIC = "bench"
PRODUCER = {"linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000, "acks": "all"}
CONSUMER = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608, "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10}


@dataclass
class Figures:
    produce_msgs_per_s: float
    consume_msgs_per_s: float
    consumed: int


def _create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(timeout=30)


def _produce(producer: Producer, messages: int, payload: bytes) -> float:
    started = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(TOPIC, value=payload)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} messages undelivered")
    return messages / (time.perf_counter() - started)


def _consume(bootstrap: str, partitions: int, expected: int) -> tuple[float, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, **CONSUMER})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
    count = 0
    first = last = None
    idle_since = time.perf_counter()
    try:
        while count < expected and time.perf_counter() - idle_since < 3.0:
            batch = consumer.consume(num_messages=100_000, timeout=0.5)
            for msg in batch:
                if msg.error():
                    if msg.error().code() in (KafkaError._PARTITION_EOF, KafkaError.OFFSET_OUT_OF_RANGE):
                        continue
                    raise RuntimeError(str(msg.error()))
                count += 1
            if batch:
                now = time.perf_counter()
                first = first or now
                last = now
                idle_since = now
    finally:
        consumer.close()
    if not count or first is None or last is None or last == first:
        return 0.0, count
    return count / (last - first), count


def bench_bundled(messages: int, payload: bytes, partitions: int) -> tuple[Figures, float]:
    with LocalCluster(brokers=1, config={"group.initial.rebalance.delay.ms": "0"}) as cluster:
        bootstrap = cluster.bootstrap_servers
        broker = psutil.Process(cluster.brokers[0].pid)
        _create_topic(bootstrap, partitions)
        cpu_before = broker.cpu_times()
        producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
        produce_rate = _produce(producer, messages, payload)
        del producer
        consume_rate, consumed = _consume(bootstrap, partitions, messages)
        cpu_after = broker.cpu_times()
        cpu_s = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
        return Figures(produce_rate, consume_rate, consumed), cpu_s / (2 * messages) * 1e6


def bench_mock(messages: int, payload: bytes, partitions: int) -> Figures:
    # The mock cluster lives inside this producer's librdkafka instance; its brokers listen
    # on loopback, and Metadata tells other clients where.
    producer = Producer({"test.mock.num.brokers": 1, **PRODUCER})
    brokers = producer.list_topics(timeout=10).brokers
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    # The mock does not serve CreateTopics; asking for the topic's metadata auto-creates it
    # with the mock's default partition count (4).
    mock_partitions = len(producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)
    if mock_partitions != partitions:
        print(f"note: the mock created {mock_partitions} partitions, the bundled broker {partitions}")
    partitions = mock_partitions
    produce_rate = _produce(producer, messages, payload)
    consume_rate, consumed = _consume(bootstrap, partitions, messages)
    del producer
    return Figures(produce_rate, consume_rate, consumed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    payload = b"x" * args.size
    bundled, cpu_us_per_msg = bench_bundled(args.messages, payload, args.partitions)
    mock = bench_mock(args.messages, payload, args.partitions)
    print(f"{args.messages} messages of {args.size} B, {args.partitions} partitions, confluent-kafka on {psutil.cpu_count()} cores")
    print(f"{'':24}{'produce msg/s':>16}{'consume msg/s':>16}{'consumed':>12}")
    print(f"{'bundled broker':24}{bundled.produce_msgs_per_s:>16,.0f}{bundled.consume_msgs_per_s:>16,.0f}{bundled.consumed:>12,}")
    print(f"{'librdkafka mock':24}{mock.produce_msgs_per_s:>16,.0f}{mock.consume_msgs_per_s:>16,.0f}{mock.consumed:>12,}")
    produce_ratio = bundled.produce_msgs_per_s / mock.produce_msgs_per_s if mock.produce_msgs_per_s else float("nan")
    consume_ratio = bundled.consume_msgs_per_s / mock.consume_msgs_per_s if mock.consume_msgs_per_s else float("nan")
    print(f"{'ratio bundled/mock':24}{produce_ratio:>16.2f}{consume_ratio:>16.2f}")
    print(f"bundled broker CPU: {cpu_us_per_msg:.2f} µs per message (produce + consume)")
    if bundled.consumed != args.messages:
        print(f"WARNING: the bundled broker returned {bundled.consumed} of {args.messages} messages")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
