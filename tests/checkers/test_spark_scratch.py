"""Spark's scratch files live in one directory per process, removed at exit, and the
directories of processes that died without cleaning up are removed by the next session; a
process owns its directory by a lock, which holds across PID namespaces."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
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


OWNER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from checkers.spark import claim_scratch
    path = claim_scratch(Path(sys.argv[1]))
    (path / "blockmgr-1").mkdir()
    print(path, flush=True)
    if sys.argv[2] == "stay":
        time.sleep(300)
""")

CLEANER = "import sys; from pathlib import Path; from checkers.spark import remove_orphaned_scratch; " \
          "print(' '.join(p.name for p in remove_orphaned_scratch(Path(sys.argv[1]))))"


def _owner(parent: Path, stay: bool) -> tuple[subprocess.Popen, Path]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(parent), "stay" if stay else "exit"], cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    path = Path(owner.stdout.readline().strip())
    assert path.is_dir(), path
    return owner, path


def test_scratch_whose_owner_died_is_removed_and_a_live_owners_kept(tmp_path):
    dead, orphan = _owner(tmp_path, stay=False)
    dead.wait(timeout=60)
    live, kept = _owner(tmp_path, stay=True)
    try:
        other = tmp_path / "spark-not-ours"
        (other / "blockmgr-1").mkdir(parents=True)
        unlocked_new = tmp_path / f"{SCRATCH_PREFIX}1-being-made"
        unlocked_old = tmp_path / f"{SCRATCH_PREFIX}2-left-by-an-old-version"
        unlocked_new.mkdir()
        unlocked_old.mkdir()
        two_hours_ago = time.time() - 7200
        os.utime(unlocked_old, (two_hours_ago, two_hours_ago))
        assert sorted(remove_orphaned_scratch(tmp_path)) == sorted([orphan, unlocked_old])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([kept.name, other.name, unlocked_new.name])
    finally:
        live.kill()
        live.wait()
    assert remove_orphaned_scratch(tmp_path) == [kept], "the owner was SIGKILLed: its lock went with it"


def test_a_cleaner_in_another_pid_namespace_keeps_a_live_owners_scratch(tmp_path):
    # A fault run analyses inside its own PID namespace, where processes outside it have no
    # PID: ownership by PID took a live session outside for dead and deleted its scratch.
    live, kept = _owner(tmp_path, stay=True)
    try:
        base = ["unshare", "--pid", "--fork"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--pid", "--fork"]
        inside = subprocess.run([*base, sys.executable, "-c", CLEANER, str(tmp_path)], cwd=REPO, capture_output=True,
                                text=True, timeout=120)
        assert inside.returncode == 0, inside.stderr
        assert inside.stdout.strip() == "" and kept.is_dir(), f"removed from inside the namespace: {inside.stdout}"
    finally:
        live.kill()
        live.wait()
    inside = subprocess.run([*base, sys.executable, "-c", CLEANER, str(tmp_path)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert inside.stdout.strip() == kept.name and not kept.exists()
