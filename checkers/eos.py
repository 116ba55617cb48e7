"""The exactly-once checks of the eos workload (consume-transform-produce; workloads/eos.py).

A run's copy ops (`f = copy`) each consumed input records (their `poll` rows) and produced
output records (their `send` rows) in one transaction: ok = committed, fail = aborted, info =
unknown. The verifier's ok `poll` op read both topics to their end with read_committed; its
rows in input keys are the input's committed records, the rest the visible output. Input keys
are the keys producers sent to or copies polled; every other key the verifier read is output.
Producers write values unique across the input. A copy writes input value v as
`v << COPY_ID_BITS | copy id` (the id unique per copy op), so every copy's records are
distinct values: the per-key checks of the output keep their meaning (a value twice in a
partition is a duplicate append, not two copies), and `value >> COPY_ID_BITS` names the
input record an output record copies.

  eos-missing    an input value (acknowledged, or read from the input by the verifier) that
                 is nowhere in the visible output
  eos-duplicate  an input value visible in the output more often than it is in the input
                 (once, for an acknowledged value the verifier did not see in the input)
  G1a            a visible output record (key, offset, value) that a failed, so aborted,
                 copy produced: Jepsen's aborted read
  eos-partial    a copy whose outputs are partly invisible: a committed copy with an output
                 missing, or an unknown one with some outputs visible and some not (records
                 whose offset the copy never learnt are left out)

These are DataFrame questions across keys (an input value and its copies live in different
partitions), so they run as their own small job after the per-key pass, only for runs that
have copy ops, with one collection of counts and the first MAX_WITNESSES witnesses each.
Runs with copy ops but no complete verifier read get an error: their verdict is unknown.
"""

from __future__ import annotations

import json
from collections import defaultdict

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.findings import Findings
from checkers.frames import RUN
from checkers.result import CheckerError, Witness

MAX_WITNESSES = 8
COPY_ID_BITS = 20  # the history contract of workloads/eos.py
MAX_LISTED = 8  # ops or records listed in one witness
ANOMALIES = ("eos-missing", "eos-duplicate", "G1a", "eos-partial")


def eos_runs(findings: Findings) -> list[str]:
    """The runs with copy ops."""
    return sorted(run for run, stats in findings.stats.items() if "copy" in stats.get("by_f", {}))


def add_findings(history: DataFrame, findings: Findings) -> None:
    """Run the eos checks on every run with copy ops and merge what they find into `findings`."""
    runs = eos_runs(findings)
    if not runs:
        return
    found, verified = check(history, runs)
    for run in runs:
        if run not in verified:
            findings.errors_by_run[run].append(CheckerError(
                "eos", "no verifier read of both topics completed ok: exactly-once was not judged"))
            continue
        for name, (count, witnesses) in found.get(run, {}).items():
            before = findings.found[run].get(name)
            if before is None:
                findings.found[run][name] = (count, witnesses)
            else:  # G1a of the per-key pass (failed input sends read) and of the copies
                merged = sorted(before[1] + witnesses, key=lambda w: json.dumps(w.detail, sort_keys=True))
                findings.found[run][name] = (before[0] + count, merged[:MAX_WITNESSES])


def _ops(column: str) -> Column:
    """Sorted distinct [op, type] pairs of a collected list, at most MAX_LISTED."""
    return F.slice(F.array_sort(F.array_distinct(F.col(column))), 1, MAX_LISTED)


