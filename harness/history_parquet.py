"""history.jsonl → Parquet, one row per micro-op record, for the checkers.

Written with pyarrow directly (Spark adds nothing to writing). The conversion streams: it
reads the history line by line, pairs each completion with its process's pending
invocation, and flushes rows in row groups, so memory holds one row-group buffer plus one
pending invocation per live process, whatever the history's length.

Rows (one per micro-op record; an op with no records still gets one row with null key, so
every op is visible to the checks):

    process          client process id (nemesis ops are not checked and are left out)
    op_index         index of the completion (of the invocation when none was recorded)
    invoke_index     index of the invocation
    type             ok | fail | info; an invocation never completed (interrupted run) is info
    f                the op's function: send, poll, txn, assign, subscribe, process, commit, crash, ...
    mop_index        position of the micro-op in the op's value
    row_in_op        position of the row in the op (orders records within an op)
    mop_f            send | poll | assign | subscribe | process | commit | null
    key              abstract key (one topic-partition); null for an op with no records
    offset           Kafka offset (send/poll/process records; the committed next offset for commit)
    value            record value
    invoke_time_ns, complete_time_ns   (complete_time_ns is null for a never-completed op)
    error            the completion's error, as JSON text
    rebalanced       the key appears in the op's rebalance log (exempt from internal poll checks)
    group            consumer group of commit/process ops (extra.group), null if not given

The directory is hive-partitioned by `run=` only (reference/pyspark.md "History layout"):
`<out>/run=<run_id>/part-00000.parquet`, dictionary-encoded strings, zstd; a history of more
than one row group is instead split by key into `part-k<b>-of-<n>.parquet` files (RunWriter,
KEY_BUCKETS), so that each key's rows are in one file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.history import NEMESIS, HistoryFormatError, Op

SCHEMA = pa.schema([
    ("process", pa.int64()),
    ("op_index", pa.int64()),
    ("invoke_index", pa.int64()),
    ("type", pa.string()),
    ("f", pa.string()),
    ("mop_index", pa.int32()),
    ("row_in_op", pa.int32()),
    ("mop_f", pa.string()),
    ("key", pa.int64()),
    ("offset", pa.int64()),
    ("value", pa.int64()),
    ("invoke_time_ns", pa.int64()),
    ("complete_time_ns", pa.int64()),
    ("error", pa.string()),
    ("rebalanced", pa.bool_()),
    ("group", pa.string()),
])
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
DICTIONARY_COLUMNS = ["type", "f", "mop_f", "error", "group"]
ROW_GROUP_ROWS = 1_000_000
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class ConversionStats:
    lines: int
    ops: int
    rows: int
    incomplete_ops: int  # invocations with no completion, recorded as info
    torn_tail: bool  # the last line was torn (an interrupted writer) and skipped
    # Fault kinds that ran (`start-<kind>` nemesis ops; see `faults_that_ran`): the claims
    # excuse some anomalies only after a fault (checkers/claims.py).
    faults: frozenset[str] = frozenset()
    # Client ops completed after the harness's final heal (the first nemesis op marked `heal`),
    # f → type → ops, or None when the history has no final heal (a run without faults).
    final_by_f: dict[str, dict[str, int]] | None = None
    # Every nemesis op line in history order (f, time_ns, value, error, heal): the claims
    # count the brokers down at once from crashes (checkers/crashes.py). A
    # run has few (one per fault start or stop), so they are kept whole.
    nemesis_ops: tuple[dict[str, Any], ...] = ()


def iter_history_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Op]]:
    """Yield (line number, op), streaming. A corrupt line raises HistoryFormatError naming it;
    an unparseable last line without its newline (a torn write) ends the history quietly."""
    with open(path, "rb") as fh:
        pending: tuple[int, bytes] | None = None
        number = 0
        for raw_line in fh:
            number += 1
            if pending is not None:
                yield pending[0], _parse(path, pending[0], pending[1])
                pending = None
            if not raw_line.strip():
                continue
            if raw_line.endswith(b"\n"):
                yield number, _parse(path, number, raw_line)
            else:
                pending = (number, raw_line)  # only the file's last line can lack its newline
        if pending is not None:
            try:
                yield pending[0], _parse(path, pending[0], pending[1])
            except HistoryFormatError:
                return


def _parse(path: str | os.PathLike[str], number: int, line: bytes) -> Op:
    try:
        raw = json.loads(line)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return Op.from_json(raw)
    except (ValueError, TypeError) as exc:
        raise HistoryFormatError(path, number, str(exc)) from None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} {value!r} is not an integer")
    return value


def _opt_int(value: Any, what: str) -> int | None:
    return None if value is None else _int(value, what)


class _RowBuffer:
    """Column lists for one row group."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}

    def __len__(self) -> int:
        return len(self.columns["process"])

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=SCHEMA)

    def clear(self) -> None:
        for values in self.columns.values():
            values.clear()


