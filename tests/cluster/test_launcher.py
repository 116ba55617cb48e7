"""LocalCluster as tests and nemeses use it: process hooks, kill/start/stop/pause/resume,
readiness, clear start errors, and teardown that leaves no process behind."""

from __future__ import annotations

import os

import pytest

from cluster.launcher import BrokerStartError, LocalCluster, probe
from cluster.protocol.client import ProtocolClientError


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1].split()[0]


def test_hooks_wrap_the_command_and_extend_the_environment(make_cluster) -> None:
    wrapped: list[list[str]] = []

    def wrap(broker_id: int, argv: list[str]) -> list[str]:
        wrapped.append(argv)
        return ["env", f"LOGQUAKE_WRAPPED={broker_id}", *argv]

    cluster = make_cluster(wrap_argv=wrap, extra_env=lambda i: {"LOGQUAKE_EXTRA": f"broker-{i}"})
    broker = cluster.brokers[0]
    environ = _environ(broker.pid)
    assert environ["LOGQUAKE_WRAPPED"] == "0" and environ["LOGQUAKE_EXTRA"] == "broker-0"
    assert wrapped[0][1:3] == ["-m", "cluster.runtime.broker_main"] and "--broker-id" in wrapped[0]
    assert broker.host == "127.0.0.10" and broker.port > 0
    assert os.path.isdir(broker.data_dir) and os.path.isfile(broker.log_path)


def test_kill_start_stop_pause_resume(make_cluster) -> None:
    cluster = make_cluster()
    broker = cluster.brokers[0]
    first_pid, port = broker.pid, broker.port

    cluster.pause(0)
    assert _state(first_pid) == "T"
    with pytest.raises((OSError, ProtocolClientError)):
        probe(broker.host, broker.port, timeout_s=0.5)
    cluster.resume(0)
    probe(broker.host, broker.port)

    cluster.kill(0)
    assert not cluster.is_alive(0)
    cluster.start(0)
    assert cluster.is_alive(0) and broker.pid != first_pid and broker.port == port

    assert cluster.stop(0) == 0
    with open(broker.log_path) as log:
        assert "shut down cleanly" in log.read()
    cluster.start(0)
    probe(broker.host, broker.port)


def test_teardown_leaves_no_process(tmp_path) -> None:
    with LocalCluster(base_dir=tmp_path / "c", config={"offsets.topic.num.partitions": "1"}) as cluster:
        pid = cluster.brokers[0].pid
        cluster.pause(0)  # even a stopped broker is cleaned up
    assert not os.path.exists(f"/proc/{pid}") or _state(pid) == "Z"


def test_bad_config_is_a_start_error_with_the_broker_output(tmp_path) -> None:
    with pytest.raises(BrokerStartError, match=r"num.partitions='zero': not an integer"):
        with LocalCluster(base_dir=tmp_path / "c", config={"num.partitions": "zero"}):
            pass


def test_more_brokers_than_replication_allows_is_refused() -> None:
    with pytest.raises(ValueError, match="without replication"):
        LocalCluster(brokers=2)