def check(history: DataFrame, runs: list[str]) -> tuple[dict[str, dict[str, tuple[int, list[Witness]]]], set[str]]:
    """run → anomaly → (count, witnesses), and the runs whose verifier read completed."""
    h = history.where((F.col("type") != "invoke") & F.col(RUN).isin(runs))
    rec = [RUN, "key", "offset", "value", "op_index", "type"]
    has_key = F.col("key").isNotNull()
    copy_polls = h.where((F.col("f") == "copy") & (F.col("mop_f") == "poll") & has_key).select(*rec)
    copy_sends = h.where((F.col("f") == "copy") & (F.col("mop_f") == "send") & has_key).select(*rec)
    input_sends = h.where((F.col("f") == "send") & (F.col("mop_f") == "send") & has_key).select(*rec)
    verifier = h.where((F.col("f") == "poll") & (F.col("type") == "ok"))
    reads = (verifier.where((F.col("mop_f") == "poll") & has_key)
             .groupBy(RUN, "key", "offset", "value").agg(F.min("op_index").alias("reader")))
    input_keys = input_sends.select(RUN, "key").unionByName(copy_polls.select(RUN, "key")).distinct()
    seen_in = reads.join(F.broadcast(input_keys), [RUN, "key"], "left_semi")
    seen_out = (reads.join(F.broadcast(input_keys), [RUN, "key"], "left_anti")
                .withColumn("source", F.shiftright("value", COPY_ID_BITS)))
    op_type = F.array(F.col("op_index").cast("string"), F.col("type"))

    # Every input value: acknowledged by its producer, or read from the input by the verifier.
    acked = (input_sends.where(F.col("type") == "ok").groupBy(RUN, "value")
             .agg(F.min("op_index").alias("producer"), F.min("key").alias("in_key"), F.min("offset").alias("in_offset")))
    in_log = (seen_in.groupBy(RUN, "value")
              .agg(F.count(F.lit(1)).alias("n_in"), F.min("key").alias("v_key"), F.min("offset").alias("v_offset")))
    sources = (acked.join(in_log, [RUN, "value"], "full")
               .select(RUN, "value", "producer", F.coalesce("in_key", "v_key").alias("in_key"),
                       F.coalesce("in_offset", "v_offset").alias("in_offset"),
                       F.coalesce("n_in", F.lit(0)).alias("n_in")))
    out_count = (seen_out.groupBy(RUN, F.col("source").alias("value"))
                 .agg(F.count(F.lit(1)).alias("n_out"),
                      F.slice(F.array_sort(F.collect_list(F.array("key", "offset"))), 1, MAX_LISTED).alias("output")))
    consumed = copy_polls.groupBy(RUN, "value").agg(F.collect_list(op_type).alias("consumed_by"))
    produced = copy_sends.groupBy(RUN, F.shiftright("value", COPY_ID_BITS).alias("value")).agg(F.collect_list(op_type).alias("copied_by"))
    per_value = (sources.join(out_count, [RUN, "value"], "left")
                 .withColumn("n_out", F.coalesce("n_out", F.lit(0)))
                 .join(consumed, [RUN, "value"], "left").join(produced, [RUN, "value"], "left"))
    copy_ops = F.array_union(F.coalesce(F.transform(_ops("consumed_by"), lambda x: x[0].cast("bigint")),
                                        F.array().cast("array<bigint>")),
                             F.coalesce(F.transform(_ops("copied_by"), lambda x: x[0].cast("bigint")),
                                        F.array().cast("array<bigint>")))
    witness_ops = F.slice(F.array_sort(F.array_distinct(F.concat(
        F.when(F.col("producer").isNotNull(), F.array("producer")).otherwise(F.array().cast("array<bigint>")),
        copy_ops))), 1, MAX_LISTED)
    value_detail = F.to_json(F.struct(
        F.col("value"), F.col("in_key").alias("key"), F.col("in_offset").alias("offset"),
        F.col("n_out").alias("count"), F.col("output"),
        _ops("consumed_by").alias("consumed_by"), _ops("copied_by").alias("copied_by")))
    missing = per_value.where(F.col("n_out") == 0).select(
        RUN, F.lit("eos-missing").alias("anomaly"), F.col("value").cast("double").alias("sort"),
        value_detail.alias("detail"), witness_ops.alias("ops"))
    duplicate = per_value.where(F.col("n_out") > F.greatest(F.lit(1), F.col("n_in"))).select(
        RUN, F.lit("eos-duplicate").alias("anomaly"), (-F.col("n_out") * 1e9 + F.col("value")).cast("double").alias("sort"),
        value_detail.alias("detail"), witness_ops.alias("ops"))

    # Aborted copies' records that the read_committed verifier saw.
    aborted = (seen_out.join(copy_sends.where(F.col("type") == "fail").drop("type"), [RUN, "key", "offset", "value"])
               .select(RUN, F.lit("G1a").alias("anomaly"), F.col("reader").cast("double").alias("sort"),
                       F.to_json(F.struct("key", "value", "offset")).alias("detail"),
                       F.array("op_index", "reader").alias("ops")))

    # Atomicity: each copy's outputs, visible or not.
    placed = copy_sends.where(F.col("offset").isNotNull() & F.col("type").isin("ok", "info"))
    visibility = (placed.join(seen_out.select(RUN, "key", "offset", "value").withColumn("visible", F.lit(True)),
                              [RUN, "key", "offset", "value"], "left")
                  .groupBy(RUN, "op_index", "type")
                  .agg(F.count(F.lit(1)).alias("records"), F.count("visible").alias("visible"),
                       F.slice(F.array_sort(F.collect_list(F.when(F.col("visible").isNull(),
                                                                  F.array("key", "offset", "value")))),
                               1, MAX_LISTED).alias("invisible")))
    partial = (visibility.where(((F.col("type") == "ok") & (F.col("visible") < F.col("records")))
                                | ((F.col("type") == "info") & (F.col("visible") > 0)
                                   & (F.col("visible") < F.col("records"))))
               .select(RUN, F.lit("eos-partial").alias("anomaly"), F.col("op_index").cast("double").alias("sort"),
                       F.to_json(F.struct(F.col("op_index").alias("op"), "type", "records", "visible",
                                          "invisible")).alias("detail"),
                       F.array("op_index").alias("ops")))

    rows = missing.unionByName(duplicate).unionByName(aborted).unionByName(partial)
    by_anomaly = Window.partitionBy(RUN, "anomaly")
    ranked = (rows.withColumn("n", F.count(F.lit(1)).over(by_anomaly))
              .withColumn("rank", F.row_number().over(by_anomaly.orderBy("sort", "detail")))
              .where(F.col("rank") <= MAX_WITNESSES)
              .select(RUN, "anomaly", "n", "rank", "detail", "ops", F.lit(False).alias("marker")))
    marker = (verifier.select(RUN).distinct()
              .select(RUN, F.lit(None).cast("string").alias("anomaly"), F.lit(0).cast("bigint").alias("n"),
                      F.lit(0).alias("rank"), F.lit(None).cast("string").alias("detail"),
                      F.lit(None).cast("array<bigint>").alias("ops"), F.lit(True).alias("marker")))
    collected = ranked.unionByName(marker).collect()
    verified = {row[RUN] for row in collected if row["marker"]}
    found: dict[str, dict[str, tuple[int, list[Witness]]]] = defaultdict(dict)
    witnesses: dict[tuple[str, str], list[tuple[int, Witness]]] = defaultdict(list)
    counts: dict[tuple[str, str], int] = {}
    for row in collected:
        if row["marker"]:
            continue
        counts[(row[RUN], row["anomaly"])] = row["n"]
        witnesses[(row[RUN], row["anomaly"])].append(
            (row["rank"], Witness(op_indices=[int(x) for x in row["ops"] if x is not None],
                                  detail=json.loads(row["detail"]))))
    for (run, name), n in counts.items():
        found[run][name] = (n, [w for _, w in sorted(witnesses[(run, name)], key=lambda p: p[0])])
    return dict(found), verified
