"""EchoCluster: N echo-server processes with LocalCluster's per-broker interface, so
ClusterControl and the nemesis packages drive them exactly as they drive real brokers.
Server i binds 127.0.0.(10+i) like broker i. Processes die with their parent
(PR_SET_PDEATHSIG) and are killed on close."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
READY_TIMEOUT_S = 20.0


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class EchoProcess:
    broker_id: int
    host: str
    port: int
    data_dir: str
    log_path: str
    pid: int | None = None
    popen: subprocess.Popen | None = field(default=None, repr=False)


class EchoCluster:
    def __init__(self, count: int, *, base_dir: str | None = None,
                 extra_env: Callable[[int], dict[str, str]] | None = None) -> None:
        self._own_base_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="logquake-echo-")
        self._extra_env = extra_env
        self.brokers = [EchoProcess(i, f"127.0.0.{10 + i}", 0, os.path.join(self.base_dir, f"echo-{i}"),
                                    os.path.join(self.base_dir, f"echo-{i}.log")) for i in range(count)]

    def __enter__(self) -> "EchoCluster":
        try:
            for broker in self.brokers:
                self.start(broker.broker_id)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self, broker_id: int, *, until: str = "ready") -> EchoProcess:
        broker = self.brokers[broker_id]
        if self.is_alive(broker_id):
            raise RuntimeError(f"echo server {broker_id} is already running")
        ready = broker.data_dir + ".ready"
        if os.path.exists(ready):
            os.remove(ready)
        env = dict(os.environ)
        env["PYTHONPATH"] = PROJECT_ROOT
        if self._extra_env:
            env.update(self._extra_env(broker_id))
        with open(broker.log_path, "ab") as log:
            broker.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.nemeses.echo_server", broker.host, str(broker.port), ready],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=PROJECT_ROOT,
                preexec_fn=_die_with_parent)
        broker.pid = broker.popen.pid
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not os.path.exists(ready):
            if broker.popen.poll() is not None:
                raise RuntimeError(f"echo server {broker_id} exited: {Path(broker.log_path).read_text()[-2000:]}")
            if time.monotonic() > deadline:
                self.kill(broker_id)
                raise RuntimeError(f"echo server {broker_id} not ready after {READY_TIMEOUT_S} s")
            time.sleep(0.01)
        with open(ready) as f:
            broker.port = json.load(f)["port"]
        return broker

    def is_alive(self, broker_id: int) -> bool:
        popen = self.brokers[broker_id].popen
        return popen is not None and popen.poll() is None

    def _signal(self, broker_id: int, signum: int) -> None:
        if self.is_alive(broker_id):
            self.brokers[broker_id].popen.send_signal(signum)

    def kill(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGKILL)
        popen = self.brokers[broker_id].popen
        if popen is not None:
            popen.wait(timeout=10)

    def stop(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGCONT)
        self.kill(broker_id)

    def pause(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGCONT)

    def close(self) -> None:
        try:
            for broker in self.brokers:
                self.kill(broker.broker_id)
        finally:
            if self._own_base_dir:
                shutil.rmtree(self.base_dir, ignore_errors=True)


def ask(host: str, port: int, line: str, timeout_s: float = 2.0) -> str:
    """One request from the harness side (unbound, so from 127.0.0.1); raises on timeout."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall((line + "\n").encode())
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionResetError(f"{host}:{port} closed the connection")
            answer += chunk
    return answer.decode().strip()
