"""The fused check job: every per-key check in one numpy pass per (run, key) (perkey.py) over
each key-bucket file of a run (or, for a run in an older layout, after one shuffle of its rows
by (run, key)), one collection of the small answer.

The tests' DataFrame oracle runs each anomaly as its own DataFrame, about 30 Spark jobs and 100
stages of fixed cost per history; here a history costs the pre-pass (prepass.py: one job of
Python tasks reading a few columns of each key-bucket file, plus one more only when a run has
multi-record sends or an info op wrote several keys) and one job over the key-bucket files
(or the shuffled rows). Each
key group sends back at most MAX_WITNESSES witnesses and a count per anomaly, its
statistics and the dependency edges it found; the driver merges them exactly as the
DataFrame oracle ranks its rows: by (sort, detail), counts summed over keys.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from checkers import cycles, perkey, prepass
from checkers.findings import Findings
from checkers.frames import RUN, bucketed_files, map_files, read_file
from checkers.result import CheckerError, Witness

MAX_WITNESSES = perkey.MAX_WITNESSES
CheckFn = Callable[[perkey.KeyData, perkey.Emitter], None]


ROWS_PER_PARTITION = 2_000_000  # a Python worker holds one partition at a time


def _code() -> Column:
    """perkey's `code` column: type, f, mop_f and rebalanced in one small int."""
    code: Column = F.lit(0)
    for column, names, weight in perkey.CODE_FIELDS:
        position = F.lit(perkey.OTHER)
        for i, name in reversed(list(enumerate(names))):
            position = F.when(F.col(column) == name, F.lit(i)).otherwise(position)
        code = code + position * weight
    rebalanced = F.when(F.coalesce(F.col("rebalanced"), F.lit(True)), F.lit(perkey.REBALANCED_BIT)).otherwise(0)
    row = F.col("row_in_op").cast("bigint")
    waited = F.col("op_index") - F.col("invoke_index")
    fits = ((row >= 0) & (row < perkey.ROW_LIMIT) & (waited >= 0) & (waited < perkey.INVOKE_LIMIT))
    packed = (code.cast("bigint") + rebalanced + F.shiftleft(row, perkey.ROW_SHIFT)
              + F.shiftleft(waited, perkey.INVOKE_SHIFT))
    return F.when(fits, packed).otherwise(F.raise_error(F.concat(
        F.lit("op "), F.col("op_index").cast("string"), F.lit(": row_in_op "), F.col("row_in_op").cast("string"),
        F.lit(" or invoke_index "), F.col("invoke_index").cast("string"),
        F.lit(" out of the range the per-key pass packs (row < 2^22, invocation < 2^31 events before)"))))


def per_key_answers(history: DataFrame, pre: prepass.Prepass, checks: dict[str, CheckFn] | None = None,
                    by_file: dict[str, list[tuple[str, int]]] | None = None) -> DataFrame:
    """The per-key pass as a DataFrame of perkey.OUTPUT_SCHEMA rows.

    A run written in key buckets (harness/history_parquet.py: every key's rows in one file;
    `by_file`, bucketed_files' answer, if already known) is checked file by file: each task
    reads one file itself, only the columns the checks need, with no shuffle and no trip of
    its rows through the JVM.
    Any other run (an older layout, a file given with a run column) is shuffled by (run, key)
    and each Python worker splits its partition into keys itself: Spark's grouped map would
    sort every partition first, which measured twice as slow here."""
    facts = pre.facts
    # Copied here so the workers get exactly this registry (a test may swap a check).
    chosen = dict(perkey.CHECKS if checks is None else checks)
    # Rows reach the checks with their run's index, not its name: a string per row is hashed
    # by the shuffle and copied into Arrow (10^7 rows: the whole per-key pass took 17.1 s of
    # CPU against 18.3 s, three runs each, bench history). The answers carry the name.
    runs = sorted({run for run, *_ in pre.stats})
    run_facts = [prepass.facts_for(facts, run) for run in runs]

    def facts_of(run: int) -> perkey.RunFacts:
        return run_facts[run]

    def run_name(run: int) -> str:
        return runs[run]

    if by_file is None:
        by_file = bucketed_files(history, runs)
    by_file = {run: files for run, files in by_file.items() if run in runs}
    answers = []
    if by_file:
        answers.append(_file_answers(history.sparkSession, by_file, runs, facts_of, run_name, chosen))
    shuffled = [run for run in runs if run not in by_file]
    if shuffled or not answers:
        answers.append(_shuffled_answers(history, pre, runs, shuffled, facts_of, run_name, chosen))
    out = answers[0]
    for more in answers[1:]:
        out = out.unionByName(more)
    return out


