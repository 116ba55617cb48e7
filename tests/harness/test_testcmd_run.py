"""`logquake test` end to end on the bundled cluster: a real run, and an interrupted one."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.history import read_history
from tests.run_logquake import run_command

PROJECT = Path(__file__).resolve().parents[2]


def logquake_test(*argv, results):
    return [sys.executable, "-m", "harness.testcmd", *argv, "--results-dir", str(results)]


def assert_complete(ops):
    """Dense indices; every invocation has exactly one completion by the same process."""
    assert [op.index for op in ops] == list(range(len(ops)))
    open_ops = {}
    for op in ops:
        first_of_nemesis_pair = op.process == "nemesis" and "nemesis" not in open_ops
        if op.type == "invoke" or first_of_nemesis_pair:
            assert op.process not in open_ops
            open_ops[op.process] = op
        else:
            assert open_ops.pop(op.process).f == op.f
    assert open_ops == {}


def only_run_dir(results):
    from harness.store import find_runs

    runs = find_runs(results)
    assert len(runs) == 1, runs
    return runs[0]


def broker_pids(run_dir):
    pids = []
    for ready in (run_dir / "cluster").glob("*.ready"):
        pids.append(json.loads(ready.read_text())["pid"])
    return pids


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


@pytest.mark.slow
def test_a_short_queue_run_records_a_complete_history_and_ends_with_a_verdict(tmp_path):
    results = tmp_path / "results"
    out = run_command(logquake_test("--workload", "queue", "--time-limit", "10", "--seed", "1234",
                                    "--quiet-period", "1", "--final-time-limit", "30", results=results),
                      timeout_s=300)
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("logquake test: seed 1234; reproduce with: logquake test --workload queue"), out.stdout
    assert lines[-1] == lines[0]
    assert " main " in out.stderr and "ops/s" in out.stderr and "faults: none" in out.stderr  # live progress
    run_dir = only_run_dir(results)
    spec = json.loads((run_dir / "spec.json").read_text())
    for field in ("name", "workload", "workload_options", "nemeses", "nemesis_interval_s", "seed", "time_limit_s",
                  "concurrency", "rate_hz", "brokers", "bootstrap_servers", "client_config", "cluster_config",
                  "command"):
        assert field in spec
    assert spec["seed"] == 1234 and spec["command"] in lines[0]
    ops = read_history(run_dir / "history.jsonl", allow_torn_tail=False)
    assert_complete(ops)
    assert {op.f for op in ops} >= {"send", "poll", "assign", "crash"}
    assert sum(1 for op in ops if op.f == "send" and op.type == "ok") > 100
    assert (run_dir / "broker-0.log").exists() or (run_dir / "cluster" / "broker-0.log").exists()
    # The checkers have landed: the run ends with their verdict, and with no faults it is valid.
    verdict = json.loads((run_dir / "results.json").read_text())
    assert out.returncode == {True: 0, False: 1, "unknown": 2}[verdict["valid"]]
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)[:3000]
    # Per-phase figures, printed too: without faults (so without heal ops marking the end of
    # the main phase) the whole run is one phase.
    phases = verdict["stats"]["throughput"]["phases"]
    assert [p["kind"] for p in phases] == ["before-faults"]
    assert phases[0]["ok_per_s"] > 10 and phases[0]["availability"] > 0.9
    assert "per-phase throughput" in out.stderr and "before-faults" in out.stderr
    assert (results / "latest").resolve() == run_dir.resolve()
    assert (run_dir / "report.html").exists()
    assert "past its budget" not in (run_dir / "harness.log").read_text()  # harness.phase_watchdog kept quiet
    # The nodes' own logs were read (checkers/node_logs.py): three brokers and the controller, clean.
    assert verdict["stats"]["node_logs"] == {"files": 4, "errors": 0, "kinds": []}
    index = (results / "index.html").read_text()  # rebuilt after the run, linking its report
    assert f"{run_dir.parent.name}/{run_dir.name}/report.html" in index
    for pid in broker_pids(run_dir):
        assert not alive(pid)


def interrupt(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGINT to a run, and its output once it exits; a run that does not exit within 120 s
    is killed and the test fails with the end of its stderr (where the harness logs its
    phases and its SIGINT handling), so a hang says where it hung."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        raise AssertionError(f"no exit within 120 s of SIGINT; stderr's end:\n{stderr[-4000:]}") from None


def test_sigint_heals_tears_down_and_keeps_the_history(tmp_path):
    results = tmp_path / "results"
    proc = subprocess.Popen(logquake_test("--workload", "queue", "--time-limit", "120", "--seed", "5", results=results),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT)
    try:
        deadline = time.monotonic() + 120
        history = None
        while time.monotonic() < deadline:
            found = [p for p in results.glob("*/*/history.jsonl") if "latest" not in p.parts]
            if found and found[0].stat().st_size > 20_000:
                history = found[0]
                break
            time.sleep(0.2)
        assert history is not None, "the run never got going"
        run_dir = history.parent
        pids = broker_pids(run_dir)
        assert pids and all(alive(pid) for pid in pids)
        stdout, stderr = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    assert "SIGINT: stopping" in stderr
    assert stdout.strip().splitlines()[-1].startswith("logquake test: seed 5; reproduce with:")
    assert_complete(read_history(history, allow_torn_tail=False))
    for pid in pids:
        assert not alive(pid)
    assert not (run_dir / "results.json").exists()  # no verdict for a run that never finished


def processes_mentioning(path):
    """Live processes whose command line names `path` (brokers name their data directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "status").read_text()
        except OSError:
            continue
        if str(path) in cmdline and "State:\tZ" not in state:
            found.append((int(entry.name), cmdline))
    return found


