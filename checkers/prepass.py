"""The few facts a key group cannot see alone, gathered before the per-key pass.

  * assign/subscribe events (ok or info) with their key sets: a process that drops a key
    forgets its position there, whichever group the event's own rows landed in;
  * ops whose writes span keys or that also read (txn ops, multi-record sends): whether
    they write at all and whether they "link" keys for the cycle search;
  * info ops writing several keys that some ok poll read in any key: they must have
    committed, so their writes are evidence in every key they wrote;
  * and the run statistics (ops and rows per f and type).

`partial_facts` reads a slice of the history's rows (any slice: a key-bucket file, a Spark
partition) and answers with its statistics and the rows of those ops, a few rows per op;
the driver sums and groups the slices' answers (`combine`). A multi-record send shows as one
only in its rows after the first, so when some run has them a second look (`partial_facts`
with `multi`) fetches their first rows. Python tasks read a run in key buckets file by file,
only these columns (frames.map_files); any other run's rows come through Arrow, unshuffled.
The Spark SQL form of this pass took three scans of the history (10^7 bench rows: 3.6-5.3 s
of CPU at load 8-14; this one 1.7-1.9 s at load 13-22, ~0.75 s of it reading and numpy in the
tasks); the answer is collected to the driver and shipped to every key group inside the
per-key function.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checkers.frames import RUN, map_files, read_file, run_files
from checkers.perkey import RunFacts

# The history columns the pass reads (harness/history_parquet.py).
FACT_COLUMNS = ("op_index", "f", "type", "row_in_op", "mop_f", "key", "process")
# One row per (run, f, type) slice statistic (kind "stat") or per op row kept (kind "row").
PARTIAL_SCHEMA = ("run string, kind string, f string, type string, op bigint, process bigint, key bigint, "
                  "writes boolean, reads boolean, ops bigint, rows bigint, grouped bigint")
_PARTIAL_TYPES = {"string": pa.string(), "bigint": pa.int64(), "boolean": pa.bool_()}
PARTIAL_ARROW = pa.schema([(name, _PARTIAL_TYPES[typ]) for name, typ in
                           (part.strip().split(" ") for part in PARTIAL_SCHEMA.split(","))])
ASSIGNING = ("assign", "subscribe")


def _write() -> Column:
    return F.col("f").isin("send", "txn") & (F.col("mop_f") == "send") & F.col("key").isNotNull()


def _read() -> Column:
    return F.col("f").isin("poll", "txn") & (F.col("mop_f") == "poll") & F.col("key").isNotNull()


@dataclass
class Prepass:
    facts: dict[str, RunFacts]  # runs with spanning ops or assignments (see `facts_for`)
    stats: list[tuple[str, str, str, int, int]]  # (run, f, type, ops, rows)
    grouped_rows: int  # process and commit records: only they need the group column


class _Strings:
    """A string column as small codes: its distinct values (None for null, last) and each row's
    position among them; tests on it cost a lookup per row rather than a string compare
    (a key-bucket file's strings arrive dictionary-encoded from Parquet already)."""

    def __init__(self, column: pa.ChunkedArray | pa.Array) -> None:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column)
        self.values: list[str | None] = column.dictionary.to_pylist() + [None]
        self.codes = pc.fill_null(column.indices, len(self.values) - 1).to_numpy(zero_copy_only=False)

    def is_(self, *names: str) -> np.ndarray:
        """Whether each row's string is one of `names` (False for null)."""
        lookup = np.array([value is not None and value in names for value in self.values], bool)
        return lookup[self.codes]

    def is_not(self, name: str) -> np.ndarray:
        """Whether each row's string is something other than `name` (False for null, as in SQL)."""
        lookup = np.array([value is not None and value != name for value in self.values], bool)
        return lookup[self.codes]


