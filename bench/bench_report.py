"""How long a report of a big run takes to show in a browser, and how big it is.

Writes a synthetic run of a 10-minute queue test (10^6 history ops by default: eight
processes sending to and polling eight partitions, partition/kill/pause faults, timeouts,
50 lost writes witnessed in results.json), renders report.html, then opens it from disk in
headless Chromium twice — in a fresh browser (cold: plotly.js compiled from scratch) and
again (warm) — and prints the figures. The small hand-made run the tests use is measured
the same way beside it, as the reference.

Goals (issue 6): in the browser under 5 s, and under 20 MB on disk.

    .venv/bin/python bench/bench_report.py [--ops 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkers.result import Anomaly, CheckResult, Claim, Witness  # noqa: E402
from harness import store  # noqa: E402
from harness.history import HistoryWriter, Op  # noqa: E402
from harness.report import write_report  # noqa: E402
from harness.report.browser import HeadlessChromium  # noqa: E402

GOAL_RENDER_S = 5.0
GOAL_SIZE_MB = 20.0
KEYS = 8
SENDERS = 6
POLLERS = 2
RUN_S = 600.0
FAULTS = [  # (kind, start s, end s, targets)
    ("partition", 60, 75, {"isolated": ["n1"]}),
    ("kill", 150, 170, ["n2"]),
    ("pause", 240, 250, ["n3"]),
    ("partition", 330, 350, {"halves": [["n1", "n2"], ["n3"]]}),
    ("kill", 420, 435, ["n1"]),
    ("clock", 500, 540, {"n2": "+300s"}),
]


def _in_fault(t: float) -> bool:
    return any(start <= t <= end for kind, start, end, _ in FAULTS if kind != "clock")


def synthesize_history(path: Path, target_ops: int, rng: random.Random) -> tuple[list[list[int]], int]:
    """Returns the witnesses of the lost writes and the number of ops written."""
    client_pairs = target_ops // 2
    # the gap between a worker's ops, so that the run lasts about RUN_S (ops take ~6 ms)
    mean_gap_s = max(RUN_S * (SENDERS + POLLERS) / client_pairs - 0.006, 0.0002)
    events: list[tuple[float, int, str, object, str, object, object]] = []
    acked: list[list[tuple[float, int, int]]] = [[] for _ in range(KEYS)]
    offsets = [0] * KEYS
    lost: set[tuple[int, int]] = set()
    lost_witness: dict[tuple[int, int], tuple[int, int]] = {}
    value = 0
    seq = 0
    # workers take turns in time order, so offsets grow with time
    clocks = [rng.random() * mean_gap_s for _ in range(SENDERS + POLLERS)]
    processes = list(range(SENDERS + POLLERS))
    next_process = SENDERS + POLLERS
    positions = [[0] * KEYS for _ in range(POLLERS)]
    pairs = 0
    while pairs < client_pairs:
        worker = min(range(SENDERS + POLLERS), key=clocks.__getitem__)
        t = clocks[worker]
        process = processes[worker]
        faulty = _in_fault(t)
        latency = rng.expovariate(1 / (0.2 if faulty else 0.004))
        if worker < SENDERS:
            key = rng.randrange(KEYS)
            value += 1
            events.append((t, seq, "invoke", process, "send", [["send", key, value]], None))
            seq += 1
            if faulty and rng.random() < 0.05:
                kind = "info" if rng.random() < 0.5 else "fail"
                events.append((t + 1.0 if kind == "info" else t + latency, seq, kind, process, "send",
                               [["send", key, value]], "timed out" if kind == "info" else "NOT_ENOUGH_REPLICAS"))
                seq += 1
                if kind == "info":
                    processes[worker] = next_process
                    next_process += 1
                    latency = 1.0
            else:
                offset = offsets[key]
                offsets[key] += 1
                events.append((t + latency, seq, "ok", process, "send", [["send", key, [offset, value]]], None))
                seq += 1
                if faulty and len(lost) < 50 and rng.random() < 0.01:
                    lost.add((key, offset))
                    lost_witness[(key, offset)] = (seq - 2, seq - 1)
                else:
                    acked[key].append((t + latency, offset, value))
        else:
            poller = worker - SENDERS
            batch = {}
            for key in range(KEYS):
                records = acked[key]
                start = positions[poller][key]
                end = start
                while end < len(records) and records[end][0] < t and end - start < 20:
                    end += 1
                if end > start:
                    batch[key] = [[o, v] for _, o, v in records[start:end]]
                    positions[poller][key] = end
            events.append((t, seq, "invoke", process, "poll", [["poll"]], None))
            events.append((t + latency, seq + 1, "ok", process, "poll", [["poll", batch]], None))
            seq += 2
        pairs += 1
        clocks[worker] = t + latency + rng.expovariate(1 / mean_gap_s)
    for kind, start, end, targets in FAULTS:
        for moment, phase, type_ in ((start, "start", "invoke"), (start + 0.05, "start", "info"), (end, "stop", "invoke"), (end + 0.1, "stop", "info")):
            events.append((moment, seq, type_, "nemesis", f"{phase}-{kind}", targets if phase == "start" else None, None))
            seq += 1
    order = sorted(range(len(events)), key=lambda i: (events[i][0], events[i][1]))
    index_of_seq = {}
    with HistoryWriter(path) as writer:
        for index, i in enumerate(order):
            t, s, type_, process, f, value_, error = events[i]
            index_of_seq[s] = index
            writer.append(Op(index, int(t * 1e9), type_, process, f, value_, error))
    witnesses = [sorted(index_of_seq[s] for s in lost_witness[k]) for k in sorted(lost_witness)]
    return witnesses, len(events)


def synthesize_run(run_dir: Path, target_ops: int) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    witnesses, op_count = synthesize_history(run_dir / store.HISTORY_FILE, target_ops, random.Random(42))
    (run_dir / store.SPEC_FILE).write_text(
        '{"name": "bench-queue", "workload": "queue", "nemeses": ["partition", "kill", "pause", "clock"], "seed": 42,'
        ' "time_limit_s": 600, "concurrency": 8, "client_config": {"acks": "all"}, "cluster_config": {},'
        ' "command": "logquake test --workload queue --nemesis partition,kill,pause,clock --time-limit 600 --seed 42"}'
    )
    CheckResult(
        valid=False,
        claims=[Claim("acked-writes-durable", "Acknowledged writes are read by the final polls.", "acks=all", True)],
        anomalies=[
            Anomaly("lost-write", len(witnesses), False, "Acknowledged writes that no poll returned, though later offsets were read.",
                    [Witness(w, {}) for w in witnesses[:10]], ["acked-writes-durable"])
        ],
    ).save(run_dir / store.RESULTS_FILE)
    return op_count


def measure(report: Path) -> tuple[float, float, float]:
    """(cold, warm, cold main-thread CPU) in ms: first load in a fresh browser, then again."""
    with HeadlessChromium(width=1400, height=1000, timeout_s=120) as browser:
        cold = browser.open(report.as_uri())
        warm = browser.open(report.as_uri())
    if cold.console_errors or warm.console_errors:
        raise SystemExit(f"the page logged errors: {cold.console_errors + warm.console_errors}")
    return cold.render_ms or cold.wall_ms, warm.render_ms or warm.wall_ms, cold.main_thread_cpu_ms or 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000, help="history ops in the big run (default 10^6)")
    parser.add_argument("--keep", type=Path, help="write the runs here and keep them (default: a temporary directory)")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="logquake-bench-report-"))
    try:
        from tests.harness.test_report_support import write_lost_write_run

        reference = workdir / "reference" / "20261122T070000.000000"
        write_lost_write_run(reference)
        big = workdir / "big" / "20261122T070000.000000"
        started = time.monotonic()
        op_count = synthesize_run(big, args.ops)
        print(f"synthesized {op_count:,} ops in {time.monotonic() - started:.1f} s "
              f"({(big / store.HISTORY_FILE).stat().st_size / 1e6:.0f} MB of history.jsonl)")
        rows = []
        for label, run in (("reference (hand-made, ~350 ops)", reference), (f"big ({op_count:,} ops)", big)):
            started = time.monotonic()
            report = write_report(run)
            python_s = time.monotonic() - started
            size_mb = report.stat().st_size / 1e6
            cold_ms, warm_ms, busy_ms = measure(report)
            rows.append((label, python_s, size_mb, cold_ms, warm_ms, busy_ms))
        print(f"load average while measuring: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        print("browser cold = first load in a fresh browser (includes compiling plotly.js); warm = the same page again;")
        print("main-thread CPU = CPU time of the page's main thread in the cold load (the page's cost without waiting for a core)")
        print(f"{'run':34} {'write_report':>12} {'size':>9} {'browser cold':>13} {'browser warm':>13} {'main-thread CPU':>16}")
        for label, python_s, size_mb, cold_ms, warm_ms, busy_ms in rows:
            print(f"{label:34} {python_s:10.2f} s {size_mb:6.2f} MB {cold_ms / 1000:11.2f} s {warm_ms / 1000:11.2f} s {busy_ms / 1000:14.2f} s")
        ref, big_row = rows
        print(f"big / reference: size ×{big_row[2] / ref[2]:.2f}, browser cold ×{big_row[3] / ref[3]:.2f}, warm ×{big_row[4] / ref[4]:.2f}")
        size_ok = big_row[2] < GOAL_SIZE_MB
        render_ok = big_row[3] / 1000 < GOAL_RENDER_S
        print(f"goal size < {GOAL_SIZE_MB:g} MB: {'met' if size_ok else 'MISSED'}; "
              f"goal browser render (cold) < {GOAL_RENDER_S:g} s: {'met' if render_ok else 'MISSED'}")
        return 0 if size_ok and render_ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