def start_and_wait_for_history(argv, results, min_bytes=20_000):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [p for p in results.glob("*/*/history.jsonl") if "latest" not in p.parts]
        if found and found[0].stat().st_size > min_bytes:
            return proc, found[0]
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"the run never got going:\n{err[-3000:]}")


def test_sigint_during_faults_heals_and_leaves_no_process_behind(tmp_path):
    results = tmp_path / "results"
    argv = logquake_test("--workload", "queue", "--nemesis", "kill,pause", "--nemesis-interval", "1",
                         "--time-limit", "120", "--seed", "8", results=results)
    proc, history = start_and_wait_for_history(argv, results, min_bytes=60_000)
    try:
        assert processes_mentioning(history.parent)  # brokers are running inside the run's namespace
        stdout, stderr = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    ops = read_history(history, allow_torn_tail=False)
    assert_complete(ops)
    heals = [op for op in ops if op.extra.get("heal")]
    assert {op.f for op in heals} == {"stop-kill", "stop-pause"}
    assert processes_mentioning(history.parent) == []


def test_sigkill_of_the_harness_takes_the_brokers_with_it_and_the_history_stays_readable(tmp_path):
    results = tmp_path / "results"
    proc, history = start_and_wait_for_history(
        logquake_test("--workload", "queue", "--time-limit", "120", "--seed", "6", results=results), results)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while processes_mentioning(history.parent) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(history.parent) == []
    ops = read_history(history)  # at most a torn last line, which the reader skips
    assert len(ops) > 100


@pytest.mark.slow
def test_an_external_cluster_is_tested_through_bootstrap_servers(tmp_path):
    from cluster.launcher import LocalCluster

    results = tmp_path / "results"
    with LocalCluster(brokers=1, base_dir=tmp_path / "external", seed=4) as external:
        # The external cluster has one broker: topics need replication factor 1 (the default
        # follows --brokers, which describes the bundled cluster only).
        out = run_command(logquake_test("--workload", "delivery", "--bootstrap-servers", external.bootstrap_servers,
                                        "--workload-option", "replication_factor=1",
                                        "--concurrency", "3", "--time-limit", "5", "--quiet-period", "0",
                                        "--final-time-limit", "30", "--seed", "3", results=results),
                          timeout_s=300)
        external_pids = [b.pid for b in external.brokers]
        assert all(alive(pid) for pid in external_pids)  # the harness never manages an external cluster
    assert f"--bootstrap-servers {external.bootstrap_servers}" in out.stdout.splitlines()[0]
    run_dir = only_run_dir(results)
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["bootstrap_servers"] == external.bootstrap_servers and spec["nemeses"] == []
    assert not (run_dir / "cluster").exists()
    ops = read_history(run_dir / "history.jsonl", allow_torn_tail=False)
    assert_complete(ops)
    assert {op.f for op in ops if op.type == "ok"} >= {"send", "process", "commit"}
    verdict = json.loads((run_dir / "results.json").read_text())
    assert out.returncode == {True: 0, False: 1, "unknown": 2}[verdict["valid"]], out.stderr[-2000:]


def test_the_network_heals_before_killed_brokers_restart():
    # A restarted broker is ready only once it registers with the controller, which a
    # partition still in place would forbid: the kill heal would wait out its timeout.
    from types import SimpleNamespace

    from harness.run import heal_rank

    packages = [SimpleNamespace(name=n) for n in ("kill", "pause", "lone-leader-crash", "clock", "partition")]
    order = [p.name for p in sorted(packages, key=heal_rank)]
    assert order[:3] == ["partition", "clock", "pause"]
    assert set(order[3:]) == {"kill", "lone-leader-crash"}
