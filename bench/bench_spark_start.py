"""bench_spark_start: wall time of `logquake analyze` with and without the Spark driver's
class-data-sharing archive (checkers/class_archive.py).

Both are the same command on the same small recorded run (harness/spark_archive.py's
training run), each a process of its own as every `logquake test` and `analyze` is, run
alternately so that the machine's load falls on both alike; the reference is the archive
switched off (LOGQUAKE_SPARK_CLASS_ARCHIVE=off) in the same bench. The archive is built
first if this machine has none (its build time is printed). The load average is printed at
the start and the end.

    python -m bench.bench_spark_start              # 5 pairs
    python -m bench.bench_spark_start --pairs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from checkers.class_archive import SWITCH_ENV
from harness.spark_archive import build, check_training_run, write_training_run


def analyze_s(run_dir: Path, *, archive: bool) -> float:
    started = time.monotonic()
    check_training_run(run_dir, {SWITCH_ENV: "on" if archive else "off"},
                       "check " + ("with" if archive else "without") + " the archive")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    started = time.monotonic()
    path, built = build()
    print(f"archive {path} ({path.stat().st_size / 2**20:.0f} MB): "
          + (f"built in {time.monotonic() - started:.1f} s" if built else "present"))
    with tempfile.TemporaryDirectory(prefix="bench-spark-start-") as tmp:
        run_dir = Path(tmp) / "run"
        write_training_run(run_dir)
        analyze_s(run_dir, archive=True)  # untimed: the page cache holds the jars and the archive
        off, on = [], []
        for pair in range(args.pairs):
            off.append(analyze_s(run_dir, archive=False))
            on.append(analyze_s(run_dir, archive=True))
            print(f"pair {pair + 1}: without {off[-1]:.2f} s, with {on[-1]:.2f} s")
    without, with_ = statistics.median(off), statistics.median(on)
    print(f"median logquake analyze: without the archive {without:.2f} s, with it {with_:.2f} s: "
          f"{with_ / without:.2f}x ({without - with_:.2f} s less per check)")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
