"""Transactional throughput and commit latency of the bundled cluster against librdkafka's
mock cluster (issue #14, Performance).

    python -m bench.bench_txn [--transactions 1000] [--records 10] [--size 100] [--partitions 4] [--producers 1,4]
                              [--trace-dir DIR]

Each producer (confluent-kafka, its own transactional.id, so idempotent and acks=all) runs
`--transactions` transactions back to back: begin, `--records` records of `--size` bytes
spread round-robin over the topic's partitions, commit. Against (a) a 3-broker LocalCluster,
topic and __transaction_state with replication factor 3 and min ISR 2, and (b) the mock
cluster the confluent-kafka wheel ships (`test.mock.num.brokers=3`, replication factor 3;
the mock runs a transaction coordinator), in the same run, with the same producer settings
(librdkafka's defaults besides the transactional id). One untimed transaction per producer
first: init_transactions and the coordinator lookup are not part of the figure.

Prints transactions/s over all producers, the latency of commit_transaction() (it flushes
the transaction's records, then EndTxn; p50 and p99 over every transaction), the ratio
bundled/mock (goal >= 0.5x the mock's transactions/s), and the broker CPU per transaction of
the bundled cluster. Afterwards a read_committed consumer reads each topic to its end and
must find exactly the committed records (the figure counts only transactions that did
commit). Clients and brokers share the machine's cores: figures are lower bounds.

`--trace-dir DIR` (with `--producers 1`): the brokers record their requests' timelines there
(cluster/runtime/request_trace.py) and the run ends with where a transaction's time went
(bench/txn_trace.py): markers and CompleteCommit, Produce, the client, EndTxn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench import txn_trace
from cluster.launcher import LocalCluster
from cluster.runtime.request_trace import ENV as TRACE_ENV

TOPIC = "txn-bench"  # one topic per producer count: txn-bench-<n>
CLUSTER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}
TIMEOUT_S = 60.0


@dataclass
class Run:
    producers: int
    transactions: int  # committed, over all producers
    elapsed_s: float
    commit_latencies_s: list[float] = field(default_factory=list)
    read_committed: int = 0  # records a read_committed consumer found afterwards
    warm_up_records: int = 0  # of the untimed first transactions, also in the topic

    @property
    def txn_per_s(self) -> float:
        return self.transactions / self.elapsed_s if self.elapsed_s > 0 else float("nan")

    def latency_ms(self, quantile: float) -> float:
        ordered = sorted(self.commit_latencies_s)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000


def _topic(producers: int) -> str:
    return f"{TOPIC}-{producers}"


def _create_topics(bootstrap: str, producer_counts: list[int], partitions: int, replication_factor: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(_topic(n), partitions, replication_factor) for n in producer_counts]
    for future in admin.create_topics(topics).values():
        future.result(timeout=TIMEOUT_S)


def _producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _one_transaction(producer: Producer, topic: str, records: int, payload: bytes, partitions: int, first: int) -> float:
    """Begin, produce, commit; returns the commit's latency in seconds."""
    producer.begin_transaction()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, partition=(first + i) % partitions)
                break
            except BufferError:
                producer.poll(0.001)
    started = time.perf_counter()
    producer.commit_transaction(TIMEOUT_S)
    return time.perf_counter() - started


def _run_producers(bootstrap: str, producers: int, transactions: int, records: int, payload: bytes,
                   partitions: int, label: str) -> Run:
    topic = _topic(producers)
    clients = [_producer(bootstrap, f"bench-{label}-{producers}-{i}") for i in range(producers)]
    for i, client in enumerate(clients):  # warm-up: connections, coordinator, first AddPartitionsToTxn
        _one_transaction(client, topic, records, payload, partitions, i)
    latencies: list[list[float]] = [[] for _ in clients]
    errors: list[BaseException] = []
    start = threading.Barrier(producers + 1)

    def work(i: int) -> None:
        start.wait()
        try:
            for n in range(transactions):
                latencies[i].append(_one_transaction(clients[i], topic, records, payload, partitions, n + i))
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(producers)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{label}: a producer failed: {errors[0]!r}")
    run = Run(producers, producers * transactions, elapsed, [s for per in latencies for s in per],
              warm_up_records=producers * records)
    for client in clients:
        client.flush(TIMEOUT_S)
    run.read_committed = _read_committed(bootstrap, topic, partitions) - run.warm_up_records
    return run


