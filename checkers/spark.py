"""The one SparkSession factory every checker uses.

Defaults follow reference/pyspark.md: local[*], shuffle partitions = default parallelism =
2 × cores, Arrow on, UI off, driver bound to 127.0.0.1; adaptive execution on for big
histories (off for small ones, see below), and the C1-only JIT (with a larger code cache:
the default 48 MB fills up and the JVM stops compiling) for small runs (it starts faster and is 15–20 % quicker on small jobs, but halves
throughput near 10^7 rows, so big runs turn it off). `spark_master` and plain Spark settings
(`spark_conf`) send the same job to a real cluster. The driver JVM maps the class-data-sharing
archive when this machine has one (checkers/class_archive.py): a check then takes ~2.9 s less.

Spark's scratch files (its local dirs, the driver JVM's java.io.tmpdir: shuffle blocks,
artifacts, native libraries) go to one private directory per process, removed when the
process exits. Left in /tmp they outlived every run whose JVM was killed before its own
shutdown hooks ran (a run inside its network namespace ends with the namespace's processes
SIGKILLed). A process killed outright cannot clean up, so a new session first removes the
scratch directories whose owner is gone.

Ownership is a lock, not a PID: the owner holds an exclusive flock on the directory's lock
file for as long as it lives, and the kernel drops it when the process dies however it dies.
A PID says nothing across PID namespaces (a fault run analyses inside its own, where a live
process outside does not exist), so the old PID check deleted the scratch of live sessions
and their Spark jobs failed with Py4J errors.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

from pyspark import SparkContext
from pyspark.sql import SparkSession

from checkers import class_archive

C1_JIT_OPTION = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"


def default_conf(*, cores: int | None = None, small: bool = True) -> dict[str, str]:
    cores = cores or os.cpu_count() or 2
    partitions = str(2 * cores)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": partitions,
        "spark.default.parallelism": partitions,
        "spark.sql.adaptive.enabled": "false" if small else "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        # `run=20260101T…` must stay a string, not become a number or a timestamp.
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.log.level": "WARN",
        # Above this many input paths Spark lists files with a Spark job of its own; one
        # job's hundred run directories are listed 3-4x faster by the driver (0.2 s against
        # 0.7 s for 100 histories, bench_checkers --many).
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "10000",
    }
    if small:
        # Measured here: the check job has ~20 shuffles; with adaptive execution each query
        # stage becomes its own Spark job (about 110 jobs instead of 23 for a tiny history,
        # 2-4x slower), while with few fixed shuffle partitions the static plan loses
        # nothing on small inputs. Big histories keep AQE for its coalescing and joins.
        conf["spark.driver.extraJavaOptions"] = C1_JIT_OPTION
        # On a cluster the executors are JVMs of their own (in local mode this is unused):
        # measured on a standalone cluster of two 1-core workers, a small check took 8-10 s
        # with C1-only executors against 13-15 s with the default JIT.
        conf["spark.executor.extraJavaOptions"] = C1_JIT_OPTION
    return conf


SCRATCH_PREFIX = "logquake-spark-"
LOCK_NAME = ".owner.lock"
# A directory without a lock file is either being made (the lock follows within
# microseconds) or was left by a version that owned scratch by PID: only the latter is old.
UNLOCKED_GRACE_S = 3600
_scratch: Path | None = None
_owner_lock_fd: int | None = None


def _owner_gone(path: Path) -> bool:
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        try:
            return time.time() - path.stat().st_mtime > UNLOCKED_GRACE_S
        except FileNotFoundError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its owner is alive, in whatever PID namespace
    finally:
        os.close(fd)  # also releases the lock if we got it
    return True


def remove_orphaned_scratch(parent: Path) -> list[Path]:
    """Remove scratch directories under `parent` whose owner is gone; returns them."""
    removed = []
    for path in parent.glob(SCRATCH_PREFIX + "*"):
        if path.is_dir() and path != _scratch and _owner_gone(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def claim_scratch(parent: Path) -> Path:
    """A new scratch directory under `parent`, owned (locked) by this process until it exits."""
    global _owner_lock_fd
    path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=parent))
    fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children
    fcntl.flock(fd, fcntl.LOCK_EX)
    _owner_lock_fd = fd
    return path


def scratch_dir() -> Path:
    """This process's Spark scratch directory (made on first use, removed at exit)."""
    global _scratch
    if _scratch is None:
        parent = Path(tempfile.gettempdir())
        remove_orphaned_scratch(parent)
        _scratch = claim_scratch(parent)
        atexit.register(_remove_scratch, _scratch)
    return _scratch


def _remove_scratch(path: Path) -> None:
    context = SparkContext._active_spark_context  # whichever thread started it (see make_spark)
    if context is not None:
        try:
            context.stop()
        except Exception:  # noqa: BLE001 - exiting anyway; the directory goes regardless
            pass
    shutil.rmtree(path, ignore_errors=True)


class SparkMasterConflict(RuntimeError):
    """This process already runs a SparkSession on another master."""


def make_spark(*, spark_master: str | None = None, spark_conf: Mapping[str, str] | None = None,
               small: bool = True, app_name: str = "logquake-checkers") -> SparkSession:
    """Start (or join) the SparkSession. `spark_conf` overrides the defaults key by key."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The per-key pass runs Python in the workers: by default the driver's own interpreter
    # (and so its numpy/pyarrow), not whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = default_conf(small=small)
    conf.update(spark_conf or {})
    scratch = scratch_dir()
    java_options = conf.get("spark.driver.extraJavaOptions", "")
    sharing = class_archive.driver_java_options()
    if sharing and "SharedArchiveFile" not in java_options and "ArchiveClassesAtExit" not in java_options:
        java_options = f"{java_options} {sharing}".strip()  # the driver's classes from the archive: a faster start
    if "-Djava.io.tmpdir=" not in java_options:
        java_options = f"{java_options} -Djava.io.tmpdir={scratch}".strip()
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    if (spark_master or "local").startswith("local"):
        conf.setdefault("spark.local.dir", str(scratch))  # executors elsewhere keep their own
    # The process's context, not SparkSession.getActiveSession(): that is per thread (the JVM
    # thread Py4J pins to this Python thread), so a session started in another thread (an
    # in-process run's check) was invisible here, and the check quietly ran on it instead of
    # on the cluster asked for (seen in make test).
    active = SparkContext._active_spark_context
    if active is not None and spark_master is not None and active.master != spark_master:
        # getOrCreate would quietly hand back the running session and its master.
        raise SparkMasterConflict(f"a Spark session on {active.master} is already running in this "
                                  f"process; cannot also use --spark-master {spark_master} (one SparkContext per "
                                  "process: run the check in a process of its own)")
    builder = SparkSession.builder.appName(app_name).master(spark_master or "local[*]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
