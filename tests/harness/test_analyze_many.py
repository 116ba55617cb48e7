"""`logquake analyze` with several runs: one Spark session and one job over all their
histories, each run's results.json and report as if it had been analysed alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pyspark.sql import SparkSession

from checkers.result import CheckResult
from harness.cli import main
from tests.checkers.builder import History
from tests.checkers.test_properties import generate

SAFE = {"name": "t", "workload": "queue", "seed": 1,
        "client_config": {"acks": "all", "enable.idempotence": "true"},
        "cluster_config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
        "workload_options": {"sub_via": ["assign"]}}
ACKS_1 = {**SAFE, "client_config": {"acks": "1"}}
TXN = {**SAFE, "workload": "queue", "client_config": {**SAFE["client_config"], "transactional.id": "t"}}


def acks_1_loss_after_kill() -> History:
    h = History()
    h.send(0, 1, 100, 0)
    h.complete("nemesis", "start-kill", "info", {"targets": "one"})
    h.complete("nemesis", "start-kill", "info", {"killed": [0]})
    h.send(0, 1, 101, 1)
    h.send(0, 1, 102, 2)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    h.poll(2, {1: [(2, 102)]})
    h.complete("nemesis", "stop-kill", "info", None)
    h.complete("nemesis", "stop-kill", "info", {"restarted": [0]})
    return h


def write_cycle() -> History:
    h = History()
    h.txn(0, [["send", 1, 10, 0], ["send", 2, 20, 1]])
    h.txn(1, [["send", 2, 21, 0], ["send", 1, 11, 1]])
    h.assign(2, [1, 2])
    h.poll(2, {1: [(0, 10), (1, 11)], 2: [(0, 21), (1, 20)]})
    return h


def make_run(parent: Path, name: str, history: History, spec: dict) -> Path:
    run_dir = parent / name
    run_dir.mkdir(parents=True)
    history.write(run_dir / "history.jsonl")
    (run_dir / "spec.json").write_text(json.dumps(spec))
    return run_dir


def comparable(run_dir: Path) -> dict:
    raw = json.loads((run_dir / "results.json").read_text())
    raw["stats"].pop("check_s")  # the check's wall time (in one job, the job's)
    return raw


def spark_jobs() -> set[int]:
    session = SparkSession.getActiveSession()
    return set() if session is None else set(session.sparkContext.statusTracker().getJobIdsForGroup(None))


def test_many_runs_in_one_job_match_each_run_analysed_alone(tmp_path, capsys):
    runs = [
        make_run(tmp_path / "a", "valid", generate(11, "none").history, SAFE),
        make_run(tmp_path / "a", "lost", generate(12, "lost").history, SAFE),
        make_run(tmp_path / "a", "duplicate", generate(13, "duplicate").history, SAFE),
        make_run(tmp_path / "a", "acks1", acks_1_loss_after_kill(), ACKS_1),
        make_run(tmp_path / "a", "cycle", write_cycle(), TXN),
        # The same directory name as the first run: run ids must not collide in the job.
        make_run(tmp_path / "b", "valid", generate(14, "backwards").history, SAFE),
    ]
    alone = tmp_path / "alone"
    alone.mkdir()
    jobs_alone = []
    for i, run in enumerate(runs):
        copy = alone / f"{i}-{run.name}"
        shutil.copytree(run, copy)
        before = spark_jobs()
        main(["analyze", str(copy)])
        jobs_alone.append(len(spark_jobs() - before))
    capsys.readouterr()
    before = spark_jobs()
    assert main(["analyze", *map(str, runs)]) == 1  # the worst: an invalid run
    jobs_together = len(spark_jobs() - before)
    out = capsys.readouterr().out
    assert f"{len(runs)} run(s) in one Spark job" in out
    verdicts = {}
    for i, run in enumerate(runs):
        copy = alone / f"{i}-{run.name}"
        assert comparable(run) == comparable(copy), run
        assert (run / "report.html").is_file()
        assert f"== {run}\n" in out
        verdicts[f"{run.parent.name}/{run.name}"] = CheckResult.load(run / "results.json").valid
    assert verdicts == {"a/valid": True, "a/lost": False, "a/duplicate": False, "a/acks1": True,
                        "a/cycle": True, "b/valid": False}
    found = {a.name for a in CheckResult.load(runs[4] / "results.json").anomalies}
    assert "G0" in found, found
    # One job for all: as many Spark jobs as the most any one run needed alone, not their sum.
    assert jobs_together <= max(jobs_alone), (jobs_together, jobs_alone)


def test_a_bad_run_is_reported_and_the_others_are_checked(tmp_path, capsys):
    good = make_run(tmp_path, "good", generate(21, "none").history, SAFE)
    corrupt = make_run(tmp_path, "corrupt", generate(22, "none").history, SAFE)
    with open(corrupt / "history.jsonl", "a") as fh:
        fh.write("{broken\n{}\n")
    no_spec = tmp_path / "nospec"
    shutil.copytree(good, no_spec)
    (no_spec / "spec.json").unlink()
    assert main(["analyze", str(good), str(corrupt), str(no_spec)]) == 254
    captured = capsys.readouterr()
    assert "corrupt/history.jsonl:" in captured.err and "nospec/spec.json: missing" in captured.err
    assert CheckResult.load(good / "results.json").valid is True
    assert not (corrupt / "results.json").exists() and not (no_spec / "results.json").exists()
    assert "1 valid, 2 not checked; exit 254" in captured.out


def test_a_results_directory_and_a_suite_directory_stand_for_their_runs(tmp_path, capsys):
    root = tmp_path / "results"
    first = make_run(root / "queue", "20260101T000000.000001", generate(31, "none").history, SAFE)
    second = make_run(root / "queue", "20260101T000001.000001", generate(32, "lost").history, SAFE)
    third = make_run(root / "other", "20260101T000000.000001", acks_1_loss_after_kill(), ACKS_1)
    (root / "queue" / "not-a-run").mkdir()
    (root / "latest").symlink_to("queue/20260101T000001.000001")  # what makes it a results store
    assert main(["analyze", str(root)]) == 1
    out = capsys.readouterr().out
    assert "3 run(s) in one Spark job" in out and f"index: {root / 'index.html'}" in out
    assert [CheckResult.load(run / "results.json").valid for run in (first, second, third)] == [True, False, True]
    assert (root / "index.html").is_file()

    suite_dir = root / "suites" / "ci" / "20260101T000002.000001"
    suite_dir.mkdir(parents=True)
    (suite_dir / "index.json").write_text(json.dumps({"runs": [
        {"run_dir": "../../../queue/20260101T000000.000001"}, {"run_dir": "../../../other/20260101T000000.000001"},
        {"run_dir": None}]}))
    for run in (first, third):
        (run / "results.json").unlink()
    assert main(["analyze", str(suite_dir)]) == 0
    assert "2 run(s) in one Spark job" in capsys.readouterr().out
    assert all((run / "results.json").is_file() for run in (first, third))

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["analyze", str(empty), str(first)]) == 254
    assert "neither a run directory" in capsys.readouterr().err
