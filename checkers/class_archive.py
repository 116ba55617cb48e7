"""Where the Spark driver's class-data-sharing archive lives, and the JVM options that use it.

Much of a small check's wall time is the driver JVM loading Spark's classes: measured here,
`logquake analyze` of a 25-s run took 8.0 s, and 5.5 s with an AppCDS archive of the
classes a check loads (a new session 3.2 s -> 1.7 s). Java 17 writes such an archive when a
JVM run with `-XX:ArchiveClassesAtExit=FILE` exits, and maps it at start with
`-XX:SharedArchiveFile=FILE`. harness/spark_archive.py builds it (`make setup` does, once per
checkout); this module only names the file and, when it exists, the option.

The archive is valid only for the JVM and the class path that wrote it, so its file name is
a digest of both: the java binary PySpark will start (JAVA_HOME's, else the first on PATH),
its VM library and class library with their sizes and mtimes, and the path of PySpark's jars
directory with the name and size of every jar in it.
Another Java or PySpark simply finds no archive and starts as before. A truncated archive
would crash the JVM (SIGBUS, measured), so the builder only ever renames a finished,
verified file into place.

LOGQUAKE_SPARK_CLASS_ARCHIVE=off turns it off; LOGQUAKE_CACHE_DIR moves the cache
(default $XDG_CACHE_HOME/logquake, else ~/.cache/logquake).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyspark

SWITCH_ENV = "LOGQUAKE_SPARK_CLASS_ARCHIVE"
CACHE_ENV = "LOGQUAKE_CACHE_DIR"
# Set by the builder for its training check: the driver writes its loaded classes here at exit.
DUMP_ENV = "LOGQUAKE_SPARK_CLASS_ARCHIVE_DUMP"
# Set by the builder to verify a new archive: the driver must map this one (-Xshare:on).
REQUIRE_ENV = "LOGQUAKE_SPARK_CLASS_ARCHIVE_REQUIRE"


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "logquake"


def java_binary() -> Path | None:
    """The java PySpark's launcher runs: $JAVA_HOME/bin/java if JAVA_HOME is set, else PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return None
    return Path(os.path.realpath(found))


def pyspark_jars() -> Path:
    """The jars directory of the PySpark this process imports: the driver's class path."""
    return Path(pyspark.__file__).resolve().parent / "jars"


def archive_key(jars: Path | None = None) -> str | None:
    """A digest of what the archive depends on, or None when there is no java to start."""
    java = java_binary()
    if java is None:
        return None
    jars = (jars or pyspark_jars()).resolve()
    digest = hashlib.sha256()
    home = java.parent.parent
    # The launcher may stay byte-identical across JDK updates; the VM and class library do not.
    for part in (java, home / "lib" / "server" / "libjvm.so", home / "lib" / "modules"):
        if part.exists():
            stat = part.stat()
            digest.update(f"{part} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    # The path too: the JVM checks the class path it was dumped with, so another virtualenv's
    # identical PySpark cannot use this archive (it would silently be skipped).
    digest.update(f"jars {jars}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name} {jar.stat().st_size}\n".encode())
    return digest.hexdigest()[:20]


def archive_path(jars: Path | None = None) -> Path | None:
    """Where this machine's archive for this Java and PySpark is (whether or not it exists)."""
    key = archive_key(jars)
    return None if key is None else cache_dir() / "spark-cds" / f"driver-{key}.jsa"


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "on").lower() not in {"off", "0", "false", "no"}


def driver_java_options() -> str:
    """The driver JVM options for class data sharing: write the archive (the builder's
    training run), map the existing one, or nothing."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump}"
    required = os.environ.get(REQUIRE_ENV)
    if required:
        return f"-XX:SharedArchiveFile={required} -Xshare:on"
    if not enabled():
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    # -Xshare:auto (the default): an archive the JVM cannot map is skipped, not fatal.
    return f"-XX:SharedArchiveFile={path} -Xshare:auto"
