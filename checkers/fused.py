"""The fused check job: one shuffle of the history by (run, key), every per-key check in one
Arrow pass per group (perkey.py), one collection of the small answer.

The tests' DataFrame oracle runs each anomaly as its own DataFrame, about 30 Spark jobs and 100
stages of fixed cost per history; here a history costs the pre-pass (prepass.py: one small
action with the run statistics, plus one more only when an info op wrote several keys) and
one job over the shuffled rows. Each
key group sends back at most MAX_WITNESSES witnesses and a count per anomaly, its
statistics and the dependency edges it found; the driver merges them exactly as the
DataFrame oracle ranks its rows: by (sort, detail), counts summed over keys.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Callable, Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checkers import perkey, prepass
from checkers.findings import Findings
from checkers.frames import RUN
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


def per_key_answers(history: DataFrame, pre: prepass.Prepass,
                    checks: dict[str, CheckFn] | None = None) -> DataFrame:
    """The per-key pass as a DataFrame of perkey.OUTPUT_SCHEMA rows.

    The rows are hash-partitioned by (run, key), and each Python worker splits its partition
    into keys itself: Spark's grouped map would sort every partition first, which measured
    twice as slow here."""
    facts = pre.facts
    # Copied here so the workers get exactly this registry (a test may swap a check).
    chosen = dict(perkey.CHECKS if checks is None else checks)
    spark = history.sparkSession
    total_rows = sum(rows for *_, rows in pre.stats)
    partitions = max(int(spark.conf.get("spark.sql.shuffle.partitions")), -(-total_rows // ROWS_PER_PARTITION))

    # Rows cross from the JVM into Python with their run's index, not its name: a string per
    # row is hashed by the shuffle and copied into Arrow (10^7 rows: the whole per-key pass
    # took 17.1 s of CPU against 18.3 s, three runs each, bench history). The answers, a few
    # rows per key, get the name back.
    runs = sorted({run for run, *_ in pre.stats})

    def facts_of(run: str) -> perkey.RunFacts:
        return prepass.facts_for(facts, runs[int(run)])

    def per_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if not received:
            return
        for answer in perkey.check_partition(pa.Table.from_batches(received), facts_of, chosen):
            if answer.num_rows:
                name = runs[int(answer.column(RUN)[0].as_py())]
                answer = answer.set_column(answer.schema.get_field_index(RUN), RUN,
                                           pa.repeat(pa.scalar(name, pa.string()), answer.num_rows))
            yield from answer.to_batches()

    if len(runs) <= 1:
        run_index = F.lit(0)
    else:
        run_index = F.element_at(F.create_map(*[F.lit(x) for i, run in enumerate(runs) for x in (run, i)]), F.col(RUN))
    columns = [run_index.cast("int").alias(RUN), "key", "process", "op_index", "offset", "value", _code().alias("code")]
    if pre.grouped_rows:
        columns.append("group")
    coded = history.where(F.col("key").isNotNull()).select(*columns)
    return coded.repartition(partitions, RUN, "key").mapInArrow(per_partition, perkey.OUTPUT_SCHEMA)


def findings(history: DataFrame, checks: dict[str, CheckFn] | None = None) -> Findings:
    pre = prepass.collect_facts(history)
    rows = per_key_answers(history, pre, checks).toArrow().to_pylist()
    out = merge(rows)
    for run, f, typ, ops, n_rows in pre.stats:
        out.add_stat(run, f, typ, ops, n_rows)
    return out


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
