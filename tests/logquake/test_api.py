"""The Python API: TestSpec is `logquake test`'s options, run() returns the run's Result, and
LocalCluster tears down on KeyboardInterrupt."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import logquake
from harness.cli import build_parser
from harness.testcmd import build_spec
from logquake.api import prepare


def _without_command(spec):
    return dataclasses.replace(spec, command="")


def test_test_spec_defaults_are_the_command_defaults(tmp_path: Path) -> None:
    prepared = prepare(logquake.TestSpec(seed=11), tmp_path)
    from_cli = build_spec(build_parser().parse_args(["test", "--seed", "11"]), seed=11)
    assert _without_command(prepared.run_spec) == _without_command(from_cli)
    assert prepared.run_spec.command.startswith("logquake test --workload queue ")
    assert f"--results-dir {tmp_path}" in prepared.run_spec.command


def test_test_spec_fields_become_the_same_run_spec_as_the_options(tmp_path: Path) -> None:
    spec = logquake.TestSpec(workload="delivery", nemesis=("kill", "pause"), nemesis_interval_s=3, time_limit_s=7.5,
                             final_time_limit_s=9, quiet_period_s=2, concurrency=4, rate_hz=50, brokers=5, seed=3,
                             client_config={"acks": "1"}, cluster_config={"min.insync.replicas": "2"},
                             workload_options={"commit_mode": "after"}, nemesis_options={"db_targets": "one,primaries"},
                             name="mine")
    argv = ["test", "--workload", "delivery", "--nemesis", "kill,pause", "--nemesis-interval", "3", "--time-limit",
            "7.5", "--final-time-limit", "9", "--quiet-period", "2", "--concurrency", "4", "--rate", "50",
            "--brokers", "5", "--seed", "3", "--client-config", "acks=1", "--cluster-config", "min.insync.replicas=2",
            "--workload-option", "commit_mode=after", "--nemesis-option", "db_targets=one,primaries", "--name", "mine",
            "--results-dir", str(tmp_path)]
    from_cli = build_spec(build_parser().parse_args(argv), seed=3)
    prepared = prepare(spec, tmp_path)
    assert prepared.run_spec == from_cli
    assert prepared.command[1:3] == ["-m", "harness.testcmd"]


@pytest.mark.parametrize("spec, reason", [
    (logquake.TestSpec(workload="nope"), "unknown workload 'nope'"),
    (logquake.TestSpec(time_limit_s=-1), "--time-limit: -1.0 must be a positive number"),
    (logquake.TestSpec(nemesis=("kill",), bootstrap_servers="127.0.0.1:9092"), "needs control of the broker processes"),
    (logquake.TestSpec(nemesis="kill"), "must be a list of fault names"),
    (logquake.TestSpec(concurrency="many"), "invalid int value"),  # type: ignore[arg-type]
])
def test_a_spec_the_command_refuses_raises_spec_error(spec, reason: str, tmp_path: Path) -> None:
    with pytest.raises(logquake.SpecError, match=reason.replace("(", r"\(").replace(".", r"\.")):
        prepare(spec, tmp_path)


def test_a_random_seed_is_chosen_and_fixed_in_the_reproduce_command(tmp_path: Path) -> None:
    prepared = prepare(logquake.TestSpec(), tmp_path)
    assert f"--seed {prepared.run_spec.seed} " in prepared.run_spec.command


def test_run_against_a_local_cluster_returns_a_valid_result(tmp_path: Path) -> None:
    with logquake.LocalCluster(brokers=1, base_dir=tmp_path / "cluster") as cluster:
        spec = logquake.TestSpec(time_limit_s=5, quiet_period_s=1, final_time_limit_s=20, brokers=1,
                                 bootstrap_servers=cluster.bootstrap_servers, seed=42)
        log = tmp_path / "output.txt"
        with log.open("w") as output:
            result = logquake.run(spec, tmp_path / "results", output=output)
    assert result.verdict == "valid", result.describe()
    assert result.valid and result.bad_anomalies == []
    assert result.seed == 42
    assert result.run_dir.parent.parent == tmp_path / "results"
    assert result.report_path.is_file()
    assert json.loads((result.run_dir / "results.json").read_text())["valid"] is True
    assert result.reproduce_command.startswith("logquake test ")
    assert "--seed 42 " in result.reproduce_command and "--brokers 1 " in result.reproduce_command
    assert result.reproduce_command in log.read_text(), "the run's own output is copied to `output`"
    assert "report:" in result.describe() and "reproduce with: logquake test" in result.describe()


def _default_sigint() -> None:
    # A child inherits an ignored SIGINT (pytest-xdist's workers ignore it), and Python then
    # installs no KeyboardInterrupt handler: the child must start as a user's shell starts it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_INTERRUPTED_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import logquake

    with logquake.LocalCluster(brokers=2, base_dir=sys.argv[1]) as cluster:
        print(json.dumps(cluster.pids()), flush=True)
        time.sleep(120)
""")


def test_local_cluster_tears_down_on_keyboard_interrupt(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_SCRIPT, str(tmp_path / "cluster")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    pids: list[int] = []
    try:
        line = proc.stdout.readline()
        assert line, f"the cluster did not start: {proc.communicate(timeout=60)[1][-2000:]}"
        pids = json.loads(line)
        assert len(pids) == 3  # two brokers and the controller
        assert all(psutil.pid_exists(pid) for pid in pids)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr
    survivors = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    for pid in survivors:
        psutil.Process(pid).kill()
    assert survivors == [], "broker or controller processes outlived the interrupted `with` block"
    # Stopped by the block's teardown, not merely by the parent-death signal when Python exited.
    for broker in (0, 1):
        assert f"broker {broker}: shutdown requested" in (tmp_path / "cluster" / f"broker-{broker}.log").read_text()


_INTERRUPTED_RUN_SCRIPT = textwrap.dedent("""
    import sys
    import logquake

    logquake.run(logquake.TestSpec(time_limit_s=120, brokers=1, seed=3), sys.argv[1])
""")


def _live_processes_naming(path: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(str(path) in a for a in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_an_interrupted_run_stops_its_child_and_cluster_and_raises_keyboard_interrupt(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_RUN_SCRIPT, str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        seen = []
        for line in proc.stdout:  # the run's output, copied by run() as it comes
            seen.append(line)
            if "] main " in line:
                break
        assert any("] main " in line for line in seen), "".join(seen)[-2000:]
        brokers = [p for p in _live_processes_naming(results) if "cluster.runtime.broker_main" in " ".join(p.info["cmdline"])]
        assert brokers, "the run's broker should be up during the main phase"
        proc.send_signal(signal.SIGINT)  # to the caller only, as a KeyboardInterrupt in its code
        rest, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in stderr
    assert "stopping, healing faults and tearing down" in rest + stderr  # the child's own orderly stop
    left = _live_processes_naming(results)
    for p in left:
        p.kill()
    assert left == [], f"processes outlived the interrupted run: {[p.info['cmdline'] for p in left]}"
