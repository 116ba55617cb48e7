"""Replicated throughput and failover time of the bundled cluster.

    python -m bench.bench_replication [--messages 1000000] [--size 100] [--partitions 4] [--kills 10]

1. Throughput: 3 brokers, replication factor 3, min.insync.replicas=2, acks=all, N messages
   of S bytes, produced and consumed with confluent-kafka; in the same run the same load,
   with the same producer settings, against librdkafka's mock cluster with 3 brokers. Two
   producer settings, each against both: plain (librdkafka's defaults: unbounded requests
   in flight) and idempotent (at most 5 requests in flight per connection). Prints msg/s
   and the ratio per setting (issue #3 goal: produce >= 0.5x the mock).
2. Failover: a producer sends continuously (acks=all, idempotent) to one partition; the
   partition's leader is SIGKILLed `--kills` times (restarted, and back in the ISR, between
   kills). For each kill it measures the time from SIGKILL to the first acknowledgement of a
   message sent after the kill, and prints p50 and max against the goal
   broker.session.timeout.ms + 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.bench_broker import PRODUCER, TOPIC, Figures, _consume, _produce
from cluster.launcher import LocalCluster

SESSION_TIMEOUT_MS = 3000
CLUSTER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "10000",
}


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 3)]).values():
        future.result(timeout=30)


WARM_UP_TOPIC = "warm-up"


def _warm_up(producer: Producer) -> float:
    """One acknowledged message before the clock starts: connections are up and an
    idempotent producer has its producer id. (librdkafka asks for the id only once it is
    connected to a broker by node id; asked too early it retries on a 500 ms timer, which
    cost the bundled cluster a third of a 1.5 s run and the in-process mock nothing.)"""
    started = time.perf_counter()
    producer.produce(WARM_UP_TOPIC, value=b"warm-up")
    if producer.flush(30):
        raise RuntimeError("the warm-up message was not acknowledged within 30 s")
    return time.perf_counter() - started


def bench_bundled(messages: int, payload: bytes, partitions: int, idempotent: bool) -> tuple[Figures, float, float]:
    with LocalCluster(brokers=3, config=CLUSTER_CONFIG) as cluster:
        bootstrap = cluster.bootstrap_servers
        processes = [psutil.Process(b.pid) for b in cluster.brokers]
        _create_topic(bootstrap, TOPIC, partitions)
        cpu_before = sum(p.cpu_times().user + p.cpu_times().system for p in processes)
        _create_topic(bootstrap, WARM_UP_TOPIC, 1)
        producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER, "enable.idempotence": idempotent})
        warm_up_s = _warm_up(producer)
        produce_rate = _produce(producer, messages, payload)
        del producer
        consume_rate, consumed = _consume(bootstrap, partitions, messages)
        cpu_s = sum(p.cpu_times().user + p.cpu_times().system for p in processes) - cpu_before
        return Figures(produce_rate, consume_rate, consumed), cpu_s / messages * 1e6, warm_up_s


def bench_mock(messages: int, payload: bytes, idempotent: bool) -> tuple[Figures, int, float]:
    producer = Producer({"test.mock.num.brokers": 3, **PRODUCER, "enable.idempotence": idempotent})
    brokers = producer.list_topics(timeout=10).brokers
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    topic = producer.list_topics(TOPIC, timeout=10).topics[TOPIC]
    partitions = len(topic.partitions)
    replicas = len(topic.partitions[0].replicas)
    warm_up_s = _warm_up(producer)
    produce_rate = _produce(producer, messages, payload)
    consume_rate, consumed = _consume(bootstrap, partitions, messages)
    del producer
    return Figures(produce_rate, consume_rate, consumed), replicas, warm_up_s


def _leader(admin: AdminClient, topic: str) -> tuple[int, tuple[int, ...]]:
    try:
        p = admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
        return p.leader, tuple(p.isrs)
    except Exception:  # noqa: BLE001 - mid-failover; poll again
        return -1, ()


def bench_failover(kills: int) -> list[float]:
    topic = "failover"
    with LocalCluster(brokers=3, config=CLUSTER_CONFIG) as cluster:
        bootstrap = cluster.bootstrap_servers
        _create_topic(bootstrap, topic, 1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        lock = threading.Lock()
        sent = [0]
        acked_sequence: list[tuple[int, float]] = []  # (send sequence number, ack time)
        stop = threading.Event()
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1,
                             "message.timeout.ms": 120_000})

        def on_delivery(err, msg) -> None:
            if err is None:
                with lock:
                    acked_sequence.append((int(msg.value()), time.monotonic()))

        def run() -> None:
            while not stop.is_set():
                with lock:
                    n = sent[0]
                    sent[0] += 1
                producer.produce(topic, value=str(n).encode(), partition=0, on_delivery=on_delivery)
                producer.poll(0.002)
            producer.flush(60)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        times: list[float] = []
        try:
            for kill in range(kills):
                while True:
                    leader, isr = _leader(admin, topic)
                    if leader >= 0 and len(isr) == 3:
                        break
                    time.sleep(0.1)
                time.sleep(0.5)
                with lock:
                    first_after = sent[0]
                killed_at = time.monotonic()
                cluster.kill(leader)
                deadline = killed_at + 120
                took = None
                while took is None and time.monotonic() < deadline:
                    with lock:
                        later = [t for n, t in acked_sequence if n >= first_after]
                    if later:
                        took = min(later) - killed_at
                    time.sleep(0.01)
                if took is None:
                    raise RuntimeError(f"kill {kill + 1}: no acknowledgement within 120 s of killing broker {leader}")
                times.append(took)
                print(f"  kill {kill + 1}: broker {leader} killed, produce resumed after {took:.2f} s")
                cluster.start(leader)
        finally:
            stop.set()
            thread.join(90)
        return times


def _load() -> str:
    """The 1, 5 and 15 minute load averages: CPU figures inflate with contention."""
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    payload = b"x" * args.size
    print(f"load at start: {_load()}; {args.messages} messages of {args.size} B, acks=all, 3 brokers; bundled RF 3 min ISR 2; "
          f"{psutil.cpu_count()} cores", flush=True)
    print(f"{'':34}{'produce msg/s':>16}{'consume msg/s':>16}{'consumed':>12}")
    all_consumed = True
    for idempotent in (False, True):
        setting = "idempotent" if idempotent else "plain"
        bundled, cpu_us, bundled_warm_up_s = bench_bundled(args.messages, payload, args.partitions, idempotent)
        mock, mock_replicas, mock_warm_up_s = bench_mock(args.messages, payload, idempotent)
        all_consumed &= bundled.consumed == args.messages
        print(f"{'bundled, 3 brokers, ' + setting:34}{bundled.produce_msgs_per_s:>16,.0f}{bundled.consume_msgs_per_s:>16,.0f}"
              f"{bundled.consumed:>12,}")
        print(f"{f'librdkafka mock, 3 (RF {mock_replicas}), ' + setting:34}{mock.produce_msgs_per_s:>16,.0f}"
              f"{mock.consume_msgs_per_s:>16,.0f}{mock.consumed:>12,}")
        ratio = bundled.produce_msgs_per_s / mock.produce_msgs_per_s if mock.produce_msgs_per_s else float("nan")
        print(f"  {setting}: produce ratio bundled/mock {ratio:.2f} (goal >= 0.5); "
              f"bundled CPU over the 3 brokers {cpu_us:.2f} µs per message (produce + replicate + consume); "
              f"first message acknowledged (untimed warm-up) after {bundled_warm_up_s:.2f} s bundled, {mock_warm_up_s:.2f} s mock")
    print(f"load at end of the throughput runs: {_load()}", flush=True)
    if args.kills:
        print(f"failover: {args.kills} SIGKILLs of the leader, broker.session.timeout.ms={SESSION_TIMEOUT_MS}")
        times = bench_failover(args.kills)
        goal = SESSION_TIMEOUT_MS / 1000 + 2
        print(f"failover time p50 {statistics.median(times):.2f} s, max {max(times):.2f} s (goal <= {goal:.1f} s)")
    return 0 if all_consumed else 1


if __name__ == "__main__":
    raise SystemExit(main())
