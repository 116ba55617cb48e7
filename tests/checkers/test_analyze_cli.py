"""`logquake analyze <run-dir>` end to end through harness.cli.main: conversion, claims from
spec.json, results.json, the printed verdict and the exit codes."""

from __future__ import annotations

import json

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

    spec = {**SPEC, "client_config": {"acks": "1"}}
    h = History()
    h.send(0, 1, 100, 0)
    h.send(0, 1, 101, 1)
    h.send(0, 1, 102, 2)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    h.poll(2, {1: [(2, 102)]})
    acks1 = make_run(tmp_path, h, spec, name="run2")
    assert main(["analyze", str(acks1), "--spark-conf", "spark.sql.shuffle.partitions=2"]) == 0
    out = capsys.readouterr().out
    assert "verdict: VALID" in out and "lost-write: 1 [allowed]" in out


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
