"""A checker that fails makes the verdict unknown with its error; the others still report."""

from __future__ import annotations

from checkers import cycles, pipeline
from checkers.claims import ClaimInputs
from checkers.pipeline import check_run

from .builder import History, to_parquet


def test_failing_checkers_give_unknown_not_a_crash(spark, tmp_path, monkeypatch):
    h = History()
    h.send(0, 1, 100, 0)
    h.send(0, 1, 101, 1)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    parquet = to_parquet({"r": h}, tmp_path)

    def broken_check(frames):
        raise RuntimeError("this check cannot be planned")

    def broken_search(*args, **kwargs):
        raise ValueError("graph search failed")

    monkeypatch.setitem(pipeline.ALL_CHECKS, "broken", broken_check)
    monkeypatch.setattr(cycles, "search", broken_search)
    result = check_run(parquet, ClaimInputs(acks="all", min_insync_replicas=2), spark)
    assert result.valid is False  # the unseen write is still found, and false beats unknown
    assert [a.name for a in result.anomalies] == ["unseen"]
    errors = {e.checker: e.error for e in result.errors}
    assert errors["broken"] == "RuntimeError: this check cannot be planned"
    assert errors["cycles"].startswith("ValueError: graph search failed")

    clean = History()
    clean.send(0, 1, 100, 0)
    clean.assign(1, [1])
    clean.poll(1, {1: [(0, 100)]})
    result = check_run(to_parquet({"c": clean}, tmp_path / "c"), ClaimInputs(), spark)
    assert result.valid == "unknown" and result.exit_code == 2


def test_missing_history_is_unknown(spark, tmp_path):
    result = check_run(tmp_path / "nothing", ClaimInputs(), spark)
    assert result.valid == "unknown"
    assert "no such history" in result.errors[0].error
