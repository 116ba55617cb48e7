"""The one SparkSession factory every checker uses.

Defaults follow reference/pyspark.md: local[*], shuffle partitions = default parallelism =
2 × cores, Arrow on, UI off, driver bound to 127.0.0.1; adaptive execution on for big
histories (off for small ones, see below), and the C1-only JIT (with a larger code cache:
the default 48 MB fills up and the JVM stops compiling) for small runs (it starts faster and is 15–20 % quicker on small jobs, but halves
throughput near 10^7 rows, so big runs turn it off). `spark_master` and plain Spark settings
(`spark_conf`) send the same job to a real cluster.

Spark's scratch files (its local dirs, the driver JVM's java.io.tmpdir: shuffle blocks,
artifacts, native libraries) go to one private directory per process, removed when the
process exits. Left in /tmp they outlived every run whose JVM was killed before its own
shutdown hooks ran (a run inside its network namespace ends with the namespace's processes
SIGKILLed). A process killed outright cannot clean up, so a new session first removes the
scratch directories of processes that no longer exist.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from pyspark.sql import SparkSession

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
    }
    if small:
        # Measured here: the check job has ~20 shuffles; with adaptive execution each query
        # stage becomes its own Spark job (about 110 jobs instead of 23 for a tiny history,
        # 2-4x slower), while with few fixed shuffle partitions the static plan loses
        # nothing on small inputs. Big histories keep AQE for its coalescing and joins.
        conf["spark.driver.extraJavaOptions"] = C1_JIT_OPTION
    return conf


SCRATCH_PREFIX = "logquake-spark-"
_SCRATCH_NAME = re.compile(re.escape(SCRATCH_PREFIX) + r"(\d+)-")
_scratch: Path | None = None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphaned_scratch(parent: Path) -> list[Path]:
    """Remove scratch directories under `parent` whose process is gone; returns them."""
    removed = []
    for path in parent.glob(SCRATCH_PREFIX + "*"):
        match = _SCRATCH_NAME.match(path.name)
        if match and path.is_dir() and not _pid_alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def scratch_dir() -> Path:
    """This process's Spark scratch directory (made on first use, removed at exit)."""
    global _scratch
    if _scratch is None:
        parent = Path(tempfile.gettempdir())
        remove_orphaned_scratch(parent)
        _scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=parent))
        atexit.register(_remove_scratch, _scratch)
    return _scratch


def _remove_scratch(path: Path) -> None:
    session = SparkSession.getActiveSession()
    if session is not None:
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - exiting anyway; the directory goes regardless
            pass
    shutil.rmtree(path, ignore_errors=True)


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
    if "-Djava.io.tmpdir=" not in java_options:
        conf["spark.driver.extraJavaOptions"] = f"{java_options} -Djava.io.tmpdir={scratch}".strip()
    if (spark_master or "local").startswith("local"):
        conf.setdefault("spark.local.dir", str(scratch))  # executors elsewhere keep their own
    builder = SparkSession.builder.appName(app_name).master(spark_master or "local[*]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
