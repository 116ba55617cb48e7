"""The bundled cluster with every link through a proxy (cluster.proxy_routing) against the same
cluster with direct links, in one process: what routing costs when no fault is on.

Both clusters: 3 brokers, a topic of 3 partitions with 3 replicas, min ISR 2; confluent-kafka
produces with acks=all and idempotence (the safe configuration of the link-fault runs):

- round trip of one acknowledged message (p50, p99 over `--trips` messages, one at a time);
- produce throughput of `--messages` 100-byte messages (msg/s), timed after a warm-up message;
- the broker processes' CPU per message over that produce (their user+system time).

The routed cluster's proxies run as a thread of this process (as in `logquake test`), sharing
the GIL with the producer's callbacks; the reference is the direct cluster measured right
before it. Prints one line per figure and the routed/direct ratios.

    .venv/bin/python -m bench.bench_proxy_routing [--messages 100000] [--trips 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cluster.launcher import LocalCluster  # noqa: E402
from cluster.proxy_routing import ProxyRouting  # noqa: E402

TOPIC = "bench"
CONFIG = {"min.insync.replicas": "2", "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}


def broker_cpu_s(cluster: LocalCluster) -> float:
    total = 0.0
    for broker in cluster.brokers:
        times = psutil.Process(broker.pid).cpu_times()
        total += times.user + times.system
    return total


def measure(cluster: LocalCluster, messages: int, trips: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, **PRODUCER})
    producer.produce(TOPIC, b"warm-up")
    assert producer.flush(60) == 0
    round_trips_ms = []
    for index in range(trips):
        began = time.perf_counter()
        producer.produce(TOPIC, b"%d" % index)
        assert producer.flush(60) == 0
        round_trips_ms.append((time.perf_counter() - began) * 1000)
    payload = b"x" * 100
    cpu_before = broker_cpu_s(cluster)
    began = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(TOPIC, payload)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    elapsed_s = time.perf_counter() - began
    cpu_s = broker_cpu_s(cluster) - cpu_before
    round_trips_ms.sort()
    return {"rtt_p50_ms": statistics.median(round_trips_ms),
            "rtt_p99_ms": round_trips_ms[min(len(round_trips_ms) - 1, int(len(round_trips_ms) * 0.99))],
            "msg_per_s": messages / elapsed_s, "broker_cpu_us_per_msg": cpu_s / messages * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--trips", type=int, default=300)
    args = parser.parse_args(argv)
    results = {}
    for name, proxies in (("direct", None), ("routed", ProxyRouting(seed=1))):
        with tempfile.TemporaryDirectory(prefix=f"bench-routing-{name}-") as base:
            with LocalCluster(brokers=3, base_dir=base, config=CONFIG, seed=7, proxies=proxies) as cluster:
                results[name] = measure(cluster, args.messages, args.trips)
        print(f"{name:7s} " + "  ".join(f"{key} {value:,.2f}" for key, value in results[name].items()), flush=True)
    direct, routed = results["direct"], results["routed"]
    print("routed/direct: " + "  ".join(f"{key} {routed[key] / direct[key]:.2f}x" for key in direct), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
