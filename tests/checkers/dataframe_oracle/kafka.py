"""Jepsen's Kafka anomalies (reference/jepsen-kafka.md §1.7) as DataFrame → DataFrame checks.

Each function takes the shared `Frames` and returns rows in the `emit` shape, keyed by run.
The rules that decide false positives are Jepsen's:
  * polls from ok, info and fail ops all count toward the version order and duplicates;
  * sends count only when their op must have committed;
  * an unknown index makes delta 1 (no error);
  * the external poll position advances only on ok ops; assign/subscribe (ok or info)
    restrict it to the new key set; keys in an op's rebalance log are exempt from the
    internal poll checks.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.frames import RUN

from .emit import emit
from .frames import Frames, delta

MAX_WITNESS_OPS = 8


def lost_write(fr: Frames) -> DataFrame:
    """Values that precede, in the version order, a value some ok poll read, yet no ok poll read
    them, and whose writer must have committed.

    Compared by offset rather than by dense index (the same order: the index is the offset's
    rank), over the log plus every acknowledged send. So an acks=1 write that was lost and
    whose offset another record took is still found, though it is no evidence of the log."""
    ok_values = fr.reads.where(F.col("type") == "ok").select(RUN, "key", "value").distinct()
    acked = fr.evidence_writes.where(F.col("offset").isNotNull())
    placed = (fr.log.unionByName(acked.select(RUN, "key", "offset", "value"))
              .groupBy(RUN, "key", "value").agg(F.min("offset").alias("first_offset"),
                                                 F.max("offset").alias("last_offset")))
    bound = (placed.join(ok_values, [RUN, "key", "value"], "left_semi")
             .groupBy(RUN, "key").agg(F.max("first_offset").alias("bound_offset")))
    lost = (placed.join(bound, [RUN, "key"]).where(F.col("last_offset") <= F.col("bound_offset"))
            .join(ok_values, [RUN, "key", "value"], "left_anti"))
    writers = (fr.writes.join(fr.committed, [RUN, "op_index"], "left_semi")
               .groupBy(RUN, "key", "value").agg(F.min("op_index").alias("writer"), F.min("offset").alias("offset")))
    max_read = (fr.reads.where(F.col("type") == "ok").join(placed, [RUN, "key", "value"])
                .join(bound, [RUN, "key"]).where(F.col("first_offset") == F.col("bound_offset"))
                .groupBy(RUN, "key").agg(F.min("op_index").alias("max_read_op")))
    found = lost.join(writers, [RUN, "key", "value"]).join(max_read, [RUN, "key"], "left")
    # Dense indices for the witness; null for a lost value that is no evidence of the log.
    slot = fr.slots.select(RUN, "key", "offset", "idx")
    found = (found.join(slot.withColumnRenamed("offset", "first_offset").withColumnRenamed("idx", "first_idx"),
                        [RUN, "key", "first_offset"], "left")
             .join(slot.withColumnRenamed("offset", "bound_offset").withColumnRenamed("idx", "bound"),
                   [RUN, "key", "bound_offset"], "left"))
    return emit(found, "lost-write", F.col("key") * 1e9 + F.col("first_offset"),
                [F.col("writer"), F.col("max_read_op")],
                key=F.col("key"), value=F.col("value"), offset=F.col("offset"), index=F.col("first_idx"),
                max_read_index=F.col("bound"))


def unseen(fr: Frames) -> DataFrame:
    """Values of ok sends that no ok poll ever read."""
    ok_values = fr.reads.where(F.col("type") == "ok").select(RUN, "key", "value")
    sent = (fr.writes.where(F.col("type") == "ok")
            .groupBy(RUN, "key", "value").agg(F.min("op_index").alias("writer"), F.min("offset").alias("offset")))
    found = sent.join(ok_values, [RUN, "key", "value"], "left_anti")
    return emit(found, "unseen", F.col("key") * 1e9 + F.col("writer"), [F.col("writer")],
                key=F.col("key"), value=F.col("value"), offset=F.col("offset"))


def _log_ops(fr: Frames) -> DataFrame:
    """(run, key, offset, value, op_index) of every op whose record is evidence in the log."""
    return (fr.reads.where(F.col("offset").isNotNull()).select(RUN, "key", "offset", "value", "op_index")
            .unionByName(fr.evidence_writes.where(F.col("offset").isNotNull())
                         .select(RUN, "key", "offset", "value", "op_index")))


def _first_ops(col: str) -> Column:
    return F.slice(F.array_sort(F.collect_set(col)), 1, MAX_WITNESS_OPS)


def duplicate(fr: Frames) -> DataFrame:
    """A value at more than one offset of a key."""
    dups = (fr.log.groupBy(RUN, "key", "value")
            .agg(F.count(F.lit(1)).alias("count"), F.array_sort(F.collect_list("offset")).alias("offsets"))
            .where(F.col("count") > 1))
    ops = (_log_ops(fr).join(dups.select(RUN, "key", "value"), [RUN, "key", "value"], "left_semi")
           .groupBy(RUN, "key", "value").agg(_first_ops("op_index").alias("ops")))
    found = dups.join(ops, [RUN, "key", "value"], "left")
    return emit(found, "duplicate", -F.col("count") * 1e9 + F.col("key"), F.col("ops"),
                key=F.col("key"), value=F.col("value"), count=F.col("count"), offsets=F.col("offsets"))


def inconsistent_offsets(fr: Frames) -> DataFrame:
    """An offset of a key holding two or more values."""
    bad = fr.slots.where(F.col("n_values") > 1).select(RUN, "key", "offset", "idx", "n_values")
    detail = (_log_ops(fr).join(bad.select(RUN, "key", "offset"), [RUN, "key", "offset"], "left_semi")
              .groupBy(RUN, "key", "offset")
              .agg(F.array_sort(F.collect_set("value")).alias("values"), _first_ops("op_index").alias("ops")))
    found = bad.join(detail, [RUN, "key", "offset"])
    return emit(found, "inconsistent-offsets", -F.col("n_values") * 1e9 + F.col("key"), F.col("ops"),
                key=F.col("key"), offset=F.col("offset"), index=F.col("idx"), values=F.col("values"))


def aborted_read(fr: Frames) -> DataFrame:
    """G1a: an ok poll read a value whose writing op failed."""
    failed = fr.writes.where(F.col("type") == "fail").select(RUN, "key", "value", F.col("op_index").alias("writer"))
    found = (fr.reads.where(F.col("type") == "ok").join(failed, [RUN, "key", "value"])
             .groupBy(RUN, "key", "value", "writer").agg(F.min("op_index").alias("reader")))
    return emit(found, "G1a", F.col("reader"), [F.col("writer"), F.col("reader")],
                key=F.col("key"), value=F.col("value"))


def precommitted_read(fr: Frames) -> DataFrame:
    """An op polled a value it sent itself (sends must be invisible until their txn commits)."""
    found = (fr.reads.join(fr.writes.select(RUN, "op_index", "key", "value"), [RUN, "op_index", "key", "value"])
             .groupBy(RUN, "op_index").agg(F.min(F.struct("key", "value")).alias("kv")))
    return emit(found, "precommitted-read", F.col("op_index"), [F.col("op_index")],
                key=F.col("kv.key"), value=F.col("kv.value"))


def _restrict_events(fr: Frames, keyed: DataFrame) -> DataFrame:
    """Reset events: an ok/info assign or subscribe by the process whose key set leaves out
    a key the process touches in `keyed`; it forgets that key's last position."""
    restricts = (fr.history.where(F.col("f").isin("assign", "subscribe") & F.col("type").isin("ok", "info"))
                 .groupBy(RUN, "process", "op_index").agg(F.collect_set("key").alias("keys")))
    process_keys = keyed.select(RUN, "process", "key").distinct()
    return (restricts.join(process_keys, [RUN, "process"])
            .where(~F.array_contains(F.col("keys"), F.col("key")))
            .select(RUN, "process", "key", "op_index"))