def _file_answers(spark: SparkSession, by_file: dict[str, list[tuple[str, int]]], runs: list[str],
                  facts_of: Callable[[int], perkey.RunFacts], run_name: Callable[[int], str],
                  chosen: dict[str, CheckFn]) -> DataFrame:
    index = {run: i for i, run in enumerate(runs)}

    def per_file(run: str, uri: str) -> Iterator[pa.RecordBatch]:
        table = read_file(uri, perkey.HISTORY_COLUMNS)
        cols = perkey.columns_from_history(table, index[run])
        del table
        for answer in perkey.check_columns(cols, facts_of, run_name, chosen):
            yield from answer.to_batches()

    return map_files(spark, by_file, per_file, perkey.OUTPUT_SCHEMA)


def _shuffled_answers(history: DataFrame, pre: prepass.Prepass, runs: list[str], shuffled: list[str],
                      facts_of: Callable[[int], perkey.RunFacts], run_name: Callable[[int], str],
                      chosen: dict[str, CheckFn]) -> DataFrame:
    spark = history.sparkSession
    total_rows = sum(rows for run, *_, rows in pre.stats if run in shuffled)
    partitions = max(int(spark.conf.get("spark.sql.shuffle.partitions")), -(-total_rows // ROWS_PER_PARTITION))

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if not received:
            return
        for answer in perkey.check_partition(pa.Table.from_batches(received), facts_of, run_name, chosen):
            yield from answer.to_batches()

    if len(runs) <= 1:
        run_index = F.lit(0)
    else:
        run_index = F.element_at(F.create_map(*[F.lit(x) for i, run in enumerate(runs) for x in (run, i)]), F.col(RUN))
    columns = [run_index.cast("int").alias(RUN), "key", "process", "op_index", "offset", "value", _code().alias("code")]
    if pre.grouped_rows:
        columns.append("group")
    rows = history.where(F.col("key").isNotNull())
    if len(shuffled) < len(runs):
        rows = rows.where(F.col(RUN).isin(shuffled))
    return rows.select(*columns).repartition(partitions, RUN, "key").mapInArrow(per_partition, perkey.OUTPUT_SCHEMA)


def findings(history: DataFrame, checks: dict[str, CheckFn] | None = None) -> Findings:
    by_file = bucketed_files(history)
    pre = prepass.collect_facts(history, by_file)
    answers = per_key_answers(history, pre, checks, by_file).toArrow()
    # Edges are most of the answer (10^8 bench: ~5·10^5): read them column by column, not
    # as one dict per row.
    is_edge = pc.equal(answers.column("kind"), "edge")
    out = merge(answers.filter(pc.invert(is_edge)).to_pylist())
    _add_edges(out, answers.filter(is_edge))
    for run, f, typ, ops, n_rows in pre.stats:
        out.add_stat(run, f, typ, ops, n_rows)
    return out


def _add_edges(out: Findings, edges: pa.Table) -> None:
    """The edge rows into `out.graphs`, one cycles.Edges of columns per run: a run of 10^9
    history rows has millions of edges, too many for Python tuples on the driver."""
    if edges.num_rows == 0:
        return
    runs = pc.dictionary_encode(edges.column("run")).combine_chunks()
    codes = runs.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(runs.dictionary) + 1))

    def numbers(name: str, rows: np.ndarray) -> np.ndarray:
        return edges.column(name).take(pa.array(rows)).to_numpy(zero_copy_only=False).astype(np.int64)

    for i, run in enumerate(runs.dictionary.to_pylist()):
        rows = order[bounds[i]:bounds[i + 1]]
        rel = edges.column("rel").take(pa.array(rows))
        unknown = set(pc.unique(rel).to_pylist()) - set(cycles.RELS)
        if unknown:
            raise ValueError(f"dependency edges with relations {sorted(unknown)}: only {cycles.RELS} are built")
        ends = np.concatenate([numbers("src", rows), numbers("dst", rows)])
        invoke = np.concatenate([numbers("src_invoke", rows), numbers("dst_invoke", rows)])
        ok = np.concatenate([pc.equal(edges.column(name).take(pa.array(rows)), "ok").to_numpy(zero_copy_only=False)
                             for name in ("src_type", "dst_type")]).astype(bool)
        vertex_op, first = np.unique(ends, return_index=True)
        out.graphs[run] = cycles.Edges.checked(
            src=ends[:len(rows)], dst=ends[len(rows):],
            rel=pc.equal(rel, "wr").to_numpy(zero_copy_only=False).astype(np.int8),  # RELS: ww 0, wr 1
            key=numbers("key", rows), value=numbers("value", rows),
            vertex_op=vertex_op, vertex_invoke=invoke[first], vertex_ok=ok[first])