def op_records(op: Op) -> list[tuple[int, str | None, int | None, int | None, int | None]]:
    """The micro-op records of a completed op: (mop_index, mop_f, key, offset, value).

    Raises ValueError naming the malformed part; the caller adds the line number.
    """
    value = op.value
    out: list[tuple[int, str | None, int | None, int | None, int | None]] = []
    if op.f in ("assign", "subscribe"):
        keys = value or []
        if not isinstance(keys, list):
            raise ValueError(f"{op.f} value {keys!r} is not a list of keys")
        for k in keys:
            out.append((0, op.f, _int(k, f"{op.f} key"), None, None))
        return out
    if op.f == "commit":
        if value is None:
            return out
        if not isinstance(value, dict):
            raise ValueError(f"commit value {value!r} is not an object of key → next offset")
        for k, next_offset in value.items():
            out.append((0, "commit", _int(int(k), "commit key"), _opt_int(next_offset, "commit offset"), None))
        return out
    if value is None or not isinstance(value, list):
        return out
    for mop_index, mop in enumerate(value):
        if not isinstance(mop, list) or not mop:
            raise ValueError(f"micro-op {mop!r} is not a non-empty list")
        kind = mop[0]
        if kind in ("send", "process"):
            if len(mop) != 3:
                raise ValueError(f"{kind} micro-op {mop!r} is not [{kind}, key, value]")
            key = _int(mop[1], f"{kind} key")
            payload = mop[2]
            if isinstance(payload, list):
                if len(payload) != 2:
                    raise ValueError(f"{kind} micro-op {mop!r}: [offset, value] expected")
                out.append((mop_index, kind, key, _opt_int(payload[0], "offset"), _opt_int(payload[1], "value")))
            else:
                out.append((mop_index, kind, key, None, _opt_int(payload, "value")))
        elif kind == "poll":
            if len(mop) < 2:
                continue  # an invocation's [poll] carries no records
            records = mop[1]
            if not isinstance(records, dict):
                raise ValueError(f"poll micro-op {mop!r}: key → records map expected")
            for k, pairs in records.items():
                key = _int(int(k), "poll key")
                if not isinstance(pairs, list):
                    raise ValueError(f"poll records of key {k!r} are not a list")
                for pair in pairs:
                    if not isinstance(pair, list) or len(pair) != 2:
                        raise ValueError(f"poll record {pair!r} is not [offset, value]")
                    out.append((mop_index, "poll", key, _opt_int(pair[0], "offset"), _opt_int(pair[1], "value")))
        else:
            raise ValueError(f"unknown micro-op {kind!r}")
    return out


def _rebalanced_keys(op: Op) -> frozenset[int]:
    log = op.extra.get("rebalance_log") or op.extra.get("rebalance-log") or []
    keys: set[int] = set()
    if isinstance(log, list):
        for event in log:
            if isinstance(event, dict):
                for k in event.get("keys") or []:
                    if isinstance(k, int) and not isinstance(k, bool):
                        keys.add(k)
    return frozenset(keys)