def _read_committed(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed consumer finds from the beginning to the end of every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-txn-verify", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        count = 0
        deadline = time.monotonic() + TIMEOUT_S
        while len(at_end) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                count += 1
        return count
    finally:
        consumer.close()


def _cpu_s(processes: list[psutil.Process]) -> tuple[float, float]:
    """(user, system) CPU seconds of `processes`; system time is mostly the sockets."""
    times = [p.cpu_times() for p in processes]
    return sum(t.user for t in times), sum(t.system for t in times)


def bench_bundled(producer_counts: list[int], transactions: int, records: int, payload: bytes,
                  partitions: int) -> list[tuple[Run, float, float]]:
    """Runs and the brokers' user and system CPU seconds per transaction (over the 3 brokers)."""
    out = []
    with LocalCluster(brokers=3, config=CLUSTER_CONFIG) as cluster:
        bootstrap = cluster.bootstrap_servers
        processes = [psutil.Process(b.pid) for b in cluster.brokers]
        _create_topics(bootstrap, producer_counts, partitions, 3)
        for producers in producer_counts:
            user_before, system_before = _cpu_s(processes)
            run = _run_producers(bootstrap, producers, transactions, records, payload, partitions, "bundled")
            user_s, system_s = _cpu_s(processes)  # includes the warm-up and the verifying read
            out.append((run, (user_s - user_before) / run.transactions, (system_s - system_before) / run.transactions))
    return out


def bench_mock(producer_counts: list[int], transactions: int, records: int, payload: bytes,
               partitions: int) -> tuple[list[Run], int]:
    """Runs against librdkafka's mock cluster (owned by a plain client that lives as long as
    it is needed), and the replication factor the mock gave the topic."""
    owner = Producer({"test.mock.num.brokers": 3})
    try:
        brokers = owner.list_topics(timeout=10).brokers
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
        # The mock creates a topic when asked for its metadata (its CreateTopics did not
        # answer in 60 s here), with its own partition count: checked against --partitions.
        replicas = 0
        for producers in producer_counts:
            topic = _topic(producers)
            described = owner.list_topics(topic, timeout=10).topics[topic]
            if len(described.partitions) != partitions:
                raise RuntimeError(f"the mock created {topic} with {len(described.partitions)} partitions, not {partitions}: "
                                   f"run with --partitions {len(described.partitions)}")
            replicas = len(described.partitions[0].replicas)
        runs = [_run_producers(bootstrap, producers, transactions, records, payload, partitions, "mock")
                for producers in producer_counts]
        return runs, replicas
    finally:
        del owner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=1000, help="per producer (default 1000)")
    parser.add_argument("--records", type=int, default=10, help="records per transaction (default 10)")
    parser.add_argument("--size", type=int, default=100, help="bytes per record (default 100)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    parser.add_argument("--producers", default="1,4", help="comma list of producer counts to run (default 1,4)")
    parser.add_argument("--trace-dir", help="record the brokers' request timelines here and print where the time went "
                                            "(needs --producers 1)")
    opts = parser.parse_args(argv)
    producer_counts = [int(n) for n in opts.producers.split(",") if n.strip()]
    if opts.trace_dir and producer_counts != [1]:
        parser.error(f"--trace-dir needs --producers 1 (the phases follow one producer's transactions), not {opts.producers}")
    payload = b"x" * opts.size
    print(f"load at start: {' '.join(open('/proc/loadavg').read().split()[:3])}; {psutil.cpu_count()} cores", flush=True)
    print(f"{opts.transactions} transactions per producer of {opts.records} x {opts.size} B over {opts.partitions} "
          f"partitions, acks=all (idempotent), 3 brokers; bundled RF 3 min ISR 2", flush=True)
    if opts.trace_dir:
        os.makedirs(opts.trace_dir, exist_ok=True)
        for stale in os.listdir(opts.trace_dir):
            if stale.startswith("broker-") and stale.endswith(".trace"):
                os.remove(os.path.join(opts.trace_dir, stale))
        os.environ[TRACE_ENV] = os.path.abspath(opts.trace_dir)  # the brokers inherit it
    try:
        bundled = bench_bundled(producer_counts, opts.transactions, opts.records, payload, opts.partitions)
    finally:
        os.environ.pop(TRACE_ENV, None)
    mock, mock_replicas = bench_mock(producer_counts, opts.transactions, opts.records, payload, opts.partitions)
    print(f"load at end: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print(f"{'':34}{'txn/s':>10}{'commit p50 ms':>15}{'commit p99 ms':>15}{'read_committed':>16}")
    all_found = True
    for (b, user_per_txn_s, system_per_txn_s), m in zip(bundled, mock):
        expected = b.transactions * opts.records
        all_found &= b.read_committed == expected and m.read_committed == expected
        for label, run in ((f"bundled, {b.producers} producer(s)", b), (f"mock (RF {mock_replicas}), {m.producers} producer(s)", m)):
            print(f"{label:34}{run.txn_per_s:>10,.0f}{run.latency_ms(0.5):>15.1f}{run.latency_ms(0.99):>15.1f}"
                  f"{run.read_committed:>10,}/{expected:,}")
        ratio = b.txn_per_s / m.txn_per_s if m.txn_per_s else float("nan")
        print(f"  {b.producers} producer(s): transactions/s ratio bundled/mock {ratio:.2f} (goal >= 0.5); bundled broker "
              f"CPU {(user_per_txn_s + system_per_txn_s) * 1000:.2f} ms per transaction over the 3 brokers (user "
              f"{user_per_txn_s * 1000:.2f}, system {system_per_txn_s * 1000:.2f}); mean commit "
              f"{statistics.fmean(b.commit_latencies_s) * 1000:.1f} ms bundled, {statistics.fmean(m.commit_latencies_s) * 1000:.1f} ms mock")
    if opts.trace_dir:
        print("\n".join(txn_trace.report(txn_trace.summarize(txn_trace.load(opts.trace_dir)))))
    return 0 if all_found else 1


if __name__ == "__main__":
    raise SystemExit(main())