def merge(rows: list[dict]) -> Findings:
    out = Findings()
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    witnesses: dict[str, dict[str, list[tuple[float, str, list[int]]]]] = defaultdict(lambda: defaultdict(list))
    precommitted: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    processed: dict[str, int] = defaultdict(int)
    errors: dict[str, dict[str, str]] = defaultdict(dict)
    graphs: dict[str, tuple[list[tuple], dict[int, tuple[int, str]]]] = defaultdict(lambda: ([], {}))
    for row in rows:
        run, kind = row["run"], row["kind"]
        if kind == "count":
            counts[run][row["anomaly"]] += row["n"]
        elif kind == "witness":
            witnesses[run][row["anomaly"]].append((row["sort"], row["detail"], row["op_indices"]))
        elif kind == "precommitted":
            found = precommitted[run].get(row["src"])
            candidate = (row["key"], row["value"])
            if found is None or candidate < found:
                precommitted[run][row["src"]] = candidate
        elif kind == "processed":
            processed[run] += row["n"]
        elif kind == "edge":
            edges, vertices = graphs[run]
            edges.append((row["src"], row["dst"], row["rel"], row["key"], row["value"]))
            vertices[row["src"]] = (row["src_invoke"], row["src_type"])
            vertices[row["dst"]] = (row["dst_invoke"], row["dst_type"])
        elif kind == "error":
            errors[run].setdefault(row["anomaly"], row["detail"])
    for run, by_op in precommitted.items():
        counts[run]["precommitted-read"] = len(by_op)
        witnesses[run]["precommitted-read"] = [
            (float(op), perkey.to_json({"key": k, "value": v}), [op]) for op, (k, v) in by_op.items()]
    for run in list(counts):
        if not processed.get(run):
            # Unprocessed judges group consumers; a run that processed nothing has none.
            counts[run].pop("unprocessed", None)
            witnesses[run].pop("unprocessed", None)
    for run, by_anomaly in counts.items():
        for name, count in by_anomaly.items():
            best = sorted(witnesses[run][name], key=lambda w: (w[0], w[1], list(w[2])))[:MAX_WITNESSES]
            out.found[run][name] = (count, [Witness(op_indices=list(ops), detail=json.loads(detail))
                                            for _, detail, ops in best])
    for run, by_check in errors.items():
        out.errors_by_run[run].extend(CheckerError(name, message) for name, message in sorted(by_check.items()))
    out.graphs = dict(graphs)
    return out
