"""The progress check (checkers/progress.py, Jepsen's stats checker): a run in which some op
kind never succeeded, or nothing succeeded after the final heal, is unknown with a reason
naming the op kind. End to end through `logquake analyze` on hand-made run directories."""

from __future__ import annotations

import json

from checkers.progress import FinalPhase, progress_errors
from checkers.result import CheckResult
from harness.cli import main

from .builder import History
from .test_analyze_cli import SPEC, lossy, make_run

SPARK = ["--spark-conf", "spark.sql.shuffle.partitions=2"]


def healthy_main_phase(h: History) -> None:
    h.send(0, 1, 100, 0)
    h.complete("nemesis", "start-partition", "info", {"topology": "halves"})
    h.complete("nemesis", "start-partition", "info", {"cut": [[0], [1, 2]]})
    h.send(0, 1, 101, 1)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100), (1, 101)]})
    h.complete("nemesis", "stop-partition", "info", None)
    h.complete("nemesis", "stop-partition", "info", None)


def final_heal(h: History) -> None:
    # harness/run.py's heal: one stop op per package, marked heal; the final phase starts here.
    h.complete("nemesis", "stop-partition", "info", "heal", nemesis="partition", heal=True)
    h.complete("nemesis", "stop-partition", "info", None, nemesis="partition", heal=True)


def analyze(run_dir, capsys) -> tuple[int, CheckResult, str]:
    code = main(["analyze", str(run_dir), *SPARK])
    return code, CheckResult.load(run_dir / "results.json"), capsys.readouterr().out


def test_a_run_that_recovers_is_valid(spark, tmp_path, capsys):
    h = History()
    healthy_main_phase(h)
    final_heal(h)
    h.assign(2, [1])
    h.poll(2, {1: [(0, 100), (1, 101)]})
    code, result, out = analyze(make_run(tmp_path, h), capsys)
    assert code == 0 and result.valid is True and not result.errors, out


def test_polls_that_never_succeed_after_the_heal_give_unknown(spark, tmp_path, capsys):
    h = History()
    healthy_main_phase(h)
    final_heal(h)
    h.assign(2, [1])
    h.poll(2, {}, typ="info")  # the cluster never came back
    h.poll(2, {}, typ="info")
    code, result, out = analyze(make_run(tmp_path, h), capsys)
    assert code == 2 and result.valid == "unknown", out
    errors = [e.error for e in result.errors if e.checker == "progress"]
    assert errors == ["no poll op completed ok in the final phase, after every fault was healed (2 info)",
                      "no read (poll, txn or process) completed ok in the final phase, after every fault was healed"]
    assert "checker error in progress: no poll op completed ok in the final phase" in out


def test_an_op_kind_that_never_succeeds_gives_unknown(spark, tmp_path, capsys):
    # No final heal (a run without faults): only the whole-run rule applies.
    h = History()
    h.send(0, 1, 100, 0)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    h.subscribe(2, [1], typ="fail")
    h.subscribe(2, [1], typ="info")
    code, result, out = analyze(make_run(tmp_path, h), capsys)
    assert code == 2 and result.valid == "unknown", out
    assert [e.error for e in result.errors] == [
        "no subscribe op completed ok (1 fail, 1 info): the run never exercised subscribe"]


def test_an_anomaly_still_makes_a_stalled_run_invalid(spark, tmp_path, capsys):
    # false beats unknown: what was found stays found.
    h = lossy()
    h.subscribe(2, [1], typ="fail")
    code, result, out = analyze(make_run(tmp_path, h), capsys)
    assert code == 1 and result.valid is False, out
    assert "lost-write" in [a.name for a in result.anomalies if not a.allowed]
    assert any(e.checker == "progress" and "subscribe" in e.error for e in result.errors)


def test_rules_on_counts():
    ok = {"send": {"ok": 3, "info": 1}, "poll": {"ok": 2}, "crash": {"info": 4}}
    assert progress_errors(ok) == []  # crash is info by design
    assert progress_errors(ok, FinalPhase({"poll": {"ok": 1}, "assign": {"ok": 1}})) == []
    # A final phase with no client op at all read nothing.
    [error] = progress_errors(ok, FinalPhase({}))
    assert error.checker == "progress" and "no read" in error.error
    # Sends in the final phase must succeed there too.
    errors = progress_errors(ok, FinalPhase({"poll": {"ok": 1}, "send": {"fail": 2}}))
    assert [e.error for e in errors] == ["no send op completed ok in the final phase, after every fault was "
                                         "healed (2 fail)"]
    assert json.dumps([e.error for e in progress_errors({"txn": {"fail": 1}})]) == \
        json.dumps(["no txn op completed ok (1 fail): the run never exercised txn"])
