"""`logquake analyze <run-dir>` end to end through harness.cli.main: conversion, claims from
spec.json, results.json, the printed verdict and the exit codes."""

from __future__ import annotations

import json
import shutil

from checkers.result import CheckResult
from harness.cli import main

from .builder import History

SPEC = {"name": "t", "workload": "queue", "seed": 1,
        "client_config": {"acks": "all", "enable.idempotence": "true"},
        "cluster_config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
        "workload_options": {"sub_via": ["assign"]}}


def make_run(tmp_path, history: History, spec=SPEC, name="run1"):
    run_dir = tmp_path / name
    run_dir.mkdir()
    history.write(run_dir / "history.jsonl")
    (run_dir / "spec.json").write_text(json.dumps(spec))
    return run_dir


def lossy() -> History:
    h = History()
    h.send(0, 1, 100, 0)
    h.send(0, 1, 101, 1)
    h.send(0, 1, 102, 2)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100), (2, 102)]})
    return h


def test_analyze_invalid_run_then_allowed_under_acks_1(spark, tmp_path, capsys):
    run_dir = make_run(tmp_path, lossy())
    with open(run_dir / "history.jsonl", "a") as fh:
        fh.write('{"index": 10, "time_ns"')  # torn by an interrupted writer
    assert main(["analyze", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "verdict: INVALID" in out and "lost-write: 1 [BAD]" in out and "torn" in out
    assert "report: " in out and "lost-write" in (run_dir / "report.html").read_text()  # analyze re-renders the report
    result = CheckResult.load(run_dir / "results.json")
    assert result.valid is False
    assert (run_dir / "history.parquet" / "run=run1" / "part-00000.parquet").is_file()

    # acks=1 allows the loss only once a fault that moves leadership ran (a kill here).
    acks1 = make_run(tmp_path, acks_1_loss(kill=True), ACKS_1, name="run2")
    assert main(["analyze", str(acks1), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    out = capsys.readouterr().out
    assert "verdict: VALID" in out and "lost-write: 1 [allowed]" in out
    assert CheckResult.load(acks1 / "results.json").stats["faults"] == ["kill"]


ACKS_1 = {**SPEC, "client_config": {"acks": "1"}}


def acks_1_loss(kill: bool, kill_error: str | None = None) -> History:
    h = History()
    h.send(0, 1, 100, 0)
    if kill:
        # Nemesis ops are info on invocation and completion; the completion carries the error
        # if the action raised.
        h.complete("nemesis", "start-kill", "info", {"targets": "one"})
        h.complete("nemesis", "start-kill", "info", {"killed": [0]},
                   error=None if kill_error is None else ["exception", kill_error])
    h.send(0, 1, 101, 1)
    h.send(0, 1, 102, 2)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    h.poll(2, {1: [(2, 102)]})
    if kill:
        h.complete("nemesis", "stop-kill", "info", None)
        h.complete("nemesis", "stop-kill", "info", {"restarted": [0]})
    return h


def test_acks_1_loss_without_a_fault_or_after_a_failed_one_is_bad(spark, tmp_path, capsys):
    # Nothing replaced the leader, so no documented rule explains the loss.
    for name, history in (("nofault", acks_1_loss(kill=False)),
                          ("failedkill", acks_1_loss(kill=True, kill_error="ControlError: no such broker"))):
        run_dir = make_run(tmp_path, history, ACKS_1, name=name)
        assert main(["analyze", str(run_dir), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 1, name
        out = capsys.readouterr().out
        assert "verdict: INVALID" in out and "lost-write: 1 [BAD] (breaks acked-writes-durable" in out, out
        assert CheckResult.load(run_dir / "results.json").stats["faults"] == []


def test_a_copied_and_renamed_run_directory_analyses_the_same(spark, tmp_path, capsys):
    original = make_run(tmp_path, acks_1_loss(kill=True), ACKS_1, name="original")
    assert main(["analyze", str(original), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    first = CheckResult.load(original / "results.json")
    elsewhere = tmp_path / "downloaded" / "artifact"
    elsewhere.parent.mkdir()
    shutil.copytree(original, elsewhere)  # a CI artifact unpacked under another name
    for _ in range(2):
        assert main(["analyze", str(elsewhere), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
        again = CheckResult.load(elsewhere / "results.json")
        assert again.valid is True and not again.errors
        assert [(a.name, a.count, a.allowed) for a in again.anomalies] == \
            [(a.name, a.count, a.allowed) for a in first.anomalies]
        assert sorted(p.name for p in (elsewhere / "history.parquet").iterdir()) == ["run=artifact"]
    renamed = tmp_path / "renamed"
    elsewhere.rename(renamed)
    assert main(["analyze", str(renamed), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    assert sorted(p.name for p in (renamed / "history.parquet").iterdir()) == ["run=renamed"]
    assert CheckResult.load(renamed / "results.json").valid is True
    capsys.readouterr()


def test_analyze_keeps_the_per_phase_throughput(spark, tmp_path, capsys):
    run_dir = make_run(tmp_path, acks_1_loss(kill=True), ACKS_1)
    assert main(["analyze", str(run_dir), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    throughput = CheckResult.load(run_dir / "results.json").stats["throughput"]
    # The kill splits the run into phases: one send before it, five ops ok during it.
    assert [(p["kind"], p["faults"], p["ok"]) for p in throughput["phases"]] == \
        [("before-faults", "", 1), ("fault", "kill", 5)]
    assert main(["analyze", str(run_dir), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    assert CheckResult.load(run_dir / "results.json").stats["throughput"] == throughput
    capsys.readouterr()


def test_corrupt_history_exits_254_naming_the_line(tmp_path, capsys):
    h = History()
    h.send(0, 1, 100, 0)
    run_dir = make_run(tmp_path, h)
    with open(run_dir / "history.jsonl", "a") as fh:
        fh.write("{broken\n")
        fh.write("{}\n")
    assert main(["analyze", str(run_dir)]) == 254
    err = capsys.readouterr().err
    assert "history.jsonl:3:" in err


def test_bad_arguments_exit_254(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing")]) == 254
    assert "not a directory" in capsys.readouterr().err
    run_dir = make_run(tmp_path, lossy())
    assert main(["analyze", str(run_dir), "--spark-conf", "novalue"]) == 254
    assert "KEY=VALUE" in capsys.readouterr().err
    (run_dir / "spec.json").write_text(json.dumps({**SPEC, "client_config": {"acks": "2"}}))
    assert main(["analyze", str(run_dir)]) == 254
    assert "acks" in capsys.readouterr().err
