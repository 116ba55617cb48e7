"""Harness overhead: how fast the generator, the run loop and the queue workload go.

    .venv/bin/python -m bench.bench_harness [--seconds 10] [--concurrency 10] [--brokers 1,3]
                                            [--poll-ms 100]

Prints:
1. generator only: the queue workload's main-phase generator under simulate() (no threads,
   no clients): µs of CPU per invocation;
2. run loop only: the interpreter with worker threads and a client that answers at once:
   ops/s and µs of CPU per op (the harness's own cost, no Kafka);
3. the real thing, once per cluster size: the queue workload with confluent-kafka clients
   against the bundled cluster (replication factor = brokers, up to 3; acks=all), no
   faults, at an unbounded rate: ops/s sustained, and CPU per op split by thread:
   - run loop: the main thread (generator, dispatch, completions, history encoding) and the
     history writer thread: the harness's own cost per op, what the goal is about;
   - workers: the worker threads, i.e. the workload's client (its Python wrapper and the
     confluent-kafka/librdkafka work done on the calling thread: produce, poll, callbacks);
   - librdkafka: its own threads (named rdk:*), read from /proc/self/task;
   - other: every other thread of this process (the cluster launcher's helpers, threads
     that ended during the run);
   - broker: the broker and controller processes.
   Latency per op kind and the share of worker time spent in polls that found nothing
   (each waits out poll_ms, 100 ms as in Jepsen's test) say what bounds the ops/s.
Goals (issue 4): ≥ 2,000 ops/s with concurrency 10 on a 2-core machine, judged on the
bundled cluster's default size (3 brokers); harness CPU ≤ 50 µs per op (the run-loop figure).
The load average is printed with every figure: other work on the machine skews them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

from harness.generator import Completion, Rand, Stagger, TimeLimit, clients, simulate
from harness.history import HistoryWriter, read_history
from harness.interpreter import Interpreter
from harness.spec import RunSpec
from workloads import queue



def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


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


def spec(concurrency: int, seed: int = 1, brokers: int = 1, poll_ms: int = 100) -> RunSpec:
    return RunSpec(name="bench", workload="queue", seed=seed, brokers=brokers, concurrency=concurrency, rate_hz=1e6,
                   client_config=queue.default_client_config({}),
                   workload_options={"replication_factor": str(min(3, brokers)), "poll_ms": str(poll_ms)})


# -- CPU time per thread --------------------------------------------------------------

def thread_cpu_s() -> dict[int, tuple[str, float]]:
    """Every thread of this process: native id -> (kernel name, CPU seconds). schedstat's
    nanoseconds, not stat's 10 ms ticks: truncating ticks per thread lost tens of µs per op
    across forty threads."""
    out: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{entry}/schedstat") as fh:
                on_cpu_ns = int(fh.read().split()[0])
            with open(f"/proc/self/task/{entry}/comm") as fh:
                comm = fh.read().strip()
        except OSError:  # the thread ended while we looked
            continue
        out[int(entry)] = (comm, on_cpu_ns / 1e9)
    return out


def is_run_loop_thread(name: str) -> bool:
    return name in ("MainThread", "history-writer")


def is_worker_thread(name: str) -> bool:
    return name.startswith("worker-")


@dataclasses.dataclass
class CpuSplit:
    """CPU seconds spent during a run, by who spent them."""

    run_loop_s: float
    workers_s: float
    librdkafka_s: float
    other_s: float
    process_s: float


class CpuMeter:
    """Samples this process's threads at start and stop. librdkafka names its threads rdk:*;
    Python threads are told apart by their native ids (Python does not name OS threads)."""

    def start(self) -> None:
        self._threads0 = thread_cpu_s()
        self._process0 = _process_cpu_s()

    def stop(self) -> CpuSplit:
        threads1 = thread_cpu_s()
        process_s = _process_cpu_s() - self._process0
        python_names = {t.native_id: t.name for t in threading.enumerate()}
        loop = workers = rdk = 0.0
        for tid, (comm, cpu) in threads1.items():
            spent = cpu - self._threads0.get(tid, (comm, 0.0))[1]
            name = python_names.get(tid, "")
            if comm.startswith("rdk:"):
                rdk += spent
            elif is_run_loop_thread(name):
                loop += spent
            elif is_worker_thread(name):
                workers += spent
        # Whatever is left: other threads, and threads that ended before stop().
        return CpuSplit(loop, workers, rdk, max(0.0, process_s - loop - workers - rdk), process_s)


def _process_cpu_s() -> float:
    return time.process_time()  # every thread's CPU, those that ended included


# -- the three benchmarks -------------------------------------------------------------

def bench_generator(concurrency: int, seconds: float) -> None:
    s = spec(concurrency)
    workload = queue.build(s, "127.0.0.1:9")
    gen = TimeLimit(seconds, clients(Stagger(1 / 5000, workload.generator, Rand.from_seed(1, "rate"))))
    started = time.process_time()
    history = simulate(gen, concurrency=concurrency, complete=in_memory_completion())
    cpu = time.process_time() - started
    invocations = sum(1 for op in history if op.type == "invoke")
    print(f"generator only (simulate, {invocations} invocations): {cpu / invocations * 1e6:.1f} µs CPU per op "
          f"[{load_average()}]")


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
    meter = CpuMeter()
    meter.start()
    wall0 = time.monotonic()
    interp.run(TimeLimit(seconds, clients(workload.generator)))
    wall = time.monotonic() - wall0
    cpu = meter.stop()
    interp.close()
    writer.close()
    ops = writer.count // 2
    print(f"run loop only (instant client, concurrency {concurrency}): {ops / wall:,.0f} ops/s, "
          f"{cpu.run_loop_s / ops * 1e6:.1f} µs run-loop CPU per op, {cpu.workers_s / ops * 1e6:.1f} µs in workers "
          f"({cpu.process_s / ops * 1e6:.1f} µs whole process) "
          f"[{load_average()}]")


def latency_summary(history_path: Path, concurrency: int, wall_s: float) -> str:
    """Median latency per op kind, and the share of worker time spent in empty polls."""
    invoked: dict[object, int] = {}
    latencies: dict[str, list[int]] = defaultdict(list)
    empty_poll_ns = 0
    for op in read_history(history_path):
        if op.type == "invoke":
            invoked[op.process] = op.time_ns
            continue
        started = invoked.pop(op.process, None)
        if started is None:
            continue
        latencies[op.f].append(op.time_ns - started)
        if op.f == "poll" and op.type == "ok" and not any(pairs for _, by_key in op.value for pairs in by_key.values()):
            empty_poll_ns += op.time_ns - started
    parts = []
    for f in ("send", "poll", "assign", "subscribe"):
        values = sorted(latencies.get(f, []))
        if values:
            parts.append(f"{f} p50 {values[len(values) // 2] / 1e6:.1f} ms")
    share = empty_poll_ns / 1e9 / (wall_s * concurrency)
    return f"{', '.join(parts)}; {share:.0%} of worker time in polls that found nothing"


def bench_real(concurrency: int, seconds: float, brokers: int, poll_ms: int, out_dir: Path) -> None:
    from cluster.launcher import LocalCluster

    base = out_dir / f"cluster-{brokers}"
    with LocalCluster(brokers=brokers, base_dir=base, seed=1) as cluster:
        s = spec(concurrency, brokers=brokers, poll_ms=poll_ms)
        workload = queue.build(s, cluster.bootstrap_servers)
        workload.setup()
        servers = [psutil.Process(b.pid) for b in cluster.brokers] + [psutil.Process(cluster.controller.pid)]
        history_path = out_dir / f"real-{brokers}.jsonl"
        writer = HistoryWriter(history_path)
        interp = Interpreter(concurrency=concurrency, open_client=workload.open_client, history=writer)
        meter = CpuMeter()
        server0 = sum(sum(p.cpu_times()[:2]) for p in servers)
        meter.start()
        wall0 = time.monotonic()
        interp.run(TimeLimit(seconds, clients(workload.generator)))
        wall = time.monotonic() - wall0
        cpu = meter.stop()
        server_s = sum(sum(p.cpu_times()[:2]) for p in servers) - server0
        load = load_average()
        interp.close()
        writer.close()
    ops = writer.count // 2
    per_op = 1e6 / ops
    print(f"queue workload, {brokers} broker(s), replication factor {min(3, brokers)}, acks=all "
          f"(concurrency {concurrency}, {seconds:g} s, no faults, poll_ms {poll_ms}): {ops / wall:,.0f} ops/s [{load}]\n"
          f"  CPU per op: run loop {cpu.run_loop_s * per_op:.0f} µs, workers (client calls) {cpu.workers_s * per_op:.0f} µs, "
          f"librdkafka threads {cpu.librdkafka_s * per_op:.0f} µs, "
          f"other {cpu.other_s * per_op:.0f} µs = this process {cpu.process_s * per_op:.0f} µs; "
          f"brokers + controller {server_s * per_op:.0f} µs\n"
          f"  {latency_summary(history_path, concurrency, wall)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--brokers", default="1,3", help="cluster sizes to run, comma separated (default 1,3)")
    parser.add_argument("--poll-ms", type=int, default=100, help="the queue workload's poll_ms (Jepsen: 100)")
    args = parser.parse_args()
    try:
        sizes = [int(part) for part in args.brokers.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--brokers {args.brokers!r} is not a comma list of broker counts")
    if not sizes or min(sizes) < 1:
        parser.error(f"--brokers {args.brokers!r}: every cluster needs at least one broker")
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        bench_generator(args.concurrency, args.seconds)
        bench_interpreter(args.concurrency, args.seconds, Path(tmp))
        for brokers in sizes:
            bench_real(args.concurrency, args.seconds, brokers, args.poll_ms, Path(tmp))


if __name__ == "__main__":
    main()
