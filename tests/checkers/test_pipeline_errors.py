"""A checker that fails makes the verdict unknown with its error; the others still report.
Both detectors: the fused per-key pass (a check raising inside a key group) and the
DataFrame oracle of the tests (a check that cannot even be planned)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checkers import cycles, perkey
from checkers import fused as fused_pass
from checkers.claims import ClaimInputs
from checkers.pipeline import check_run
from harness.history_parquet import SCHEMA

from .builder import History, to_parquet
from .dataframe_oracle import plan as dataframe_oracle


FINDINGS = {True: fused_pass.findings, False: dataframe_oracle.findings}


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "dataframe-oracle"])
def test_failing_checkers_give_unknown_not_a_crash(spark, tmp_path, monkeypatch, fused):
    h = History()
    h.send(0, 1, 100, 0)
    h.send(0, 1, 101, 1)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    parquet = to_parquet({"r": h}, tmp_path)

    def broken_check(*args):
        raise RuntimeError("this check cannot be planned")

    def broken_search(*args, **kwargs):
        raise ValueError("graph search failed")

    if fused:
        monkeypatch.setitem(perkey.CHECKS, "broken", broken_check)
    else:
        monkeypatch.setitem(dataframe_oracle.ALL_CHECKS, "broken", broken_check)
    monkeypatch.setattr(cycles, "search", broken_search)
    result = check_run(parquet, ClaimInputs(acks="all", min_insync_replicas=2), spark, findings_of=FINDINGS[fused])
    assert result.valid is False  # the unseen write is still found, and false beats unknown
    assert [a.name for a in result.anomalies] == ["unseen"]
    errors = {e.checker: e.error for e in result.errors}
    assert errors["broken"] == "RuntimeError: this check cannot be planned"
    assert errors["cycles"].startswith("ValueError: graph search failed")

    clean = History()
    clean.send(0, 1, 100, 0)
    clean.assign(1, [1])
    clean.poll(1, {1: [(0, 100)]})
    result = check_run(to_parquet({"c": clean}, tmp_path / "c"), ClaimInputs(), spark, findings_of=FINDINGS[fused])
    assert result.valid == "unknown" and result.exit_code == 2


def test_record_without_a_value_is_named(spark, tmp_path):
    """A poll record with no value cannot be placed in the version order: the per-key pass
    says which op, and the verdict is unknown rather than a guess."""
    h = History()
    h.send(0, 1, 100, 0)
    h.assign(1, [1])
    h.poll(1, {1: [(0, 100)]})
    h.poll(1, {1: [(1, None)]})
    result = check_run(to_parquet({"v": h}, tmp_path), ClaimInputs(acks="all", min_insync_replicas=2), spark)
    assert result.valid == "unknown"
    errors = {e.checker: e.error for e in result.errors}
    assert errors["per-key"] == "MalformedHistory: op 7: a poll record of key 1 has no value"


def test_history_beyond_the_packed_range_is_named(spark, tmp_path):
    """The per-key pass packs the invocation's distance into 31 bits; an op completing 2^31
    events after its invocation is refused by name, not silently wrapped."""
    ops = [(0, 1, 0, "send", "send", 1, 0, 100), (1, 2**31 + 10, 5, "send", "send", 1, 1, 101)]
    table = pa.table({name: [None] * len(ops) for name in SCHEMA.names}, schema=SCHEMA)
    for column, values in zip(("process", "op_index", "invoke_index", "f", "mop_f", "key", "offset", "value"),
                              zip(*ops)):
        table = table.set_column(SCHEMA.get_field_index(column), column, pa.array(values, SCHEMA.field(column).type))
    table = table.set_column(SCHEMA.get_field_index("type"), "type", pa.array(["ok", "ok"]))
    table = table.set_column(SCHEMA.get_field_index("row_in_op"), "row_in_op", pa.array([0, 0], pa.int32()))
    table = table.set_column(SCHEMA.get_field_index("mop_index"), "mop_index", pa.array([0, 0], pa.int32()))
    (tmp_path / "run=big").mkdir()
    pq.write_table(table, tmp_path / "run=big" / "part-00000.parquet")
    result = check_run(tmp_path, ClaimInputs(), spark)
    assert result.valid == "unknown"
    assert "op 2147483658: row_in_op 0 or invoke_index 5 out of the range" in result.errors[0].error


def test_missing_history_is_unknown(spark, tmp_path):
    result = check_run(tmp_path / "nothing", ClaimInputs(), spark)
    assert result.valid == "unknown"
    assert "no such history" in result.errors[0].error


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "dataframe-oracle"])
def test_a_run_whose_every_send_failed_is_unknown_not_valid(spark, tmp_path, fused):
    """Every send refused, every poll of the empty log ok and consistent: nothing any claim
    is about was exercised, so the run is not called valid (this once hid a client
    configuration that librdkafka refused). One acknowledged and read send makes the same
    history valid."""
    h = History()
    h.send(0, 1, 100, None, typ="fail")
    h.assign(1, [1])
    h.poll(1, {1: []})
    result = check_run(to_parquet({"r": h}, tmp_path / "r"), ClaimInputs(acks="all", min_insync_replicas=2), spark,
                       findings_of=FINDINGS[fused])
    assert result.valid == "unknown" and result.anomalies == []
    assert [e.checker for e in result.errors] == ["history", "progress"]
    assert "every send failed" in result.errors[0].error
    assert result.errors[1].error == "no send op completed ok (1 fail): the run never exercised send"

    h.send(0, 1, 101, 0)
    h.poll(1, {1: [(0, 101)]})
    result = check_run(to_parquet({"r": h}, tmp_path / "ok"), ClaimInputs(acks="all", min_insync_replicas=2), spark,
                       findings_of=FINDINGS[fused])
    assert result.valid is True, result.errors
