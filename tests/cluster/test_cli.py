"""`logquake cluster start|status|stop` as a person runs it: detached processes, pid files,
bootstrap servers printed, per-partition offsets over the protocol, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import time

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
        if state.exists():  # never leave a detached broker or controller behind, even if the test failed
            document = json.loads(state.read_text())
            for node in [*document["brokers"], *([document["controller"]] if document.get("controller") else [])]:
                try:
                    os.kill(node["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_start_status_stop(data_dir) -> None:
    started = _logquake("cluster", "start", "--data-dir", str(data_dir), "--port", "0", "--config", "num.partitions=2", "--config", "offsets.topic.num.partitions=5")
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    assert [a.split(":")[0] for a in bootstrap.split(",")] == ["127.0.0.10", "127.0.0.11", "127.0.0.12"], "3 brokers by default"
    pids = [int((data_dir / f"broker-{b}.pid").read_text()) for b in range(3)]
    controller_pid = int((data_dir / "controller.pid").read_text())

    create_topic(bootstrap, "visible", 2, replication_factor=3)
    assert produce_numbered(bootstrap, "visible", 100, 2, {"acks": "all"}) == []

    def rows() -> list[list[str]]:
        status = _logquake("cluster", "status", "--data-dir", str(data_dir))
        assert status.returncode == 0, status.stderr
        assert all(f"pid {pid}" in status.stdout for pid in [*pids, controller_pid]) and "DOWN" not in status.stdout
        return [line.split() for line in status.stdout.splitlines() if line.strip().startswith("visible")]

    # topic, partition, leader, epoch, replicas, ISR, then "b<id>:<log end>/<HWM>" per replica.
    # Followers learn the HWM on their next fetch, so wait until every replica agrees.
    deadline = time.monotonic() + 30
    while True:
        table = rows()
        per_replica = [dict(cell.split(":", 1) for cell in row[6:]) for row in table]
        settled = all(len(set(r.values())) == 1 and "?" not in "".join(r.values()) for r in per_replica)
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [r[1] for r in table] == ["0", "1"]
    for row, replicas in zip(table, per_replica):
        assert int(row[2]) in (0, 1, 2) and sorted(row[4].split(",")) == ["0", "1", "2"] and sorted(row[5].split(",")) == ["0", "1", "2"]
        assert set(replicas) == {"b0", "b1", "b2"}
        assert settled, f"replicas disagree on log end / HWM: {replicas}"
    assert sum(int(r["b0"].split("/")[0]) for r in per_replica) == 100

    again = _logquake("cluster", "start", "--data-dir", str(data_dir), "--port", "0")
    assert again.returncode == 1 and "already running" in again.stderr

    stopped = _logquake("cluster", "stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    down = _logquake("cluster", "status", "--data-dir", str(data_dir))
    assert down.returncode == 1 and "DOWN" in down.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--brokers", "8"], "must lie in 1-7"),
        (["--brokers", "0"], "must lie in 1-7"),
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