def _external(fr: Frames, rows: DataFrame, updates: Column) -> DataFrame:
    """Per (process, key): each op's first value against the last value of the latest earlier
    op that updates the position (`updates`), unless an assign/subscribe dropped the key
    in between. Returns one row per (op, key) with a predecessor and its delta."""
    per_op = (rows.groupBy(RUN, "process", "op_index", "type", "key")
              .agg(F.min_by("value", "row_in_op").alias("first_value"),
                   F.max_by("value", "row_in_op").alias("last_value")))
    resets = _restrict_events(fr, per_op).select(
        RUN, "process", "key", "op_index", F.lit(None).cast("string").alias("type"),
        F.lit(None).cast("long").alias("first_value"), F.lit(None).cast("long").alias("last_value"),
        F.lit(True).alias("is_reset"))
    events = per_op.withColumn("is_reset", F.lit(False)).unionByName(resets)
    w = (Window.partitionBy(RUN, "process", "key").orderBy("op_index")
         .rowsBetween(Window.unboundedPreceding, -1))
    prev = F.last(F.when(~F.col("is_reset") & updates, F.struct(F.col("op_index").alias("op"),
                                                                 F.col("last_value").alias("value"))),
                  ignorenulls=True).over(w)
    last_reset = F.max(F.when(F.col("is_reset"), F.col("op_index"))).over(w)
    paired = (events.select("*", prev.alias("prev"), last_reset.alias("last_reset"))
              .where(~F.col("is_reset") & F.col("prev").isNotNull()
                     & (F.col("last_reset").isNull() | (F.col("last_reset") < F.col("prev.op"))))
              .select(RUN, "process", "key", "op_index", F.col("prev.op").alias("prev_op"),
                      F.col("prev.value").alias("prev_value"), "first_value"))
    paired = fr.idx(paired, "prev_value", "prev_idx")
    paired = fr.idx(paired, "first_value", "cur_idx")
    return paired.withColumn("delta", delta(F.col("prev_idx"), F.col("cur_idx")))


