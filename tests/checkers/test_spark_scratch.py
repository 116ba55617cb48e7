"""Spark's scratch files live in one directory per process, removed at exit, and the
directories of processes that died without cleaning up are removed by the next session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from checkers.spark import SCRATCH_PREFIX, remove_orphaned_scratch

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    from checkers.spark import make_spark, scratch_dir
    spark = make_spark()
    assert spark.range(1000).repartition(4).count() == 1000
    print(scratch_dir())
    print(" ".join(sorted(p.name.split("-")[0] for p in scratch_dir().iterdir())))
""")


def test_a_session_keeps_its_scratch_in_one_directory_removed_at_exit(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    scratch_line, contents = out.stdout.strip().splitlines()[-2:]
    scratch = Path(scratch_line)
    assert scratch.parent == tmp_path and scratch.name.startswith(SCRATCH_PREFIX)
    # While it ran, the JVM's own temporary files and Spark's local dirs were in there ...
    assert "spark" in contents.split() or "blockmgr" in contents.split(), contents
    # ... and nothing of it is left, in the scratch directory or beside it.
    assert list(tmp_path.iterdir()) == []


def test_scratch_of_dead_processes_is_removed_and_of_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"{SCRATCH_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-def"
    other = tmp_path / "spark-not-ours"
    for path in (orphan, live, other):
        (path / "blockmgr-1").mkdir(parents=True)
    assert remove_orphaned_scratch(tmp_path) == [orphan]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
