"""`logquake cluster start|status|stop` as a person runs it: detached processes, pid files,
bootstrap servers printed, per-partition offsets over the protocol, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.cluster.kafka_helpers import create_topic, produce_numbered


def _logquake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "cluster"
    try:
        yield path
    finally:
        state = path / "cluster.json"
        if state.exists():  # never leave a detached broker behind, even if the test failed
            for broker in json.loads(state.read_text())["brokers"]:
                try:
                    os.kill(broker["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_start_status_stop(data_dir) -> None:
    started = _logquake("cluster", "start", "--data-dir", str(data_dir), "--port", "0", "--config", "num.partitions=2", "--config", "offsets.topic.num.partitions=5")
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    assert bootstrap.startswith("127.0.0.10:")
    pid = int((data_dir / "broker-0.pid").read_text())

    create_topic(bootstrap, "visible", 2)
    assert produce_numbered(bootstrap, "visible", 100, 2, {"acks": "all"}) == []

    status = _logquake("cluster", "status", "--data-dir", str(data_dir))
    assert status.returncode == 0, status.stderr
    assert f"pid {pid}" in status.stdout and "alive" in status.stdout
    rows = [line.split() for line in status.stdout.splitlines() if line.strip().startswith("visible")]
    assert [r[1] for r in rows] == ["0", "1"]
    assert all(r[2] == "0" and r[3] == r[4] for r in rows), "log start 0, LEO = HWM on a single broker"
    assert sum(int(r[3]) for r in rows) == 100

    again = _logquake("cluster", "start", "--data-dir", str(data_dir), "--port", "0")
    assert again.returncode == 1 and "already running" in again.stderr

    stopped = _logquake("cluster", "stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    down = _logquake("cluster", "status", "--data-dir", str(data_dir))
    assert down.returncode == 1 and "DOWN" in down.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--brokers", "3"], "only 1 is supported"),
        (["--config", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_start_rejects_bad_arguments(data_dir, args, message) -> None:
    result = _logquake("cluster", "start", "--data-dir", str(data_dir), "--port", "0", *args)
    assert result.returncode == 254 and message in result.stderr


def test_bad_broker_config_fails_start_with_the_broker_error(data_dir) -> None:
    result = _logquake("cluster", "start", "--data-dir", str(data_dir), "--port", "0", "--config", "log.flush.interval.messages=often")
    assert result.returncode == 1
    assert "log.flush.interval.messages='often'" in result.stderr
