"""history.jsonl → Parquet: one row per micro-op record, pairing, torn tails, corrupt lines."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from harness.history import HistoryFormatError, HistoryWriter, Op
from harness.history_parquet import convert_history


def write_ops(path, ops):
    with HistoryWriter(path) as writer:
        for op in ops:
            writer.append(op)
    return path


def op(index, typ, process, f, value=None, **extra):
    return Op(index, index * 1000, typ, process, f, value, None, extra)


def read_rows(out_dir, run):
    return pq.read_table(out_dir / f"run={run}" / "part-00000.parquet").to_pylist()


def test_one_row_per_record_with_paired_invocations(tmp_path):
    history = write_ops(tmp_path / "h.jsonl", [
        op(0, "invoke", 0, "send", [["send", 3, 7]]),
        op(1, "invoke", 1, "poll", [["poll"]]),
        op(2, "info", "nemesis", "start-partition", None),
        op(3, "ok", 0, "send", [["send", 3, [12, 7]]]),
        op(4, "ok", 1, "poll", [["poll", {"3": [[10, 5], [11, 6], [12, 7]], "4": []}]],
           rebalance_log=[{"type": "assigned", "keys": [3]}]),
        op(5, "invoke", 1, "commit", None, group="g1"),
        op(6, "ok", 1, "commit", {"3": 13}, group="g1"),
    ])
    stats = convert_history(history, tmp_path / "pq", "r1")
    rows = read_rows(tmp_path / "pq", "r1")
    assert stats.ops == 3 and stats.rows == 5 and stats.incomplete_ops == 0 and not stats.torn_tail
    send, *polls, commit = rows
    assert (send["op_index"], send["invoke_index"], send["type"], send["key"], send["offset"], send["value"]) == \
        (3, 0, "ok", 3, 12, 7)
    assert (send["invoke_time_ns"], send["complete_time_ns"]) == (0, 3000)
    assert [(r["offset"], r["value"], r["row_in_op"], r["rebalanced"]) for r in polls] == \
        [(10, 5, 0, True), (11, 6, 1, True), (12, 7, 2, True)]
    assert (commit["mop_f"], commit["key"], commit["offset"], commit["group"]) == ("commit", 3, 13, "g1")


def test_dictionary_encoding_and_zstd(tmp_path):
    history = write_ops(tmp_path / "h.jsonl", [op(0, "invoke", 0, "crash"), op(1, "info", 0, "crash")])
    convert_history(history, tmp_path / "pq", "r1")
    meta = pq.ParquetFile(tmp_path / "pq" / "run=r1" / "part-00000.parquet").metadata
    columns = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i)
               for i in range(meta.num_columns)}
    assert columns["type"].compression == "ZSTD"
    assert any("DICTIONARY" in enc for enc in columns["f"].encodings)


def test_incomplete_invocation_is_info_and_torn_tail_is_skipped(tmp_path):
    history = write_ops(tmp_path / "h.jsonl", [
        op(0, "invoke", 0, "send", [["send", 1, 5]]),
        op(1, "invoke", 1, "send", [["send", 1, 6]]),
        op(2, "ok", 1, "send", [["send", 1, [0, 6]]]),
    ])
    with open(history, "a") as fh:
        fh.write('{"index": 3, "time_ns": 3, "type": "ok", "proc')  # the writer died mid-line
    stats = convert_history(history, tmp_path / "pq", "r1")
    assert stats.torn_tail and stats.incomplete_ops == 1
    rows = read_rows(tmp_path / "pq", "r1")
    pending = [r for r in rows if r["type"] == "info"]
    assert len(pending) == 1
    assert (pending[0]["value"], pending[0]["offset"], pending[0]["complete_time_ns"]) == (5, None, None)


@pytest.mark.parametrize("bad_line, reason", [
    ("not json at all", "Expecting value"),
    (json.dumps({"index": 2, "time_ns": 2, "type": "done", "process": 0, "f": "send"}), "type 'done'"),
    (json.dumps({"index": 2, "time_ns": 2, "type": "ok", "process": 0, "f": "send",
                 "value": [["send", 1, ["x", 5]]]}), "offset 'x' is not an integer"),
    (json.dumps({"index": 2, "time_ns": 2, "type": "ok", "process": 5, "f": "send"}), "no pending invocation"),
])
def test_corrupt_line_is_named(tmp_path, bad_line, reason):
    history = write_ops(tmp_path / "h.jsonl", [op(0, "invoke", 0, "send", [["send", 1, 5]]),
                                               op(1, "ok", 0, "send", [["send", 1, [0, 5]]]),
                                               op(2, "invoke", 0, "send", [["send", 1, 5]])])
    with open(history, "a") as fh:
        fh.write(bad_line + "\n")
        fh.write(json.dumps(op(3, "invoke", 0, "send", [["send", 1, 6]]).to_json()) + "\n")
    with pytest.raises(HistoryFormatError) as info:
        convert_history(history, tmp_path / "pq", "r1")
    assert info.value.line_number == 4
    assert reason in str(info.value) and ":4:" in str(info.value)
    assert not (tmp_path / "pq" / "run=r1" / "part-00000.parquet").exists()


def test_row_groups_stream(tmp_path):
    ops = []
    for i in range(50):
        ops += [op(2 * i, "invoke", 0, "send", [["send", 1, i]]), op(2 * i + 1, "ok", 0, "send", [["send", 1, [i, i]]])]
    history = write_ops(tmp_path / "h.jsonl", ops)
    convert_history(history, tmp_path / "pq", "r1", row_group_rows=8)
    meta = pq.ParquetFile(tmp_path / "pq" / "run=r1" / "part-00000.parquet").metadata
    assert meta.num_rows == 50 and meta.num_row_groups == 7


def test_bad_run_id(tmp_path):
    history = write_ops(tmp_path / "h.jsonl", [])
    with pytest.raises(ValueError, match="run id"):
        convert_history(history, tmp_path / "pq", "../escape")


def test_a_fault_start_that_timed_out_may_have_run_one_that_raised_did_not():
    from harness.history_parquet import history_tables

    def nemesis(index, f, error=None):
        return Op(index, index * 1000, "info", "nemesis", f, None, error)

    ops = [nemesis(0, "start-brokers-down"), nemesis(1, "start-brokers-down", "no completion within 120 s"),
           nemesis(2, "start-kill"), nemesis(3, "start-kill", ["exception", "NemesisError: needs 3 brokers"]),
           nemesis(4, "start-pause"), nemesis(5, "start-pause")]
    stats: dict = {}
    list(history_tables(enumerate(ops, 1), stats=stats))
    assert stats["faults"] == frozenset({"brokers-down", "pause"})