def external_poll(fr: Frames) -> list[DataFrame]:
    """poll-skip and nonmonotonic-poll: between consecutive polls of one process."""
    paired = _external(fr, fr.reads, F.col("type") == "ok")
    detail = dict(key=F.col("key"), process=F.col("process"), values=F.array("prev_value", "first_value"),
                  delta=F.col("delta"))
    ops = [F.col("prev_op"), F.col("op_index")]
    return [emit(paired.where(F.col("delta") > 1), "poll-skip", -F.col("delta"), ops, **detail),
            emit(paired.where(F.col("delta") < 1), "nonmonotonic-poll", F.col("delta"), ops, **detail)]


def external_send(fr: Frames) -> DataFrame:
    """nonmonotonic-send: a process's later send to a key landing before its earlier one."""
    rows = fr.writes.where(F.col("type").isin("ok", "info"))
    paired = _external(fr, rows, F.lit(True))
    return emit(paired.where(F.col("delta") < 1), "nonmonotonic-send", F.col("delta"),
                [F.col("prev_op"), F.col("op_index")],
                key=F.col("key"), process=F.col("process"), values=F.array("prev_value", "first_value"),
                delta=F.col("delta"))


def _internal(fr: Frames, rows: DataFrame) -> DataFrame:
    w = Window.partitionBy(RUN, "op_index", "key").orderBy("row_in_op")
    pairs = (rows.select(RUN, "op_index", "key", "value", F.lag("value").over(w).alias("prev_value"))
             .where(F.col("prev_value").isNotNull()))
    pairs = fr.idx(pairs, "prev_value", "prev_idx")
    pairs = fr.idx(pairs, "value", "cur_idx")
    return pairs.withColumn("delta", delta(F.col("prev_idx"), F.col("cur_idx")))


def internal_poll(fr: Frames) -> list[DataFrame]:
    """int-poll-skip and int-nonmonotonic-poll: consecutive records one op read from a key."""
    pairs = _internal(fr, fr.reads.where(~F.col("rebalanced")))
    detail = dict(key=F.col("key"), values=F.array("prev_value", "value"), delta=F.col("delta"))
    return [emit(pairs.where(F.col("delta") > 1), "int-poll-skip", -F.col("delta"), [F.col("op_index")], **detail),
            emit(pairs.where(F.col("delta") < 1), "int-nonmonotonic-poll", F.col("delta"), [F.col("op_index")],
                 **detail)]


def internal_send(fr: Frames) -> list[DataFrame]:
    """int-send-skip and int-nonmonotonic-send: consecutive values one op sent to a key."""
    pairs = _internal(fr, fr.writes)
    detail = dict(key=F.col("key"), values=F.array("prev_value", "value"), delta=F.col("delta"))
    return [emit(pairs.where(F.col("delta") > 1), "int-send-skip", -F.col("delta"), [F.col("op_index")], **detail),
            emit(pairs.where(F.col("delta") < 1), "int-nonmonotonic-send", F.col("delta"), [F.col("op_index")],
                 **detail)]


# name → function returning one frame or a list; the pipeline runs them all in one job.
KAFKA_CHECKS = {
    "lost-write": lost_write,
    "unseen": unseen,
    "duplicate": duplicate,
    "inconsistent-offsets": inconsistent_offsets,
    "G1a": aborted_read,
    "precommitted-read": precommitted_read,
    "poll-skip/nonmonotonic-poll": external_poll,
    "nonmonotonic-send": external_send,
    "int-poll-skip/int-nonmonotonic-poll": internal_poll,
    "int-send-skip/int-nonmonotonic-send": internal_send,
}
