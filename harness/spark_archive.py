"""Build the Spark driver's class-data-sharing archive (checkers/class_archive.py says why).

`python -m harness.spark_archive` (run by `make setup`) writes a small recorded run to a
temporary directory and checks it with `logquake analyze` in a process whose driver JVM
dumps every class it loaded at exit (-XX:ArchiveClassesAtExit). The training run goes
through the real pipeline (conversion, every check, claims, the report), so the archive
holds what a real check loads. The new file is then verified by checking the run again
with the archive required (-Xshare:on: a file the JVM cannot map fails that check instead
of a user's), and only then renamed into place, atomically. Builders on one machine take
turns through a lock; archives no PySpark here can use any more (a removed virtualenv, another
Java or PySpark) are removed, while other checkouts' archives stay.

Nothing here is needed for a correct check: without the archive every check runs, only
its driver starts about 2.5 s slower.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from checkers import class_archive
from harness.history import NEMESIS, HistoryWriter, Op

TIMEOUT_S = 300.0


class ArchiveBuildError(RuntimeError):
    """The archive could not be built; the message names the step and its output."""


def write_training_run(run_dir: Path) -> None:
    """A small queue run: a kill, sends, a transaction, polls by two consumers, a crash, and
    one lost acknowledged write, so that the checks find something and explain it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"name": "class-archive-training", "workload": "queue", "seed": 1,
            "client_config": {"acks": "all", "enable.idempotence": "true"},
            "cluster_config": {"min.insync.replicas": "2"}, "workload_options": {"sub_via": ["assign"]}}
    (run_dir / "spec.json").write_text(json.dumps(spec))
    ops: list[Op] = []

    def add(typ: str, process: int | str, f: str, value: object) -> None:
        ops.append(Op(len(ops), (len(ops) + 1) * 1_000_000, typ, process, f, value))  # type: ignore[arg-type]

    def op(process: int | str, f: str, invoked: object, done: object, typ: str = "ok") -> None:
        add("invoke", process, f, invoked)
        add(typ, process, f, done)

    keys = 6
    logs: dict[int, list[tuple[int, int]]] = {k: [] for k in range(keys)}
    op(NEMESIS, "start-kill", {"targets": "one"}, {"killed": [0]}, typ="info")
    for i in range(keys * 5):
        key, value = i % keys, 100 + i
        offset = len(logs[key])
        op(i % 3, "send", [["send", key, value]], [["send", key, [offset, value]]])
        logs[key].append((offset, value))
    op(NEMESIS, "stop-kill", None, {"restarted": [0]}, typ="info")
    op(0, "txn", [["send", 1, 900], ["send", 2, 901]],
       [["send", 1, [len(logs[1]), 900]], ["send", 2, [len(logs[2]), 901]]])
    logs[1].append((len(logs[1]), 900))
    logs[2].append((len(logs[2]), 901))
    logs[3].pop(1)  # acknowledged, never read: a lost write
    op(2, "crash", None, None, typ="info")
    for consumer in (10, 11):
        op(consumer, "assign", list(range(keys)), list(range(keys)))
        for key, records in logs.items():
            polled = {str(key): [list(r) for r in records]}
            op(consumer, "poll", [["poll"]], [["poll", polled]])
    with HistoryWriter(run_dir / "history.jsonl") as writer:
        for one in ops:
            writer.append(one)


def check_training_run(run_dir: Path, env: Mapping[str, str], step: str) -> None:
    """`logquake analyze` of the training run in a process of its own, with `env` added to
    this one's (the builder's dump and require switches removed first); raises unless the
    verdict is invalid, as the training run's lost write makes it."""
    full_env = {k: v for k, v in os.environ.items() if k not in (class_archive.DUMP_ENV, class_archive.REQUIRE_ENV)}
    full_env.update(env)
    out = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(run_dir)], env=full_env,
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    if out.returncode != 1 or "verdict: INVALID" not in out.stdout + out.stderr:
        raise ArchiveBuildError(f"the {step} exited {out.returncode} (expected 1, invalid):\n"
                                + (out.stdout + out.stderr)[-3000:])


def build(*, force: bool = False) -> tuple[Path, bool]:
    """Build the archive unless it exists; returns its path and whether this call built it."""
    target = class_archive.archive_path()
    if target is None:
        raise ArchiveBuildError("no java on PATH or in JAVA_HOME: Spark cannot start either")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another builder may be writing the same file
        if target.is_file() and not force:
            remove_stale(target.parent)  # e.g. the archives of clean clones since removed
            return target, False
        with tempfile.TemporaryDirectory(prefix="logquake-class-archive-") as tmp:
            training, verifying = Path(tmp) / "training", Path(tmp) / "verifying"
            write_training_run(training)
            write_training_run(verifying)  # a fresh copy: analyze writes its results into the run
            # Next to the target, so that the rename is atomic (one file system).
            partial = target.parent / f".{target.name}.{os.getpid()}.partial"
            try:
                check_training_run(training, {class_archive.DUMP_ENV: str(partial)}, "training check")
                if not partial.is_file() or partial.stat().st_size == 0:
                    raise ArchiveBuildError(f"the training check's JVM wrote no archive at {partial}")
                check_training_run(verifying, {class_archive.REQUIRE_ENV: str(partial)}, "check with the new archive")
                # Which PySpark it belongs to, for a later build's clean-up (below).
                target.with_suffix(".json").write_text(json.dumps({"jars": str(class_archive.pyspark_jars())}))
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
        remove_stale(target.parent)
    return target, True


def remove_stale(directory: Path) -> list[Path]:
    """Remove the archives no PySpark on this machine can use any more: their virtualenv is
    gone, or its PySpark or the Java changed (each checkout keeps its own, ~160 MB)."""
    removed = []
    for archive in directory.glob("driver-*.jsa"):
        try:
            jars = Path(json.loads(archive.with_suffix(".json").read_text())["jars"])
        except (OSError, ValueError, KeyError, TypeError):
            jars = None  # no record of its PySpark: nothing can tell that it is still used
        if jars is None or not jars.is_dir() or class_archive.archive_path(jars) != archive:
            archive.unlink(missing_ok=True)
            archive.with_suffix(".json").unlink(missing_ok=True)
            removed.append(archive)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.spark_archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="build again even if the archive exists")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        path, built = build(force=args.force)
    except (ArchiveBuildError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"spark class archive: not built: {exc}", file=sys.stderr)
        return 1
    if built:
        print(f"spark class archive: built {path} ({path.stat().st_size / 2**20:.0f} MB) "
              f"in {time.monotonic() - started:.0f} s")
    else:
        print(f"spark class archive: {path} is present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
