"""`make demo`: start the bundled cluster, write and read back a few thousand keyed messages
with confluent-kafka, check them, and say what happened. Exit 0 if every check passed."""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.launcher import LocalCluster

TOPIC = "demo"
PARTITIONS = 3
MESSAGES = 5000
KEYS = 20


def run() -> bool:
    started = time.monotonic()
    with LocalCluster(brokers=1, config={"group.initial.rebalance.delay.ms": "0"}) as cluster:
        bootstrap = cluster.bootstrap_servers
        broker = cluster.brokers[0]
        print(f"started 1 broker: pid {broker.pid} at {broker.address}, data in {broker.data_dir}")

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            future.result(timeout=15)
        print(f"created topic {TOPIC!r} with {PARTITIONS} partitions")

        sent: dict[str, list[int]] = defaultdict(list)
        failures: list[str] = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        for n in range(MESSAGES):
            key = f"key-{n % KEYS}"
            sent[key].append(n)
            producer.produce(TOPIC, key=key, value=str(n), on_delivery=lambda err, msg: failures.append(str(err)) if err else None)
            producer.poll(0)
        producer.flush(30)
        print(f"produced {MESSAGES} messages over {KEYS} keys (acks=all, idempotent): {len(failures)} delivery failures")

        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "demo-group", "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
        consumer.subscribe([TOPIC])
        received: dict[str, list[int]] = defaultdict(list)
        partition_of: dict[str, set[int]] = defaultdict(set)
        per_partition: dict[int, list[int]] = defaultdict(list)
        count = 0
        deadline = time.monotonic() + 30
        while count < MESSAGES and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        failures.append(str(msg.error()))
                    continue
                key = msg.key().decode()
                received[key].append(int(msg.value()))
                partition_of[key].add(msg.partition())
                per_partition[msg.partition()].append(msg.offset())
                count += 1
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        consumer.close()
        # Destroy the clients before the broker goes away, so they do not log the shutdown.
        del producer, admin
        print(f"consumed {count} messages in group 'demo-group'")
        for p in range(PARTITIONS):
            offsets = per_partition.get(p, [])
            span = f"offsets {offsets[0]}..{offsets[-1]}" if offsets else "no messages"
            print(f"  partition {p}: {len(offsets)} messages, {span}, committed {committed[p].offset}")

    all_sent = {n for values in sent.values() for n in values}
    all_received = [n for values in received.values() for n in values]
    lost = len(all_sent - set(all_received))
    duplicated = len(all_received) - len(set(all_received))
    out_of_order = [k for k in sent if received.get(k) != sent[k]]
    split_keys = [k for k, parts in partition_of.items() if len(parts) != 1]
    checks = {
        "no delivery or consumer errors": not failures,
        "nothing lost": lost == 0,
        "nothing duplicated": duplicated == 0,
        "per-key order equals send order": not out_of_order,
        "each key stays in one partition": not split_keys,
    }
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    print(f"lost {lost}, duplicated {duplicated}, keys out of order {len(out_of_order)}; cluster torn down after {time.monotonic() - started:.1f} s")
    return all(checks.values())


def main() -> int:
    ok = run()
    print("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
