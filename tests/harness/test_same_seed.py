"""Issue #4: the same `logquake test` command with the same --seed runs the same test: each
worker thread invokes the same operations in the same order, and the nemesis schedules the
same faults. Times, outcomes and how far each run got differ (a real cluster answers at its
own pace), so the main phase of each run is compared up to the shorter run's length.

One thing legitimately depends on results: about a third of assign ops also cover keys whose
acknowledged writes nobody has read yet (Jepsen's poll-unseen). Those assigns carry the keys
they added in `unseen`; for them only the operation, not its key list, is compared."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.history import Op, read_history

PROJECT = Path(__file__).resolve().parents[2]
CONCURRENCY = 4
COMMAND = ["--workload", "queue", "--nemesis", "kill,partition", "--nemesis-interval", "1", "--time-limit", "14",
           "--concurrency", str(CONCURRENCY), "--brokers", "3", "--seed", "4242", "--quiet-period", "1",
           "--final-time-limit", "30",
           "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=500",
           "--cluster-config", "offsets.topic.num.partitions=3"]


def run_both(first: Path, second: Path) -> tuple[list[Op], list[Op]]:
    """Both runs at once, each on its own cluster: half the wall time of one after the other,
    and the two clusters' paces differ more, which is what the comparison must survive. Their
    output goes to files (a full pipe would stall the run that writes to it)."""
    runs = []
    try:
        for results in (first, second):
            results.mkdir(parents=True)
            output = open(results / "output.txt", "w", encoding="utf-8")  # noqa: SIM115 - closed below
            runs.append((results, output, subprocess.Popen(
                [sys.executable, "-m", "harness.testcmd", *COMMAND, "--results-dir", str(results)],
                stdout=output, stderr=subprocess.STDOUT, text=True, cwd=PROJECT)))
        histories = []
        for results, _, process in runs:
            process.wait(timeout=600)
            tail = (results / "output.txt").read_text(encoding="utf-8")[-3000:]
            # ("latest" links to the run directory; resolve so it counts once.)
            found = sorted({p.resolve() for p in results.glob("*/*/history.jsonl")})
            assert len(found) == 1, f"exit {process.returncode}; no single history under {results}:\n{tail}"
            assert process.returncode in (0, 1, 2), tail
            histories.append(list(read_history(found[0])))
    finally:
        for _, output, process in runs:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # the harness stops its cluster and heals its faults
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            output.close()
    return histories[0], histories[1]


def main_phase(history: list[Op]) -> list[Op]:
    """Invocations before the final heal (the nemesis's heal ops open the heal phase). The
    nemesis records its invocations as info, like Jepsen: they are its odd ops."""
    end = next((op.index for op in history if op.process == "nemesis" and op.extra.get("heal")), len(history))
    nemesis = [op for op in history if op.process == "nemesis" and op.index < end]
    return [op for op in history if op.type == "invoke" and op.index < end] + nemesis[0::2]


def per_thread(invocations: list[Op]) -> dict[object, list[tuple]]:
    threads: dict[object, list[tuple]] = {}
    for op in invocations:
        # A process retired by an indefinite outcome continues on its thread as p + concurrency.
        thread = "nemesis" if op.process == "nemesis" else op.process % CONCURRENCY
        result_dependent = op.f in ("assign", "subscribe") and "unseen" in op.extra
        threads.setdefault(thread, []).append((op.f, None if result_dependent else _plain(op.value), result_dependent))
    return threads


def _plain(value):
    return repr(value)


def same(a: tuple, b: tuple) -> bool:
    f_a, value_a, dependent_a = a
    f_b, value_b, dependent_b = b
    return f_a == f_b and (dependent_a or dependent_b or value_a == value_b)


@pytest.mark.slow
def test_the_same_seed_gives_the_same_invocations_per_thread_and_the_same_faults(tmp_path):
    a, b = run_both(tmp_path / "a", tmp_path / "b")
    first, second = per_thread(main_phase(a)), per_thread(main_phase(b))
    assert set(first) == set(second) == set(range(CONCURRENCY)) | {"nemesis"}, (sorted(first, key=str), sorted(second, key=str))
    for thread in first:
        a, b = first[thread], second[thread]
        common = min(len(a), len(b))
        floor = 4 if thread == "nemesis" else 20
        assert common >= floor, f"thread {thread}: only {common} invocations to compare"
        for i in range(common):
            assert same(a[i], b[i]), f"thread {thread}, invocation {i}: {a[i]} vs {b[i]}"
    nemesis_fs = {f for f, _, _ in first["nemesis"]}
    assert {"start-kill", "start-partition"} & nemesis_fs, nemesis_fs
