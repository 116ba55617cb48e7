"""Simulation speed of `logquake test --sim`: simulated seconds per wall second.

    .venv/bin/python -m bench.bench_sim [--seconds 60] [--rate 100] [--brokers 3]
                                        [--nemesis kill,partition] [--nemesis-interval 10]
                                        [--seed 1] [--runs 1]

Runs the simulated queue workload (issue 15's measure: 3 brokers, 100 ops per simulated
second, kill and partition faults) without the check, and prints per run: simulated seconds,
wall seconds of the simulation loop, their ratio (the figure; goal >= 20x), the loop's CPU
seconds and ratio (what a change is measured by on the shared machine: the wall figure
follows the load), the whole run's CPU seconds (set-up, imports and history included) and
the cyclic garbage collector's share of them with its passes per generation, ops recorded,
client requests and the history's sha256 (a speed change must leave it alone: the same seed
gives the same bytes before and after, so the run means the same). The reference, in the
same process: the same cluster with no clients and no faults for the same simulated time
(the cores' own timers: heartbeats, replica fetches), whose ratio bounds what any workload
can reach. The load average is printed with every figure: on the shared 2-core machine
other work skews them.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time

from harness.generator import derive_seed


def simulated_run(seconds: float, rate: float, brokers: int, nemesis: str, interval: float, seed: int,
                  results: str, profile: str | None = None) -> dict:
    from harness.cli import ArgumentParser
    from harness.run import open_run
    from harness.sim.run import execute_sim
    from harness.testcmd import build_spec, register

    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    argv = ["test", "--sim", "--time-limit", f"{seconds:g}", "--rate", f"{rate:g}", "--brokers", str(brokers),
            "--seed", str(seed), "--final-time-limit", "30", "--quiet-period", "5"]
    if nemesis:
        argv += ["--nemesis", nemesis, "--nemesis-interval", f"{interval:g}"]
    args = parser.parse_args(argv)
    run = open_run(build_spec(args, seed), results)
    profiler = None
    if profile:
        import cProfile

        # CPU time, not wall: on the shared machine a wall profile charges preemption to
        # whatever was running.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    collector = _CollectorTime()
    cpu = time.process_time()
    gc.callbacks.append(collector)
    try:
        execute_sim(run, check_history=False)
    finally:
        gc.callbacks.remove(collector)
        run.close()
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
    cpu = time.process_time() - cpu
    import json

    info = json.loads((run.run_dir / "simulation.json").read_text())
    history = (run.run_dir / "history.jsonl").read_bytes()
    import hashlib

    return {**info, "run_cpu_s": cpu, "gc_cpu_s": collector.cpu_s, "gc_collections": collector.collections,
            "history_ops": history.count(b"\n"),
            "history_sha256": hashlib.sha256(history).hexdigest()}


class _CollectorTime:
    """The cyclic garbage collector's CPU seconds and passes by generation (a gc callback):
    reference cycles on a hot path show up here first (they were a third of a run's CPU)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.cpu_s += time.process_time() - self._started
            self.collections[info["generation"]] += 1


def idle_cluster(seconds: float, brokers: int, seed: int) -> tuple[float, float]:
    """(simulated s, wall s) of the same cluster running its own timers only."""
    from cluster.sim.cluster import SimCluster

    sim = SimCluster(brokers, seed=derive_seed(seed, "cluster") % 2**31)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 60_000, step_ms=10, what="brokers ready")
    started = time.perf_counter()
    sim.run_for(seconds * 1000)
    return seconds, time.perf_counter() - started


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="main phase, simulated seconds (default 60)")
    parser.add_argument("--rate", type=float, default=100.0, help="ops per simulated second (default 100)")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--nemesis", default="kill,partition")
    parser.add_argument("--nemesis-interval", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1, help="runs with seeds seed, seed+1, ...")
    parser.add_argument("--profile", metavar="PATH", help="write a cProfile (CPU time) of each run to PATH.<seed>")
    args = parser.parse_args()
    print(f"simulated queue workload: {args.brokers} brokers, {args.rate:g} ops/simulated s, "
          f"nemesis {args.nemesis or 'none'} every {args.nemesis_interval:g} s, main phase {args.seconds:g} s")
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as results:
        for i in range(args.runs):
            seed = args.seed + i
            print(f"  [{load()}]", flush=True)
            r = simulated_run(args.seconds, args.rate, args.brokers, args.nemesis, args.nemesis_interval, seed, results,
                              f"{args.profile}.{seed}" if args.profile else None)
            print(f"  seed {seed}: {r['simulated_s']:.1f} simulated s in {r['wall_s']:.2f} wall s: "
                  f"**{r['speed']:.1f}x** simulated s per wall s; the loop {r['cpu_s']:.2f} CPU s "
                  f"(**{r['simulated_s'] / r['cpu_s']:.1f}x per CPU s**), the run {r['run_cpu_s']:.2f} CPU s, of which the "
                  f"garbage collector {r['gc_cpu_s']:.2f} s ({'/'.join(map(str, r['gc_collections']))} passes of "
                  f"generation 0/1/2); "
                  f"{r['history_ops']} history ops, "
                  f"{r['client_requests']} client requests, history sha256 {r['history_sha256'][:16]}  [{load()}]",
                  flush=True)
    simulated, wall = idle_cluster(args.seconds, args.brokers, args.seed)
    print(f"reference, the same cluster idle (no clients, no faults): {simulated:.0f} simulated s in {wall:.2f} wall s: "
          f"{simulated / wall:.1f}x  [{load()}]")


if __name__ == "__main__":
    main()