def _append_op(buf: _RowBuffer, invoke: Op, completion: Op | None) -> int:
    """Add the rows of one op; returns how many."""
    done = completion if completion is not None else invoke
    typ = completion.type if completion is not None else "info"
    # Jepsen: the completion's value if it has one, else the invocation's (an info send may
    # keep its raw value).
    shaped = Op(index=done.index, time_ns=done.time_ns, type=typ, process=invoke.process, f=invoke.f,
                value=done.value if done.value is not None else invoke.value, error=done.error,
                extra={**invoke.extra, **done.extra})
    records = op_records(shaped)
    rebalanced = _rebalanced_keys(shaped)
    error = None if shaped.error is None else json.dumps(shaped.error, separators=(",", ":"), default=str)
    group = shaped.extra.get("group")
    group = None if group is None else str(group)
    op_index = completion.index if completion is not None else invoke.index
    complete_time = completion.time_ns if completion is not None else None
    if not records:
        records = [(0, None, None, None, None)]
    cols = buf.columns
    for row_in_op, (mop_index, mop_f, key, offset, value) in enumerate(records):
        cols["process"].append(invoke.process)
        cols["op_index"].append(op_index)
        cols["invoke_index"].append(invoke.index)
        cols["type"].append(typ)
        cols["f"].append(invoke.f)
        cols["mop_index"].append(mop_index)
        cols["row_in_op"].append(row_in_op)
        cols["mop_f"].append(mop_f)
        cols["key"].append(key)
        cols["offset"].append(offset)
        cols["value"].append(value)
        cols["invoke_time_ns"].append(invoke.time_ns)
        cols["complete_time_ns"].append(complete_time)
        cols["error"].append(error)
        cols["rebalanced"].append(key is not None and key in rebalanced)
        cols["group"].append(group)
    return len(records)


def history_tables(numbered_ops: Iterable[tuple[int, Op]], *, path: str | os.PathLike[str] = "<history>",
                   row_group_rows: int = ROW_GROUP_ROWS, stats: dict[str, Any] | None = None) -> Iterator[pa.Table]:
    """Pair invocations with completions and yield row groups of at most `row_group_rows` rows."""
    pending: dict[int, Op] = {}
    buf = _RowBuffer()
    counts: dict[str, Any] = {"ops": 0, "rows": 0, "incomplete_ops": 0, "lines": 0}
    nemesis_starts: dict[str, list[int]] = {}
    nemesis_ops: list[dict[str, Any]] = []
    final_by_f: dict[str, dict[str, int]] | None = None
    for number, op in numbered_ops:
        counts["lines"] += 1
        if op.process == NEMESIS:
            if final_by_f is None and op.extra.get("heal"):
                final_by_f = {}  # the final phase starts at the final heal (harness/run.py)
            # Left out of the table (not checked), but the claims need to know which faults ran,
            # and which brokers they crashed when.
            nemesis_ops.append({"f": op.f, "time_ns": op.time_ns, "value": op.value, "error": op.error,
                                "heal": bool(op.extra.get("heal"))})
            if op.f.startswith("start-"):
                clean_errored = nemesis_starts.setdefault(op.f[len("start-"):], [0, 0])
                clean_errored[_failed_outright(op.error)] += 1
            continue
        process = op.process
        assert isinstance(process, int)
        if op.type == "invoke":
            if process in pending:
                raise HistoryFormatError(path, number, f"process {process} invokes again before op "
                                                       f"{pending[process].index} completed")
            pending[process] = op
            continue
        invoke = pending.pop(process, None)
        if invoke is None:
            raise HistoryFormatError(path, number, f"{op.type} completion of process {process} "
                                                   "has no pending invocation")
        if invoke.f != op.f:
            raise HistoryFormatError(path, number, f"completion f {op.f!r} does not match invocation "
                                                   f"f {invoke.f!r} (op {invoke.index})")
        try:
            counts["rows"] += _append_op(buf, invoke, op)
        except ValueError as exc:
            raise HistoryFormatError(path, number, str(exc)) from None
        counts["ops"] += 1
        if final_by_f is not None:
            by_type = final_by_f.setdefault(op.f, {})
            by_type[op.type] = by_type.get(op.type, 0) + 1
        if len(buf) >= row_group_rows:
            yield buf.table()
            buf.clear()
    # An interrupted run leaves invocations without completions: unknown outcomes.
    for invoke in sorted(pending.values(), key=lambda o: o.index):
        try:
            counts["rows"] += _append_op(buf, invoke, None)
        except ValueError as exc:
            raise HistoryFormatError(path, 0, f"op {invoke.index}: {exc}") from None
        counts["ops"] += 1
        counts["incomplete_ops"] += 1
        if final_by_f is not None:
            by_type = final_by_f.setdefault(invoke.f, {})
            by_type["info"] = by_type.get("info", 0) + 1
    if len(buf) or counts["rows"] == 0:
        yield buf.table()
    if stats is not None:
        stats.update(counts)
        stats["faults"] = faults_that_ran(nemesis_starts)
        stats["final_by_f"] = final_by_f
        stats["nemesis_ops"] = tuple(nemesis_ops)


