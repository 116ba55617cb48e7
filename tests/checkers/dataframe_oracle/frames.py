"""The DataFrame oracle's shared frames (the reference plan, not the product: checkers/perkey.py
builds the same structures per key), built once per job from the history rows.

All frames are keyed by `run`, so one job checks one history or many. Jepsen's structures
(reference/jepsen-kafka.md §1.6), made sparse: nothing is indexed by raw offset, so memory
follows the number of records, never the size of offsets.

reads      every polled record, from ok, info and fail poll/txn ops alike
writes     every sent record of a completed send/txn op (ok, info, fail)
committed  ops that must have committed: ok, or info with a write some ok op read
evidence_writes
           the sends whose offsets are evidence of the log: those of must-have-committed ops
           with a real (non-negative) offset, in every run whatever the acks setting, as in
           Jepsen; whether what they show (a reused offset) is allowed is the claims' business
log        distinct (run, key, offset, value) from all polls and from the evidence writes with
           a known offset: the version order's evidence
slots      per (run, key, offset) the dense index (offset rank among known offsets of the key)
           and the slot's representative value (its smallest value: Jepsen takes the first of
           the slot's set, so a conflicting slot names one value and the others have no index)
by_value   value → dense index of the last slot it represents (Jepsen's by-value: last wins);
           values absent here have an unknown index, and "delta" with them is 1 (no error)
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.frames import RUN


@dataclass
class Frames:
    history: DataFrame
    reads: DataFrame
    writes: DataFrame
    committed: DataFrame
    evidence_writes: DataFrame
    log: DataFrame
    slots: DataFrame
    by_value: DataFrame

    def idx(self, df: DataFrame, value_col: str, out: str) -> DataFrame:
        """Add the dense index of `value_col` (per run, key) as column `out` (null if unknown)."""
        bv = self.by_value.select(RUN, "key", F.col("value").alias(value_col), F.col("idx").alias(out))
        return df.join(bv, [RUN, "key", value_col], "left")


def delta(a: Column, b: Column) -> Column:
    """Jepsen's delta = idx(b) − idx(a), taken as 1 (no error) when either index is unknown."""
    return F.when(a.isNull() | b.isNull(), F.lit(1)).otherwise(b - a)


def build_frames(history: DataFrame) -> Frames:
    h = history.where(F.col("type") != "invoke")
    reads = (h.where(F.col("f").isin("poll", "txn") & (F.col("mop_f") == "poll") & F.col("key").isNotNull())
             .select(RUN, "process", "op_index", "invoke_index", "type", "f", "row_in_op", "key", "offset",
                     "value", "rebalanced"))
    writes = (h.where(F.col("f").isin("send", "txn") & (F.col("mop_f") == "send") & F.col("key").isNotNull())
              .select(RUN, "process", "op_index", "invoke_index", "type", "f", "row_in_op", "key", "offset",
                      "value"))
    ok_read_values = reads.where(F.col("type") == "ok").select(RUN, "key", "value").distinct()
    info_committed = (writes.where(F.col("type") == "info")
                      .join(ok_read_values, [RUN, "key", "value"], "left_semi")
                      .select(RUN, "op_index").distinct())
    committed = (writes.where(F.col("type") == "ok").select(RUN, "op_index").distinct()
                 .unionByName(info_committed).distinct())
    evidence_writes = (writes.join(committed, [RUN, "op_index"], "left_semi")
                       .where(F.col("offset").isNull() | (F.col("offset") >= 0)))
    log = (reads.where(F.col("offset").isNotNull()).select(RUN, "key", "offset", "value")
           .unionByName(evidence_writes.where(F.col("offset").isNotNull()).select(RUN, "key", "offset", "value"))
           .distinct())
    slot_window = Window.partitionBy(RUN, "key").orderBy("offset")
    slots = (log.groupBy(RUN, "key", "offset").agg(F.min("value").alias("rep"),
                                                   F.count(F.lit(1)).alias("n_values"))
             .withColumn("idx", F.row_number().over(slot_window) - 1))
    by_value = slots.groupBy(RUN, "key", F.col("rep").alias("value")).agg(F.max("idx").alias("idx"))
    return Frames(history=history, reads=reads, writes=writes, committed=committed,
                  evidence_writes=evidence_writes, log=log, slots=slots, by_value=by_value)


def persist(fr: Frames) -> Frames:
    """Cache the shared frames: every check joins against them, and recomputing the version
    order for each would multiply the job's stages."""
    for df in (fr.reads, fr.writes, fr.committed, fr.evidence_writes, fr.log, fr.slots, fr.by_value):
        df.persist()
    return fr


def unpersist(fr: Frames) -> None:
    for df in (fr.reads, fr.writes, fr.committed, fr.evidence_writes, fr.log, fr.slots, fr.by_value):
        df.unpersist()
