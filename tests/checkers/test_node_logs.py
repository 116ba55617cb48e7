"""checkers/node_logs.py: errors inside the cluster, as its real code logs them, make the run
invalid with a `node-error` anomaly naming the file, line and exception; what Kafka does on
purpose (a broker halting when its log directories failed) and ordinary warnings do not."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from checkers.node_logs import ANOMALY, add_node_log_verdict
from checkers.result import CheckResult

PROJECT = Path(__file__).resolve().parents[2]


def run_dir_with_cluster(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "run" / "cluster"
    cluster.mkdir(parents=True)
    return tmp_path / "run", cluster


def verdict(run_dir: Path) -> CheckResult:
    return add_node_log_verdict(CheckResult(valid=True), run_dir)


def details(result: CheckResult) -> list[dict]:
    (anomaly,) = [a for a in result.anomalies if a.name == ANOMALY]
    assert not anomaly.allowed and anomaly.count == len(anomaly.witnesses)
    return [w.detail for w in anomaly.witnesses]


def test_a_broker_process_that_fails_is_a_node_error(tmp_path):
    run_dir, cluster = run_dir_with_cluster(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        # A real broker process that cannot bind its port: it logs "broker 0 failed" and exits 1.
        out = subprocess.run([sys.executable, "-m", "cluster.runtime.broker_main", "--broker-id", "0", "--host", "127.0.0.1",
                              "--port", str(port), "--data-dir", str(cluster / "broker-0"), "--log-file",
                              str(cluster / "broker-0.log"), "--config", "controller.quorum.voters=1000@127.0.0.1:1"],
                             capture_output=True, text=True, timeout=60, cwd=PROJECT)
    finally:
        taken.close()
    assert out.returncode == 1, out.stderr
    result = verdict(run_dir)
    assert result.valid is False
    [error] = details(result)
    assert error["kind"] == "process-failed" and error["file"] == "cluster/broker-0.log" and error["line"] == 1
    assert error["text"] == "broker 0 failed" and "address already in use" in error["exception"]
    assert result.stats["node_logs"] == {"files": 1, "errors": 1, "kinds": ["process-failed"]}


def test_a_request_handler_that_raises_and_an_unretrieved_task_exception_are_node_errors(tmp_path):
    run_dir, cluster = run_dir_with_cluster(tmp_path)
    out = subprocess.run([sys.executable, "-m", "tests.checkers.node_log_child", "handler", str(cluster / "broker-1.log")],
                         capture_output=True, text=True, timeout=60, cwd=PROJECT)
    assert out.returncode == 0 and "client: ProtocolClientError" in out.stdout, out.stderr
    result = verdict(run_dir)
    assert result.valid is False
    handler, task = details(result)
    assert handler["kind"] == "request-handler-error" and "handling api 18 v3 failed" in handler["text"]
    assert handler["exception"] == "RuntimeError: a bug while handling api 18"
    assert task["kind"] == "uncaught-exception" and task["text"] == "Task exception was never retrieved"
    assert task["exception"] == "ValueError: nobody awaits this task" and task["line"] > handler["line"]


def test_a_controller_halt_is_a_node_error(tmp_path):
    run_dir, cluster = run_dir_with_cluster(tmp_path)
    log = cluster / "controller.log"
    with open(log, "ab") as output:  # as the launcher starts a node: its stderr into its log
        out = subprocess.run([sys.executable, "-m", "tests.checkers.node_log_child", "halt", str(log)],
                             stdout=output, stderr=output, timeout=60, cwd=PROJECT)
    assert out.returncode == 3
    [error] = details(verdict(run_dir))
    assert error["kind"] == "controller-halted" and error["file"] == "cluster/controller.log"


def test_a_traceback_on_a_nodes_own_output_is_a_node_error_and_kafkas_own_halts_and_warnings_are_not(tmp_path):
    run_dir, cluster = run_dir_with_cluster(tmp_path)
    # The lines a disk fault's halt writes (cluster/broker/broker.py, log_dir.py), a warning,
    # then what Python prints when a process dies before its logging is set up.
    (cluster / "broker-2.log").write_text(
        "2026-11-28 07:58:48,789 WARNING cluster.broker.replica_fetcher: t0-1: leader 1 unreachable\n"
        "2026-11-28 07:58:49,001 ERROR cluster.broker.log_dir: log directory /d/broker-2 failed: [Errno 28] No space left\n"
        "2026-11-28 07:58:49,002 ERROR cluster.broker.broker: broker 2 halted: all log directories have failed (write)\n")
    result = verdict(run_dir)
    assert result.valid is True and result.anomalies == []
    assert result.stats["node_logs"] == {"files": 1, "errors": 0, "kinds": []}
    with open(cluster / "broker-2.log", "a") as log:
        log.write("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                  "FileExistsError: [Errno 17] File exists: '/d/broker-2'\n")
    [error] = details(verdict(run_dir))
    assert error["kind"] == "uncaught-exception" and error["line"] == 4
    assert error["exception"] == "FileExistsError: [Errno 17] File exists: '/d/broker-2'"


def test_a_run_without_node_logs_says_they_were_not_read(tmp_path):
    result = verdict(tmp_path)
    assert result.valid is True and result.stats["node_logs"]["files"] == 0
    assert "not read" in result.stats["node_logs"]["note"]


def test_a_chained_traceback_is_one_error_ending_with_the_last_exception_and_a_later_one_another(tmp_path):
    run_dir, cluster = run_dir_with_cluster(tmp_path)
    (cluster / "broker-0.log").write_text(
        "2026-11-28 07:58:49,001 ERROR cluster.runtime.connection: connection 3 (127.0.0.1:9): handling api 1 v12 failed\n"
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\nKeyError: 7\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n  File \"a.py\", line 2, in g\nRuntimeError: while handling 7\n"
        "2026-11-28 07:58:50,000 WARNING cluster.broker.groups: member left\n"
        "Traceback (most recent call last):\n  File \"b.py\", line 3, in h\nOSError: [Errno 5] Input/output error\n")
    handler, logged = details(verdict(run_dir))
    assert handler["kind"] == "request-handler-error" and handler["exception"] == "RuntimeError: while handling 7"
    assert logged == {"file": "cluster/broker-0.log", "line": 12, "kind": "uncaught-exception",
                      "text": "Traceback (most recent call last):", "exception": "OSError: [Errno 5] Input/output error"}
