"""The few facts a key group cannot see alone, gathered before the per-key pass.

  * assign/subscribe events (ok or info) with their key sets: a process that drops a key
    forgets its position there, whichever group the event's own rows landed in;
  * ops whose writes span keys or that also read (txn ops, multi-record sends): whether
    they write at all and whether they "link" keys for the cycle search;
  * info ops writing several keys that some ok poll read in any key: they must have
    committed, so their writes are evidence in every key they wrote;
  * and the run statistics (ops and rows per f and type), a partial aggregation.

Only these ops' rows are shuffled (none at all in a plain queue run's send path), so the
pre-pass is small next to the per-key pass. The answer is collected to the driver and
shipped to every key group inside the per-key function.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checkers.frames import RUN
from checkers.perkey import RunFacts



def _write() -> Column:
    return F.col("f").isin("send", "txn") & (F.col("mop_f") == "send") & F.col("key").isNotNull()


def _read() -> Column:
    return F.col("f").isin("poll", "txn") & (F.col("mop_f") == "poll") & F.col("key").isNotNull()


@dataclass
class Prepass:
    facts: dict[str, RunFacts]  # runs with spanning ops or assignments (see `facts_for`)
    stats: list[tuple[str, str, str, int, int]]  # (run, f, type, ops, rows)
    grouped_rows: int  # process and commit records: only they need the group column


def collect_facts(history: DataFrame) -> Prepass:
    """The facts per run, and the run statistics, in one action."""
    h = history.where(F.col("type") != "invoke")
    multi_row_sends = (h.where((F.col("f") == "send") & (F.col("row_in_op") > 0)).select(RUN, "op_index")
                       .distinct().withColumn("multi_row", F.lit(True)))
    assigning = F.col("f").isin("assign", "subscribe")
    # The rows of txn ops, of multi-record sends and of assign/subscribe ops, per op.
    ops = (h.join(F.broadcast(multi_row_sends), [RUN, "op_index"], "left")
           .where((F.col("f") == "txn") | F.col("multi_row").isNotNull()
                  | (assigning & F.col("type").isin("ok", "info")))
           .groupBy(RUN, "op_index")
           .agg(F.first("f").alias("f"), F.first("type").alias("type"),
                F.first(F.col("process").cast("bigint")).alias("process"),
                F.collect_set(F.when(_write(), F.col("key"))).alias("write_keys"),
                F.max(_read()).alias("reads"),
                F.collect_set(F.when(assigning, F.col("key"))).alias("keys"),
                F.lit(None).cast("bigint").alias("ops"), F.lit(None).cast("bigint").alias("rows"),
                F.lit(None).cast("bigint").alias("grouped")))
    # Every op has exactly one row with row_in_op 0 (harness/history_parquet.py), so counting
    # those counts ops without a distinct.
    stats = (history.groupBy(RUN, "f", "type")
             .agg(F.lit(None).cast("bigint").alias("op_index"), F.lit(None).cast("bigint").alias("process"),
                  F.lit(None).cast("array<bigint>").alias("write_keys"), F.lit(None).cast("boolean").alias("reads"),
                  F.lit(None).cast("array<bigint>").alias("keys"),
                  F.sum((F.col("row_in_op") == 0).cast("bigint")).alias("ops"), F.count(F.lit(1)).alias("rows"),
                  F.sum(F.col("mop_f").isin("process", "commit").cast("bigint")).alias("grouped"))
             .select(RUN, "op_index", "f", "type", "process", "write_keys", "reads", "keys", "ops", "rows", "grouped"))
    rows = ops.withColumn("is_stat", F.lit(False)).unionByName(stats.withColumn("is_stat", F.lit(True))).collect()
    stat_rows = [(row[RUN], row["f"], row["type"], row["ops"] or 0, row["rows"]) for row in rows if row["is_stat"]]
    grouped_rows = sum(row["grouped"] or 0 for row in rows if row["is_stat"])
    rows = [row for row in rows if not row["is_stat"]]
    by_run: dict[str, dict[str, Any]] = defaultdict(lambda: {"linking": [], "writing": [], "multi_info": [],
                                                             "restricts": defaultdict(list)})
    for row in rows:
        facts = by_run[row[RUN]]
        if row["f"] in ("assign", "subscribe"):
            facts["restricts"][row["process"]].append((row["op_index"], frozenset(row["keys"])))
            continue
        write_keys = len(row["write_keys"])
        if write_keys:
            facts["writing"].append(row["op_index"])
        if write_keys > 1 or (write_keys and row["reads"]):
            facts["linking"].append(row["op_index"])
        if row["type"] == "info" and write_keys > 1:
            facts["multi_info"].append((row[RUN], row["op_index"]))
    committed = _committed_multi_key_info(history, [op for f in by_run.values() for op in f["multi_info"]])
    out: dict[str, RunFacts] = {}
    for run, facts in by_run.items():
        restricts = {}
        for process, events in facts["restricts"].items():
            events.sort(key=lambda e: e[0])
            restricts[process] = (np.array([e[0] for e in events], np.int64), [e[1] for e in events])
        out[run] = RunFacts(committed_info_ops=np.unique(np.array(committed.get(run, []), np.int64)),
                            linking_ops=np.unique(np.array(facts["linking"], np.int64)),
                            writing_ops=np.unique(np.array(facts["writing"], np.int64)),
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