def _failed_outright(error: Any) -> bool:
    """A start op whose action raised (`["exception", ...]`, harness/interpreter.py) did not
    run. Any other error is indeterminate, like a client's `info`: a start that timed out
    ("no completion within N s") may have done all its damage (brokers-down's kills happen
    before its waits), so it counts as a fault that may have run."""
    return isinstance(error, list) and bool(error) and error[0] == "exception"


def faults_that_ran(starts: dict[str, list[int]]) -> frozenset[str]:
    """Fault kinds with a start op that did not fail outright. A start op is recorded twice
    (invocation, then completion with the error if the action raised), so a kind ran when
    its error-free records outnumber its failed ones: some start completed cleanly, or was
    still under way when the history ended, or timed out. A start that failed outright (its
    action raised) excuses nothing."""
    return frozenset(kind for kind, (clean, errored) in starts.items() if clean > errored)


def check_run_id(run_id: str) -> str:
    if not _RUN_ID_RE.match(run_id):
        raise ValueError(f"run id {run_id!r} must start with a letter or digit and use only letters, digits and ._+-")
    return run_id


# Key buckets: a history bigger than one row group is written as KEY_BUCKETS files by key
# (null keys in bucket 0), each saying in its footer which bucket of how many it holds, so
# that every key's rows are in one file: the per-key checks then read each file by itself
# (only the columns they need) with no shuffle (checkers/fused.py). A smaller history is one
# file, bucket 0 of 1. 64 files: enough that a Python worker holds one file's rows of a
# 10^9-row history (~16 million), few enough that a 10^7-row history's files are not tiny.
KEY_BUCKETS = 64
KEY_BUCKET_META = b"logquake.key_bucket"  # "<bucket>/<buckets>"
SINGLE_FILE = "part-00000.parquet"


def bucket_file_name(bucket: int, buckets: int) -> str:
    return SINGLE_FILE if buckets == 1 else f"part-k{bucket:05d}-of-{buckets:05d}.parquet"


def key_bucket(metadata: dict[bytes, bytes] | None) -> tuple[int, int] | None:
    """(bucket, buckets) from a file's footer metadata; None for a file without (an older
    layout, or written by something else)."""
    raw = (metadata or {}).get(KEY_BUCKET_META)
    if raw is None:
        return None
    try:
        bucket, buckets = (int(x) for x in raw.decode().split("/"))
    except ValueError:
        return None
    return (bucket, buckets) if 0 <= bucket < buckets else None


def key_buckets_of(table: pa.Table, buckets: int) -> np.ndarray:
    keys = table.column("key")
    return np.mod(pc.fill_null(keys, 0).to_numpy(zero_copy_only=False), buckets)


class RunWriter:
    """Writes one run's rows into `<run_dir>`: one file (its tables as they came, a row group
    each) while they are at most `bucket_above_rows`, else `buckets` files by key (see
    KEY_BUCKETS). Memory holds at most `bucket_above_rows` rows before the choice is made,
    and one table at a time after."""

    def __init__(self, run_dir: Path, *, buckets: int = KEY_BUCKETS, bucket_above_rows: int = ROW_GROUP_ROWS,
                 row_group_rows: int = ROW_GROUP_ROWS) -> None:
        if buckets < 1:
            raise ValueError(f"buckets {buckets} must be at least 1")
        self.run_dir = run_dir
        self.buckets = buckets
        self.bucket_above_rows = bucket_above_rows
        self.row_group_rows = row_group_rows
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._writers: dict[int, pq.ParquetWriter] = {}
        self._tmp: dict[int, Path] = {}

    def _writer(self, bucket: int, buckets: int) -> pq.ParquetWriter:
        writer = self._writers.get(bucket)
        if writer is None:
            name = bucket_file_name(bucket, buckets)
            tmp = self.run_dir / f".{name}.tmp"
            schema = SCHEMA.with_metadata({KEY_BUCKET_META: f"{bucket}/{buckets}".encode()})
            writer = pq.ParquetWriter(tmp, schema, compression="zstd", use_dictionary=DICTIONARY_COLUMNS)
            self._writers[bucket], self._tmp[bucket] = writer, tmp
        return writer

    def write(self, table: pa.Table) -> None:
        table = table.replace_schema_metadata(None)
        self.rows += table.num_rows
        if not self._writers and self._pending_rows + table.num_rows <= self.bucket_above_rows:
            self._pending.append(table)
            self._pending_rows += table.num_rows
            return
        for held in self._pending:
            self._write_bucketed(held)
        self._pending, self._pending_rows = [], 0
        self._write_bucketed(table)

    def _write_bucketed(self, table: pa.Table) -> None:
        if self.buckets == 1:
            self._writer(0, 1).write_table(table, row_group_size=max(table.num_rows, 1))
            return
        bucket = key_buckets_of(table, self.buckets)
        order = np.argsort(bucket, kind="stable")  # rows keep their order within a bucket
        sorted_buckets = bucket[order]
        starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]]) if len(order) else order
        for a, b in zip(starts, np.append(starts[1:], len(order))):
            part = table.take(order[a:b])
            self._writer(int(sorted_buckets[a]), self.buckets).write_table(part, row_group_size=self.row_group_rows)

    def close(self) -> list[Path]:
        """Finish the files and move them into place; returns them."""
        if not self._writers:
            writer = self._writer(0, 1)
            for table in self._pending or [SCHEMA.empty_table()]:
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
            self._pending = []
        done = []
        for bucket, writer in self._writers.items():
            writer.close()
            target = self._tmp[bucket].with_name(self._tmp[bucket].name[1:-len(".tmp")])
            os.replace(self._tmp[bucket], target)
            done.append(target)
        self._writers.clear()
        return sorted(done)

    def abort(self) -> None:
        for bucket, writer in self._writers.items():
            writer.close()
            self._tmp[bucket].unlink(missing_ok=True)
        self._writers.clear()


