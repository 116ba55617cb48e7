"""JUnit XML (harness/junit.py) as CI systems read it: every file here is validated against
junit-10.xsd and parsed with junitparser (tests/harness/junit_helpers.py). The invalid and
unknown runs are real checks (the Spark checkers on hand-built histories, through
`logquake analyze --junit-xml`); the valid one is a real `logquake test --junit-xml` run."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.spark import make_spark
from harness.cli import main
from harness.junit import Expectation, RunRecord, load_result, now_utc, suite_for_run, write_junit
from tests.checkers.builder import History

from .junit_helpers import read_junit
from tests.run_logquake import run_command

PROJECT = Path(__file__).resolve().parents[2]
COMMAND = "logquake test --workload queue --seed 7 --name lossy"
SPEC = {"name": "lossy", "workload": "queue", "seed": 7, "command": COMMAND,
        "client_config": {"acks": "all", "enable.idempotence": "true"},
        "cluster_config": {"min.insync.replicas": "2"}, "workload_options": {"sub_via": ["assign"]}}


@pytest.fixture(scope="module")
def spark():
    session = make_spark()
    try:
        yield session
    finally:
        session.stop()


def make_run(tmp_path: Path, history: History, name: str) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    history.write(run_dir / "history.jsonl")
    (run_dir / "spec.json").write_text(json.dumps(SPEC))
    return run_dir


def lossy() -> History:
    """An acknowledged write (101 at offset 1) that a consumer read past: lost-write."""
    h = History()
    h.send(0, 1, 100, 0)
    h.send(0, 1, 101, 1)
    h.send(0, 1, 102, 2)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100), (2, 102)]})
    return h


def test_an_invalid_run_fails_the_claim_it_breaks_with_counts_a_witness_and_the_reproduce_command(
        spark, tmp_path, capsys):
    run_dir = make_run(tmp_path, lossy(), "invalid")
    junit = tmp_path / "out" / "junit.xml"
    assert main(["analyze", str(run_dir), "--junit-xml", str(junit)]) == 1
    assert f"junit: {junit}" in capsys.readouterr().out
    [suite] = read_junit(junit)
    assert suite.name == "lossy"
    assert suite.properties["seed"] == "7" and suite.properties["verdict"] == "invalid"
    assert suite.properties["run_dir"] == str(run_dir.resolve())
    assert suite.properties["report"] == str(run_dir.resolve() / "report.html")
    assert suite.properties["reproduce_command"] == COMMAND
    durable = suite.cases["claim acked-writes-durable"]
    assert durable.outcome == "failure" and durable.classname == "logquake.lossy"
    assert durable.message.startswith("lost-write x1, unseen x1 (breaks acked-writes-durable")
    assert "witness: history ops [" in durable.text and '"value": 101' in durable.text
    assert f"reproduce with: {COMMAND}" in durable.text and "report.html" in durable.text
    assert suite.cases["harness"].outcome == "passed"
    assert suite.cases["claim no-duplicates"].outcome == "passed"
    # The consumer's poll also skipped offset 1 inside one op: per-partition order is broken too.
    assert suite.cases["claim per-partition-order"].outcome == "failure"
    assert suite.cases["claim per-partition-order"].message.startswith("int-poll-skip x1")
    assert suite.failures == 2 and suite.errors == 0 and suite.tests == len(suite.cases)
    assert not any(p.name.startswith(".") for p in junit.parent.iterdir())  # no temporary file left

    # The same CheckResult as a suite entry that expects this loss: nothing fails.
    record = RunRecord(name="lossy", status="checked", started_at=now_utc(), elapsed_s=1.5, run_dir=run_dir,
                       seed=7, reproduce_command=COMMAND, result=load_result(run_dir),
                       expectation=Expectation("invalid", ("lost-write", "unseen", "int-poll-skip")))
    expected = tmp_path / "expected.xml"
    write_junit(expected, [suite_for_run(record)])
    [suite] = read_junit(expected)
    assert suite.cases["claim acked-writes-durable"].outcome == "passed"
    assert "flagged as the suite expects: lost-write x1, unseen x1" in suite.cases["claim acked-writes-durable"].output
    assert suite.cases["expectation"].outcome == "passed" and suite.failures == 0 and suite.errors == 0
    assert suite.properties["expect"] == "invalid (lost-write, unseen, int-poll-skip)"

    # Expecting another anomaly: the claim and the expectation fail, naming the surprise.
    other = dataclasses.replace(record, expectation=Expectation("invalid", ("duplicate",)))
    write_junit(expected, [suite_for_run(other)])
    [suite] = read_junit(expected)
    assert suite.cases["claim acked-writes-durable"].outcome == "failure"
    assert suite.cases["expectation"].outcome == "failure"
    assert "also flagged int-poll-skip, lost-write, unseen" in suite.cases["expectation"].message


def test_a_run_that_made_no_progress_is_an_error_and_its_claims_are_not_passed(spark, tmp_path, capsys):
    h = History()
    h.send(0, 1, 100, 0)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    h.subscribe(2, [1], typ="fail")
    h.subscribe(2, [1], typ="info")
    run_dir = make_run(tmp_path, h, "stalled")
    junit = tmp_path / "junit.xml"
    assert main(["analyze", str(run_dir), "--junit-xml", str(junit)]) == 2
    capsys.readouterr()
    [suite] = read_junit(junit)
    assert suite.properties["verdict"] == "unknown"
    harness = suite.cases["harness"]
    assert harness.outcome == "error" and harness.message.startswith("verdict unknown")
    assert "no subscribe op completed ok" in harness.message
    claims = [case for name, case in suite.cases.items() if name.startswith("claim ")]
    assert claims and all(case.outcome == "skipped" for case in claims)
    assert all(case.message.startswith("not judged") for case in claims)
    assert suite.errors == 1 and suite.failures == 0 and suite.skipped == len(claims)


def test_an_expected_invalid_run_that_came_out_valid_fails_its_expectation(tmp_path):
    from checkers.result import CheckResult, Claim

    result = CheckResult(valid=True, claims=[Claim("acked-writes-durable", "d", "acks=all", True),
                                             Claim("no-duplicates", "d", "enable.idempotence=false", False)],
                         stats={"history_ops": 10, "ok_ops": 9, "faults": ["kill"]})
    record = RunRecord(name="unclean", status="checked", started_at=now_utc(), elapsed_s=3, run_dir=tmp_path,
                       seed=1, reproduce_command="logquake test --seed 1", result=result,
                       expectation=Expectation("invalid", ("lost-write",)))
    write_junit(tmp_path / "j.xml", [suite_for_run(record)])
    [suite] = read_junit(tmp_path / "j.xml")
    assert suite.cases["expectation"].outcome == "failure"
    assert "the run was valid" in suite.cases["expectation"].message
    assert suite.cases["claim no-duplicates"].outcome == "skipped"
    assert suite.cases["claim no-duplicates"].message.startswith("not claimed by this run's configuration")
    assert "faults run: kill" in suite.cases["harness"].output


def test_harness_errors_and_interrupts_are_errors_and_odd_text_stays_valid_xml(tmp_path):
    started = now_utc()
    records = [
        RunRecord(name='a<&>"b', status="harness-error", started_at=started, elapsed_s=0.25,
                  message="cannot start broker 2\x00\x07: <port in use> & more", run_dir=tmp_path / "r1", seed=3,
                  reproduce_command="logquake test --seed 3 --name 'a<&>\"b'"),
        RunRecord(name="stopped", status="interrupted", started_at=started, elapsed_s=12345.6789,
                  message="interrupted", run_dir=tmp_path / "r2", seed=4),
        # Checked, but the checkers crashed before writing results.json: unknown, not passed.
        RunRecord(name="crashed", status="checked", started_at=started, elapsed_s=9,
                  message="the checkers crashed (Py4JError: gone): verdict unknown", run_dir=tmp_path / "r3", seed=5),
    ]
    path = write_junit(tmp_path / "j.xml", [suite_for_run(r) for r in records], name="my suite")
    broken, stopped, crashed = read_junit(path)
    assert records[2].verdict == "unknown" and crashed.properties["verdict"] == "unknown"
    assert crashed.cases["checker check"].outcome == "error"
    assert "the checkers crashed (Py4JError: gone)" in crashed.cases["checker check"].message
    assert broken.name == 'a<&>"b' and broken.tests == 1 and broken.errors == 1
    assert broken.cases["harness"].outcome == "error"
    assert broken.cases["harness"].message == "harness error: cannot start broker 2: <port in use> & more"
    assert broken.properties["verdict"] == "harness-error"
    assert stopped.cases["harness"].message.startswith("interrupted")
    assert stopped.properties["verdict"] == "interrupted"


@pytest.mark.slow
def test_logquake_test_writes_junit_for_a_real_valid_run(tmp_path):
    junit = tmp_path / "reports" / "run.xml"
    out = run_command([sys.executable, "-m", "harness.testcmd", "--workload", "queue", "--brokers", "1",
                      "--time-limit", "4", "--quiet-period", "1", "--final-time-limit", "30", "--seed", "11",
                      "--results-dir", str(tmp_path / "results"), "--junit-xml", str(junit)],
                      timeout_s=300)
    assert out.returncode == 0, out.stdout + out.stderr
    [suite] = read_junit(junit)
    assert suite.properties["verdict"] == "valid" and suite.properties["seed"] == "11"
    assert suite.properties["reproduce_command"].startswith("logquake test --workload queue")
    assert Path(suite.properties["report"]).is_file()
    assert suite.failures == 0 and suite.errors == 0
    assert suite.cases["harness"].outcome == "passed" and "completed: " in suite.cases["harness"].output
    assert suite.cases["claim acked-writes-durable"].outcome == "passed"


def test_logquake_test_writes_junit_when_the_harness_fails_before_the_run(tmp_path):
    # The results root is a file: the run directory cannot be made (exit 255, nothing started).
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    junit = tmp_path / "run.xml"
    out = subprocess.run([sys.executable, "-m", "harness.testcmd", "--time-limit", "1", "--seed", "12",
                          "--results-dir", str(blocker), "--junit-xml", str(junit)],
                         capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert out.returncode == 255, out.stdout + out.stderr
    [suite] = read_junit(junit)
    assert suite.properties["verdict"] == "harness-error" and suite.properties["seed"] == "12"
    assert suite.cases["harness"].outcome == "error" and suite.tests == 1
    assert suite.cases["harness"].message.startswith(f"harness error: cannot create the run directory under {blocker}")
