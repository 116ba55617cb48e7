"""Issue #4: the same `logquake test` command with the same --seed runs the same test: each
worker thread invokes the same operations in the same order, and the nemesis schedules the
same faults. Times, outcomes and how far each run got differ (a real cluster answers at its
own pace), so the main phase of each run is compared up to the shorter run's length.

One thing legitimately depends on results: about a third of assign ops also cover keys whose
acknowledged writes nobody has read yet (Jepsen's poll-unseen). Those assigns carry the keys
they added in `unseen`; for them only the operation, not its key list, is compared."""

from __future__ import annotations

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


def run(results: Path) -> list[Op]:
    out = subprocess.run([sys.executable, "-m", "harness.testcmd", *COMMAND, "--results-dir", str(results)],
                         capture_output=True, text=True, timeout=600, cwd=PROJECT)
    # ("latest" links to the run directory; resolve so it counts once.)
    histories = sorted({p.resolve() for p in results.glob("*/*/history.jsonl")})
    assert len(histories) == 1, f"exit {out.returncode}; no single history under {results}:\n{out.stderr[-3000:]}"
    assert out.returncode in (0, 1, 2), out.stderr[-3000:]
    return list(read_history(histories[0]))


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
    first = per_thread(main_phase(run(tmp_path / "a")))
    second = per_thread(main_phase(run(tmp_path / "b")))
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
