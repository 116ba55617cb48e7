"""A real Spark standalone cluster for tests: one master and N workers on 127.0.0.1.

Started from the Spark that the PySpark package ships (`pyspark/bin/spark-class`, no
download) with Java from PATH, each daemon in its own process group with small memory and
one core, logs and work directories in a private temporary directory. `StandaloneCluster`
is a context manager: leaving it stops every daemon (SIGTERM, then SIGKILL after a grace
period) and removes the directory, also when starting failed half-way, so no JVM outlives
the test that started it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message carries the daemons' last log lines."""


def spark_home() -> Path:
    """The Spark distribution inside the installed PySpark package."""
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise ClusterStartError(f"{home}: no bin/spark-class or jars/ (is this a full PySpark install?)")
    return home


def free_port() -> int:
    """A port free right now on 127.0.0.1 (the daemon binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass
class StandaloneCluster:
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    daemon_memory: str = "256m"  # the master's and workers' own heaps (not the executors')
    start_timeout_s: float = 60.0
    root: Path = field(init=False)
    master_port: int = field(init=False, default=0)
    master_ui_port: int = field(init=False, default=0)
    _processes: list[tuple[str, subprocess.Popen]] = field(init=False, default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    def __enter__(self) -> "StandaloneCluster":
        self.root = Path(tempfile.mkdtemp(prefix="logquake-standalone-"))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        conf_dir = self.root / "conf"
        conf_dir.mkdir(exist_ok=True)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(conf_dir),  # empty: no spark-env.sh or defaults from elsewhere
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            # The daemons do little work: the C1-only JIT and the serial collector start faster.
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            # Executors' scratch (shuffle files) under this cluster's directory, removed with it.
            "SPARK_LOCAL_DIRS": str(self.root / "local"),
        })
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")
        try:
            process = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=self._env(),
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)  # its own group: stop() kills launcher and JVM
        finally:
            log.close()
        self._processes.append((name, process))

    def _start(self) -> None:
        self.master_port, self.master_ui_port = free_port(), free_port()
        self._spawn("master", [MASTER_CLASS, "--host", HOST, "--port", str(self.master_port),
                               "--webui-port", str(self.master_ui_port)])
        deadline = time.monotonic() + self.start_timeout_s
        # Workers started before the master listens retry only after 5-15 s: wait for it.
        self._wait_until(lambda: self.master_state() is not None, deadline, "the master did not answer")
        for i in range(self.workers):
            work_dir = self.root / f"worker-{i}"
            work_dir.mkdir()
            self._spawn(f"worker-{i}", [WORKER_CLASS, "--host", HOST, "--port", "0", "--webui-port",
                                        str(free_port()), "--cores", str(self.worker_cores), "--memory",
                                        self.worker_memory, "--work-dir", str(work_dir), self.master_url])
        self._wait_until(lambda: self.alive_workers() == self.workers, deadline,
                         f"not all {self.workers} workers registered")

    def _wait_until(self, ready, deadline: float, failure: str) -> None:
        while not ready():
            for name, process in self._processes:
                if process.poll() is not None:
                    raise ClusterStartError(f"the {name} exited with {process.returncode} while starting:\n"
                                            + self.log_tail(name))
            if time.monotonic() > deadline:
                raise ClusterStartError(f"{failure} within {self.start_timeout_s:.0f} s "
                                        f"({self.alive_workers()} alive):\n"
                                        + "\n".join(self.log_tail(name, 10) for name, _ in self._processes))
            time.sleep(0.2)

    def master_state(self) -> dict | None:
        """The master's state as its web UI serves it at /json, or None while it is not up."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.master_ui_port}/json/", timeout=2) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.master_state() or {}
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = (self.root / f"{name}.log").read_text(errors="replace")
        except OSError:
            return f"({name}: no log)"
        return "\n".join(f"{name}| {line}" for line in text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop every daemon (workers first: they kill their executors), then remove the files."""
        for _, process in reversed(self._processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, process in reversed(self._processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process, signal.SIGKILL)  # anything left in its group (an executor JVM)
            process.wait()
        self._processes.clear()
        root = getattr(self, "root", None)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
