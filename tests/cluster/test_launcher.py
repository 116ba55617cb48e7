"""LocalCluster as tests and nemeses use it: process hooks, kill/start/stop/pause/resume,
readiness, clear start errors, and teardown that leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

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


def test_a_relative_base_dir_works_from_any_working_directory(tmp_path, monkeypatch) -> None:
    # The processes run in the project's directory: a relative base dir given from elsewhere
    # (`logquake test` started outside the checkout writes results/... relative to its own
    # directory) once made the controller write its ready file where the launcher never looked.
    monkeypatch.chdir(tmp_path)
    with LocalCluster(base_dir="relative/c", config={"offsets.topic.num.partitions": "1"}) as cluster:
        assert cluster.base_dir == str(tmp_path / "relative" / "c")
        probe(cluster.brokers[0].host, cluster.brokers[0].port)
    assert (tmp_path / "relative" / "c" / "controller.log").stat().st_size > 0


def test_bad_config_is_a_start_error_with_the_broker_output(tmp_path) -> None:
    with pytest.raises(BrokerStartError, match=r"num.partitions='zero': not an integer"):
        with LocalCluster(base_dir=tmp_path / "c", config={"num.partitions": "zero"}):
            pass


def test_more_brokers_than_the_address_plan_allows_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 7"):
        LocalCluster(brokers=8)
    with pytest.raises(ValueError, match="at least one broker"):
        LocalCluster(brokers=0)


def _wait_until_thread_gone(native_id: int) -> None:
    # join() returns before the OS thread has finished exiting; the parent-death signal is
    # sent during that exit, so wait for the kernel to have released the thread.
    while os.path.exists(f"/proc/self/task/{native_id}"):
        time.sleep(0.01)


def test_a_broker_restarted_from_a_short_lived_thread_outlives_the_thread(make_cluster) -> None:
    cluster = make_cluster()
    cluster.kill(0)
    errors: list[BaseException] = []

    def restart() -> None:
        try:
            cluster.start(0)
        except BaseException as error:
            errors.append(error)

    worker = threading.Thread(target=restart, name="short-lived-restarter")
    worker.start()
    worker.join()
    assert not errors, errors
    _wait_until_thread_gone(worker.native_id)
    broker = cluster.brokers[0]
    # A broker SIGKILLed by the thread's exit cannot answer this round trip.
    probe(broker.host, broker.port)
    assert cluster.is_alive(0), f"broker exited with status {broker.popen.returncode} when the thread that started it ended"


_HOLDER = """
import sys, threading, time
from cluster.launcher import LocalCluster
cluster = LocalCluster(base_dir=sys.argv[1], config={"offsets.topic.num.partitions": "1"}).__enter__()
print(cluster.brokers[0].pid, flush=True)
cluster.kill(0)
restarter = threading.Thread(target=cluster.start, args=(0,))
restarter.start(); restarter.join()
print(cluster.brokers[0].pid, cluster.brokers[0].port, flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_process_holding_a_cluster_takes_its_brokers_down(tmp_path) -> None:
    project_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "c")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=project_root, text=True)
    broker_pid = None
    try:
        first_pid = holder.stdout.readline().strip()
        restarted_pid = holder.stdout.readline().strip()
        assert first_pid and restarted_pid, f"holder failed: {holder.stderr.read() if holder.poll() is not None else '(running)'}"
        broker_pid, port = (int(field) for field in restarted_pid.split())
        probe("127.0.0.10", port)  # alive after its starter thread ended
        holder.kill()
        holder.wait()
        # The broker was started from a thread that has ended; it must still go down
        # with its process, which only the parent-death signal can make happen.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and os.path.exists(f"/proc/{broker_pid}") and _state(broker_pid) != "Z":
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{broker_pid}") or _state(broker_pid) == "Z", f"broker {broker_pid} survived the SIGKILL of its parent"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if broker_pid is not None and os.path.exists(f"/proc/{broker_pid}"):
            os.kill(broker_pid, signal.SIGKILL)
        holder.stdout.close()
        holder.stderr.close()
