"""The Spark driver's class-data-sharing archive: where it lives, when the driver maps it,
and that the builder writes a verified one (checkers/class_archive.py, harness/spark_archive.py)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from checkers import class_archive
from harness import spark_archive

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(class_archive.CACHE_ENV, str(tmp_path / "cache"))
    for name in (class_archive.SWITCH_ENV, class_archive.DUMP_ENV, class_archive.REQUIRE_ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache"


def test_the_driver_maps_the_archive_only_when_it_exists_and_is_not_switched_off(cache, monkeypatch):
    path = class_archive.archive_path()
    assert path is not None and path.parent == cache / "spark-cds" and path.name.startswith("driver-")
    assert class_archive.driver_java_options() == ""
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0")
    assert class_archive.driver_java_options() == f"-XX:SharedArchiveFile={path} -Xshare:auto"
    monkeypatch.setenv(class_archive.SWITCH_ENV, "off")
    assert class_archive.driver_java_options() == ""
    # The builder's two runs: dump the loaded classes; require the new archive.
    monkeypatch.setenv(class_archive.DUMP_ENV, "/x/new.jsa")
    assert class_archive.driver_java_options() == "-XX:ArchiveClassesAtExit=/x/new.jsa"
    monkeypatch.delenv(class_archive.DUMP_ENV)
    monkeypatch.setenv(class_archive.REQUIRE_ENV, "/x/new.jsa")
    assert class_archive.driver_java_options() == "-XX:SharedArchiveFile=/x/new.jsa -Xshare:on"


def test_another_java_has_another_archive_and_no_java_builds_none(cache, tmp_path, monkeypatch):
    path_java = class_archive.archive_path()
    other = tmp_path / "jdk"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "java").write_text("#!/bin/sh\n")
    (other / "bin" / "java").chmod(stat.S_IRWXU)
    monkeypatch.setenv("JAVA_HOME", str(other))
    assert class_archive.java_binary() == (other / "bin" / "java").resolve()
    assert class_archive.archive_path() not in (None, path_java)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert class_archive.archive_path() is None and class_archive.driver_java_options() == ""
    with pytest.raises(spark_archive.ArchiveBuildError, match="no java"):
        spark_archive.build()
    assert not cache.exists()


def archive_of(jars: Path, record: bool = True) -> Path:
    """A stand-in archive (and its record) for the PySpark whose jars are in `jars`."""
    path = class_archive.archive_path(jars)
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"another checkout's")
    if record:
        path.with_suffix(".json").write_text(json.dumps({"jars": str(jars)}))
    return path


@pytest.mark.slow  # two checks and a session: about 35 s
def test_the_builder_writes_a_verified_archive_once_removes_stale_ones_and_spark_maps_it(cache, tmp_path):
    (tmp_path / "other-venv").mkdir()
    (tmp_path / "other-venv" / "spark-core.jar").write_bytes(b"jar")
    other_checkout = archive_of(tmp_path / "other-venv")  # its virtualenv is there: kept
    (tmp_path / "gone-venv").mkdir()
    removed_venv = archive_of(tmp_path / "gone-venv")
    (tmp_path / "gone-venv").rmdir()  # removed since
    (tmp_path / "changed-venv").mkdir()
    changed = archive_of(tmp_path / "changed-venv")
    (tmp_path / "changed-venv" / "spark-core.jar").write_bytes(b"an upgrade")  # its PySpark changed
    unrecorded = archive_of(tmp_path / "other-venv" / "..", record=False)

    path, built = spark_archive.build()
    assert built and path == class_archive.archive_path() and path.stat().st_size > 10 * 2**20
    assert json.loads(path.with_suffix(".json").read_text()) == {"jars": str(class_archive.pyspark_jars())}
    assert other_checkout.exists() and other_checkout.with_suffix(".json").exists()
    for stale in (removed_venv, changed, unrecorded):
        assert not stale.exists() and not stale.with_suffix(".json").exists(), stale
    names = sorted(p.name for p in path.parent.iterdir())  # no partial file left
    assert names == sorted([".build.lock", path.name, path.with_suffix(".json").name, other_checkout.name,
                            other_checkout.with_suffix(".json").name])
    assert spark_archive.build() == (path, False)
    shutil.rmtree(tmp_path / "other-venv")  # that checkout removed: the next call, a no-op build, cleans up
    assert spark_archive.build() == (path, False) and not other_checkout.exists()

    # A session started the usual way (make_spark) maps it: its driver JVM got the option.
    probe = ("import json; from checkers.spark import make_spark; s = make_spark(); "
             "bean = s._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean(); "
             "print(json.dumps(list(bean.getInputArguments()))); s.stop()")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=PROJECT,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    arguments = json.loads(out.stdout.strip().splitlines()[-1])
    assert f"-XX:SharedArchiveFile={path}" in arguments, arguments
