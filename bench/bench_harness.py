"""Harness overhead: how fast the generator, the run loop and the queue workload go.

    .venv/bin/python -m bench.bench_harness [--seconds 10] [--concurrency 10]

Prints three figures:
1. generator only: the queue workload's main-phase generator under simulate() (no threads,
   no clients): µs of CPU per invocation;
2. run loop only: the interpreter with worker threads and a client that answers at once:
   ops/s and µs of CPU per op (the harness's own cost, no Kafka);
3. the real thing: the queue workload with confluent-kafka clients against the bundled
   cluster, no faults, at an unbounded rate: ops/s sustained, and CPU per op split into this
   process (harness + librdkafka) and the broker processes.
Goals (issue 4): ≥ 2,000 ops/s with concurrency 10 on a 2-core machine; harness CPU ≤ 50 µs per op.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from harness.generator import Completion, Rand, Stagger, TimeLimit, clients, simulate
from harness.history import HistoryWriter
from harness.interpreter import Interpreter
from harness.spec import RunSpec
from workloads import queue


def in_memory_completion():
    logs: dict[int, int] = {}

    def complete(inv):
        if inv.f == "send":
            out = []
            for _, k, v in inv.value:
                logs[k] = logs.get(k, 0) + 1
                out.append(["send", k, [logs[k] - 1, v]])
            return Completion("ok", out), 200_000
        if inv.f == "poll":
            return Completion("ok", [["poll", {}]]), 200_000
        return Completion("ok" if inv.f != "crash" else "info", inv.value), 200_000

    return complete


def spec(concurrency: int, seed: int = 1) -> RunSpec:
    return RunSpec(name="bench", workload="queue", seed=seed, brokers=1, concurrency=concurrency, rate_hz=1e6,
                   client_config=queue.default_client_config({}), workload_options={"replication_factor": "1"})


def bench_generator(concurrency: int, seconds: float) -> None:
    s = spec(concurrency)
    workload = queue.build(s, "127.0.0.1:9")
    gen = TimeLimit(seconds, clients(Stagger(1 / 5000, workload.generator, Rand.from_seed(1, "rate"))))
    started = time.process_time()
    history = simulate(gen, concurrency=concurrency, complete=in_memory_completion())
    cpu = time.process_time() - started
    invocations = sum(1 for op in history if op.type == "invoke")
    print(f"generator only (simulate, {invocations} invocations): {cpu / invocations * 1e6:.1f} µs CPU per op")


class InstantClient:
    def invoke(self, inv):
        if inv.f == "send":
            return Completion("ok", [["send", k, [0, v]] for _, k, v in inv.value])
        if inv.f == "poll":
            return Completion("ok", [["poll", {}]])
        return Completion("info" if inv.f == "crash" else "ok", inv.value)

    def close(self):
        pass


def bench_interpreter(concurrency: int, seconds: float, out_dir: Path) -> None:
    workload = queue.build(spec(concurrency), "127.0.0.1:9")
    writer = HistoryWriter(out_dir / "loop.jsonl")
    interp = Interpreter(concurrency=concurrency, open_client=lambda p: InstantClient(), history=writer)
    cpu0, wall0 = time.process_time(), time.monotonic()
    interp.run(TimeLimit(seconds, clients(workload.generator)))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    interp.close()
    writer.close()
    ops = writer.count // 2
    print(f"run loop only (instant client, concurrency {concurrency}): {ops / wall:,.0f} ops/s, "
          f"{cpu / ops * 1e6:.1f} µs CPU per op")


def bench_real(concurrency: int, seconds: float, out_dir: Path) -> None:
    from cluster.launcher import LocalCluster

    with LocalCluster(brokers=1, base_dir=out_dir / "cluster", seed=1) as cluster:
        s = spec(concurrency)
        workload = queue.build(s, cluster.bootstrap_servers)
        workload.setup()
        brokers = [psutil.Process(b.pid) for b in cluster.brokers]
        writer = HistoryWriter(out_dir / "real.jsonl")
        interp = Interpreter(concurrency=concurrency, open_client=workload.open_client, history=writer)
        me = psutil.Process()
        cpu0 = me.cpu_times()
        broker0 = sum(b.cpu_times().user + b.cpu_times().system for b in brokers)
        wall0 = time.monotonic()
        interp.run(TimeLimit(seconds, clients(workload.generator)))
        wall = time.monotonic() - wall0
        cpu1 = me.cpu_times()
        broker_cpu = sum(b.cpu_times().user + b.cpu_times().system for b in brokers) - broker0
        interp.close()
        writer.close()
    ops = writer.count // 2
    harness_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(f"queue workload on the bundled cluster (concurrency {concurrency}, {seconds:g} s, no faults): "
          f"{ops / wall:,.0f} ops/s; CPU per op: {harness_cpu / ops * 1e6:.0f} µs in this process "
          f"(harness + librdkafka), {broker_cpu / ops * 1e6:.0f} µs in the broker")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        bench_generator(args.concurrency, args.seconds)
        bench_interpreter(args.concurrency, args.seconds, Path(tmp))
        bench_real(args.concurrency, args.seconds, Path(tmp))


if __name__ == "__main__":
    main()
