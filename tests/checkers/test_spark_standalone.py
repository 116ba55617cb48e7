"""`logquake analyze --spark-master spark://...` on a real Spark standalone cluster.

A master and two workers are started from the Spark inside the PySpark package
(tests/checkers/spark_cluster.py) on 127.0.0.1, once for this module, and stopped after it.
The same recorded run is analysed in local mode (this process's session) and on the cluster
(a `logquake analyze` process: a Python process holds one SparkContext, and this one's is
local), and the two results.json must be equal except for the check's wall time. The run
directory lives on a path every worker reads (this machine's file system): the workers'
executors read its Parquet history themselves.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.result import CheckResult
from harness.cli import main

from .builder import History
from .spark_cluster import StandaloneCluster

SPEC = {"name": "standalone", "workload": "queue", "seed": 3,
        "client_config": {"acks": "all", "enable.idempotence": "true"},
        "cluster_config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
        "workload_options": {"sub_via": ["assign"]}}
# Small executors: the machine has 2 cores and other work; one executor per worker.
CLUSTER_CONF = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                "spark.sql.shuffle.partitions": "4"}
KEYS = 12
# Three daemon JVMs, a driver process and two executors: 30-60 s on the shared 2-core machine,
# so it starts first under xdist (tests/conftest.py).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standalone():
    with StandaloneCluster(workers=2, worker_cores=1, worker_memory="1g") as cluster:
        yield cluster


def recorded_history() -> History:
    """A queue run over 12 keys with a kill, one lost acknowledged write, one duplicate, and a
    G0 write cycle between two transactions: findings in several keys."""
    h = History()
    logs: dict[int, list[tuple[int, int]]] = {k: [] for k in range(KEYS)}
    h.complete("nemesis", "start-kill", "info", {"targets": "one"})
    h.complete("nemesis", "start-kill", "info", {"killed": [0]})
    for i in range(KEYS * 6):
        key, value = i % KEYS, 1000 + i
        offset = len(logs[key])
        h.send(i % 3, key, value, offset)
        logs[key].append((offset, value))
    h.complete("nemesis", "stop-kill", "info", None)
    h.complete("nemesis", "stop-kill", "info", {"restarted": [0]})
    lost = logs[5].pop(2)  # acknowledged, never read
    assert lost[1] == 1000 + 2 * KEYS + 5
    duplicate = logs[7][-1][1]
    h.send(0, 7, duplicate, len(logs[7]))  # a retried send, written twice
    logs[7].append((len(logs[7]), duplicate))
    t1 = h.txn(1, [["send", 10, 50, 6], ["send", 10, 52, 8]])
    h.txn(2, [["send", 10, 51, 7]])
    logs[10] += [(6, 50), (7, 51), (8, 52)]
    assert t1 > 0
    for consumer in (10, 11):
        h.assign(consumer, range(KEYS))
        for key in range(KEYS):
            records = logs[key]
            for start in range(0, len(records), 4):
                h.poll(consumer, {key: records[start:start + 4]})
    return h


def comparable(results_json: Path) -> dict:
    raw = json.loads(results_json.read_text())
    raw["stats"].pop("check_s")  # the check's wall time
    return raw


def test_analyze_on_a_standalone_cluster_matches_local_mode(standalone, tmp_path, capsys):
    local = tmp_path / "local-run"
    local.mkdir()
    recorded_history().write(local / "history.jsonl")
    (local / "spec.json").write_text(json.dumps(SPEC))
    remote = tmp_path / "cluster-run"
    shutil.copytree(local, remote)

    conf = [arg for key, value in CLUSTER_CONF.items() for arg in ("--spark-conf", f"{key}={value}")]
    # The cluster's check runs in its own process while this one checks locally: most of both
    # is waiting for JVMs to start.
    output = tmp_path / "cluster-analyze.log"
    with open(output, "w") as log, subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "analyze", str(remote), "--spark-master", standalone.master_url,
             *conf], stdout=log, stderr=subprocess.STDOUT) as process:
        try:
            assert main(["analyze", str(local)]) == 1
            capsys.readouterr()
            expected = CheckResult.load(local / "results.json")
            found = {a.name: (a.count, a.allowed) for a in expected.anomalies}
            assert found["lost-write"] == (1, False) and found["duplicate"][0] == 1 and found["G0"] == (1, True), found
            process.wait(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 1, output.read_text()
    assert "verdict: INVALID" in output.read_text()
    assert comparable(remote / "results.json") == comparable(local / "results.json")
    assert (remote / "report.html").is_file()

    # It ran on the cluster: the master finished one application that held both workers'
    # cores, each worker launched an executor for it, and the executors ran its tasks.
    # Not "one executor directory per worker": when the driver stops, its executors exit with
    # status 0 and the master may launch a replacement on each worker before it learns that
    # the application ended, then kill it at once (seen in CI: directories 0 and 2 on one
    # worker). Not "each worker ran tasks" either: Spark's locality preference may give every
    # task to the executor that read the history (measured: 4 runs in 8 under load).
    apps = standalone.master_state()["completedapps"]
    assert [(app["name"], app["cores"]) for app in apps] == [("logquake-checkers", 2)], apps
    executors = [sorted((standalone.root / f"worker-{i}" / apps[0]["id"]).iterdir()) for i in range(2)]
    assert all(executors), executors
    ran_tasks = [e for launched in executors for e in launched
                 if "Running task" in (e / "stderr").read_text(errors="replace")]
    assert ran_tasks, executors


def test_a_second_master_in_a_process_with_a_session_is_refused(spark, standalone, tmp_path, capsys):
    # One SparkContext per process: asking for the cluster while the local session runs
    # must say so, not quietly check on the local session.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorded_history().write(run_dir / "history.jsonl")
    (run_dir / "spec.json").write_text(json.dumps(SPEC))
    assert main(["analyze", str(run_dir), "--spark-master", standalone.master_url]) == 254
    err = capsys.readouterr().err
    assert "already running in this process" in err and standalone.master_url in err
    assert not (run_dir / "results.json").exists()