def partial_facts(table: pa.Table, run: str | None = None,
                  multi: dict[str, np.ndarray] | None = None) -> pa.Table:
    """The pre-pass's answer for a slice of history rows (FACT_COLUMNS, and RUN unless all rows
    are of `run`) as PARTIAL_ARROW rows: its statistics per (run, f, type), and the rows of txn
    ops, of assign/subscribe ops that did or may have happened, and of multi-record sends
    after their first. With `multi` (run → sorted op indices of its multi-record sends, from
    the first look), only the first rows of those sends."""
    n = table.num_rows
    if n == 0:
        return PARTIAL_ARROW.empty_table()
    runs = _Strings(pa.DictionaryArray.from_arrays(np.zeros(n, np.int8), pa.array([run], pa.string()))
                    if run is not None else table.column(RUN))
    f, typ, mop = _Strings(table.column("f")), _Strings(table.column("type")), _Strings(table.column("mop_f"))
    row = table.column("row_in_op")
    happened = typ.is_not("invoke")
    later_row = np.asarray(pc.fill_null(pc.greater(row, 0), False).to_numpy(zero_copy_only=False), bool)
    is_send = f.is_("send")
    parts = []
    if multi is None:
        first_row = np.asarray(pc.fill_null(pc.equal(row, 0), False).to_numpy(zero_copy_only=False), bool)
        # (run, f, type) as one number: their codes in mixed radix.
        n_f, n_type = len(f.values), len(typ.values)
        group = (runs.codes.astype(np.int64) * n_f + f.codes) * n_type + typ.codes
        rows = np.bincount(group)
        found = np.flatnonzero(rows)
        ops = np.bincount(group, weights=first_row)[found]
        grouped = np.bincount(group, weights=mop.is_("process", "commit"))[found]
        rows = rows[found]
        m = len(found)
        parts.append(pa.table({
            "run": pa.array([runs.values[g // (n_f * n_type)] for g in found], pa.string()),
            "kind": pa.array(["stat"] * m, pa.string()),
            "f": pa.array([f.values[g // n_type % n_f] for g in found], pa.string()),
            "type": pa.array([typ.values[g % n_type] for g in found], pa.string()),
            "op": pa.nulls(m, pa.int64()), "process": pa.nulls(m, pa.int64()), "key": pa.nulls(m, pa.int64()),
            "writes": pa.nulls(m, pa.bool_()), "reads": pa.nulls(m, pa.bool_()),
            "ops": pa.array(ops.astype(np.int64)), "rows": pa.array(rows.astype(np.int64)),
            "grouped": pa.array(grouped.astype(np.int64))}, schema=PARTIAL_ARROW))
        keep = happened & (f.is_("txn") | (is_send & later_row) | (f.is_(*ASSIGNING) & typ.is_("ok", "info")))
    else:
        keep = happened & is_send & ~later_row
        if keep.any():
            op = pc.fill_null(table.column("op_index"), -1).to_numpy(zero_copy_only=False)
            wanted = np.zeros(n, bool)
            for name, ops_of_run in multi.items():
                wanted |= runs.is_(name) & np.isin(op, ops_of_run)
            keep &= wanted
    picked = np.flatnonzero(keep)
    if len(picked):
        rows_kept = table.select(["op_index", "key", "process"]).take(pa.array(picked))
        has_key = np.asarray(pc.is_valid(rows_kept.column("key")).to_numpy(zero_copy_only=False), bool)
        fc, mc = f.codes[picked], mop.codes[picked]
        k = len(picked)

        def strings(column: _Strings) -> pa.Array:
            return pa.DictionaryArray.from_arrays(column.codes[picked], pa.array(column.values, pa.string())
                                                  ).cast(pa.string())

        def among(column: _Strings, codes: np.ndarray, *names: str) -> np.ndarray:
            return np.array([value is not None and value in names for value in column.values], bool)[codes]

        parts.append(pa.table({
            "run": strings(runs), "kind": pa.array(["row"] * k, pa.string()), "f": strings(f), "type": strings(typ),
            "op": rows_kept.column("op_index"), "process": _as_int64(rows_kept.column("process")),
            "key": rows_kept.column("key"),
            "writes": pa.array(among(f, fc, "send", "txn") & among(mop, mc, "send") & has_key),
            "reads": pa.array(among(f, fc, "poll", "txn") & among(mop, mc, "poll") & has_key),
            "ops": pa.nulls(k, pa.int64()), "rows": pa.nulls(k, pa.int64()), "grouped": pa.nulls(k, pa.int64())},
            schema=PARTIAL_ARROW))
    return pa.concat_tables(parts) if parts else PARTIAL_ARROW.empty_table()


def _as_int64(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The process as a number (null where it is not one, as Spark's cast to bigint gives)."""
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    values = [int(x) if isinstance(x, str) and x.strip().lstrip("-").isdigit() else None for x in column.to_pylist()]
    return pa.chunked_array([pa.array(values, pa.int64())])


def collect_facts(history: DataFrame, by_file: dict[str, list[tuple[str, int]]] | None = None) -> Prepass:
    """The facts per run and the run statistics: one Spark job (two when some run has
    multi-record sends). `by_file`: the runs in key buckets and their files (bucketed_files);
    every other run's rows reach `partial_facts` through Arrow, unshuffled."""
    by_file = by_file or {}
    listed = run_files(history)
    # Runs not in key buckets: all of them when the runs cannot be told from the files.
    others = [run for run in listed if run not in by_file] if listed else None
    partials = _partials(history, by_file, others, None).toArrow()
    multi = multi_record_sends(partials)
    if multi:
        partials = pa.concat_tables([partials, _partials(history, by_file, others, multi).toArrow()])
    return combine(history, partials)


def _partials(history: DataFrame, by_file: dict[str, list[tuple[str, int]]], others: list[str] | None,
              multi: dict[str, np.ndarray] | None) -> DataFrame:
    """partial_facts over every run's rows: by file for `by_file`'s runs, through Arrow for
    `others` (None: every run not in `by_file`); with `multi`, only over its runs."""
    answers = []
    files = {run: found for run, found in by_file.items() if multi is None or run in multi}
    if files:
        def per_file(run: str, uri: str) -> Iterator[pa.RecordBatch]:
            yield from partial_facts(read_file(uri, FACT_COLUMNS), run, multi).to_batches()

        answers.append(map_files(history.sparkSession, files, per_file, PARTIAL_SCHEMA))
    if multi is not None:  # only the runs with multi-record sends, if not read by file
        wanted = [run for run in multi if run not in by_file and (others is None or run in others)]
        others = wanted if wanted else []
    if others is None or others:
        rest = history
        if others is not None:
            rest = rest.where(F.col(RUN).isin(others))
        elif by_file:
            rest = rest.where(~F.col(RUN).isin(list(by_file)))

        def per_batch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield from partial_facts(pa.Table.from_batches([batch]), None, multi).to_batches()

        answers.append(rest.select(F.col(RUN).cast("string").alias(RUN), *FACT_COLUMNS).mapInArrow(per_batch, PARTIAL_SCHEMA))
    if not answers:
        return history.sparkSession.createDataFrame([], PARTIAL_SCHEMA)
    out = answers[0]
    for more in answers[1:]:
        out = out.unionByName(more)
    return out


def multi_record_sends(partials: pa.Table) -> dict[str, np.ndarray]:
    """Run → sorted op indices of its multi-record sends, from the first look's answers."""
    rows = partials.filter(pc.and_(pc.equal(partials.column("kind"), "row"), pc.equal(partials.column("f"), "send")))
    out: dict[str, set[int]] = defaultdict(set)
    for run, op in zip(rows.column("run").to_pylist(), rows.column("op").to_pylist()):
        out[run].add(op)
    return {run: np.array(sorted(ops), np.int64) for run, ops in out.items()}


def combine(history: DataFrame, answers: pa.Table) -> Prepass:
    """The slices' answers (partial_facts) summed and grouped per op: the facts per run and
    its statistics."""
    is_stat = pc.equal(answers.column("kind"), "stat")
    stats: dict[tuple[str, Any, Any], list[int]] = {}
    for run, f, typ, ops, rows, grouped in zip(*(answers.filter(is_stat).column(name).to_pylist() for name in
                                                 ("run", "f", "type", "ops", "rows", "grouped"))):
        total = stats.setdefault((run, f, typ), [0, 0, 0])
        total[0] += ops or 0
        total[1] += rows
        total[2] += grouped or 0
    stat_rows = [(run, f, typ, ops, rows) for (run, f, typ), (ops, rows, _) in stats.items()]
    grouped_rows = sum(grouped for _, _, grouped in stats.values())
    rows = answers.filter(pc.invert(is_stat))
    assigning = pc.fill_null(pc.is_in(rows.column("f"), pa.array(list(ASSIGNING))), False)
    by_run: dict[str, dict[str, Any]] = defaultdict(lambda: {"linking": [], "writing": [], "multi_info": [],
                                                             "restricts": defaultdict(list)})
    # Assign/subscribe ops (a few per consumer): their key sets, per op. An op's rows all
    # carry its f, type and process.
    keys_of: dict[tuple[str, int], tuple[Any, set[int]]] = {}
    assigns = rows.filter(assigning)
    for run, op, process, key in zip(*(assigns.column(name).to_pylist() for name in ("run", "op", "process", "key"))):
        found = keys_of.setdefault((run, op), (process, set()))
        if key is not None:
            found[1].add(key)
    for (run, op), (process, keys) in keys_of.items():
        by_run[run]["restricts"][process].append((op, frozenset(keys)))
    # Every other op (txn ops, multi-record sends: one row per micro-op, so as many as the
    # history's rows in a transactional run) grouped by Arrow, not as a dict per op on the
    # driver (~450 bytes a row).
    others = rows.filter(pc.invert(assigning))
    writes = pc.fill_null(others.column("writes"), False)
    grouped = pa.table({
        "run": others.column("run"), "op": others.column("op"),
        "write_key": pc.if_else(writes, others.column("key"), pa.scalar(None, pa.int64())),
        "reads": pc.fill_null(others.column("reads"), False),
        "info": pc.fill_null(pc.equal(others.column("type"), "info"), False),
    }).group_by(["run", "op"]).aggregate([("write_key", "count_distinct"), ("reads", "any"), ("info", "any")])
    write_keys = grouped.column("write_key_count_distinct").to_numpy(zero_copy_only=False)
    reads = grouped.column("reads_any").to_numpy(zero_copy_only=False).astype(bool)
    info = grouped.column("info_any").to_numpy(zero_copy_only=False).astype(bool)
    op_column = grouped.column("op").to_numpy(zero_copy_only=False).astype(np.int64)
    runs = pc.dictionary_encode(grouped.column("run")).combine_chunks()
    codes = runs.indices.to_numpy(zero_copy_only=False)
    for i, run in enumerate(runs.dictionary.to_pylist()):
        mine = codes == i
        ops_of_run, keys_of_run = op_column[mine], write_keys[mine]
        facts = by_run[run]
        facts["writing"] = ops_of_run[keys_of_run > 0]
        facts["linking"] = ops_of_run[(keys_of_run > 1) | ((keys_of_run > 0) & reads[mine])]
        facts["multi_info"] = [(run, op) for op in ops_of_run[info[mine] & (keys_of_run > 1)].tolist()]
    committed = _committed_multi_key_info(history, [op for f in by_run.values() for op in f["multi_info"]])
    out: dict[str, RunFacts] = {}
    for run, facts in by_run.items():
        restricts = {}
        for process, events in facts["restricts"].items():
            events.sort(key=lambda e: e[0])
            restricts[process] = (np.array([e[0] for e in events], np.int64), [e[1] for e in events])
        out[run] = RunFacts(committed_info_ops=np.unique(np.array(committed.get(run, []), np.int64)),
                            linking_ops=np.unique(np.asarray(facts["linking"], np.int64)),
                            writing_ops=np.unique(np.asarray(facts["writing"], np.int64)),
                            restricts=restricts)
    return Prepass(facts=out, stats=stat_rows, grouped_rows=grouped_rows)


def facts_for(facts: dict[str, RunFacts], run: str) -> RunFacts:
    """A run with no spanning ops and no assignments has nothing beyond its keys to know."""
    found = facts.get(run)
    return found if found is not None else RunFacts()


def _committed_multi_key_info(history: DataFrame, ops: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Of these info ops writing several keys, those some ok poll read a write of."""
    if not ops:
        return {}
    spark = history.sparkSession
    wanted = spark.createDataFrame(ops, f"{RUN} string, op_index bigint")
    h = history.where(F.col("type") != "invoke")
    writes = (h.where(_write() & (F.col("type") == "info")).join(F.broadcast(wanted), [RUN, "op_index"], "left_semi")
              .select(RUN, "key", "value", "op_index"))
    found = (h.where(_read() & (F.col("type") == "ok")).select(RUN, "key", "value")
             .join(F.broadcast(writes), [RUN, "key", "value"]).select(RUN, "op_index").distinct().collect())
    out: dict[str, list[int]] = defaultdict(list)
    for row in found:
        out[row[RUN]].append(row["op_index"])
    return out