def write_tables(tables: Iterable[pa.Table], out_dir: str | os.PathLike[str], run_id: str, *,
                 buckets: int = KEY_BUCKETS, bucket_above_rows: int = ROW_GROUP_ROWS) -> Path:
    """Write row groups to `<out_dir>/run=<run_id>/` (RunWriter), replacing that run; returns
    the run's directory."""
    run_dir = Path(out_dir) / f"run={check_run_id(run_id)}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    writer = RunWriter(run_dir, buckets=buckets, bucket_above_rows=bucket_above_rows)
    try:
        for table in tables:
            writer.write(table)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return run_dir


def remove_other_runs(out_dir: str | os.PathLike[str], run_id: str) -> list[str]:
    """Delete every `run=<id>` partition of `out_dir` but `run_id`'s; returns the ids removed.
    A run directory's history.parquet/ holds its one run: a partition under another id is
    left from the directory's former name (copied or renamed)."""
    keep = f"run={check_run_id(run_id)}"
    removed = []
    root = Path(out_dir)
    if not root.is_dir():
        return removed
    for child in sorted(root.iterdir()):
        if child.name.startswith("run=") and child.name != keep and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
            removed.append(child.name[len("run="):])
    return removed


def convert_history(history_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], run_id: str,
                    *, row_group_rows: int = ROW_GROUP_ROWS) -> ConversionStats:
    """history.jsonl → `<out_dir>/run=<run_id>/part-00000.parquet`, streaming.

    Raises HistoryFormatError (naming the line) for a corrupt history; a torn last line is
    skipped. Nothing is left behind on failure.
    """
    counts: dict[str, Any] = {}
    torn = _has_torn_tail(history_path)
    tables = history_tables(iter_history_lines(history_path), path=history_path,
                            row_group_rows=row_group_rows, stats=counts)
    write_tables(tables, out_dir, run_id)
    return ConversionStats(lines=counts["lines"], ops=counts["ops"], rows=counts["rows"],
                           incomplete_ops=counts["incomplete_ops"], torn_tail=torn, faults=counts["faults"],
                           final_by_f=counts["final_by_f"], nemesis_ops=counts["nemesis_ops"])


def _has_torn_tail(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return False
        fh.seek(max(0, size - 65536))
        tail = fh.read()
    if tail.endswith(b"\n"):
        return False
    last = tail.rsplit(b"\n", 1)[-1]
    try:
        json.loads(last)
        return False
    except ValueError:
        return True


def ops_table(ops: Iterable[Op], run_id: str | None = None) -> pa.Table:
    """All rows of an in-memory history as one table (tests and bulk generation); with
    `run_id`, a plain `run` column is added so many histories can share one file."""
    tables = list(history_tables(((i + 1, op) for i, op in enumerate(ops)), row_group_rows=1 << 62))
    table = pa.concat_tables(tables)
    if run_id is not None:
        table = table.append_column("run", pa.array([run_id] * len(table), pa.string()))
    return table
