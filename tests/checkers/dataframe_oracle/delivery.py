"""Delivery checks for group consumers (the `delivery` workload).

duplicate-processing  a value processed (ok process op) more than once by one group:
                      breaks at-most-once
unprocessed           an acknowledged (ok) send no ok process op of any consumer ever
                      processed, after the final drain: breaks at-least-once
nonmonotonic-commit   a group commits a partition's offset lower than one an earlier commit
                      (completed before this one was invoked) had committed

Process ops may omit the group; the workload runs one group, named "default" here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checkers.frames import RUN

from .emit import emit
from .frames import Frames
from .kafka import MAX_WITNESS_OPS

DEFAULT_GROUP = "default"


def _processed(fr: Frames) -> DataFrame:
    return (fr.history.where((F.col("mop_f") == "process") & (F.col("type") == "ok") & F.col("key").isNotNull())
            .withColumn("grp", F.coalesce(F.col("group"), F.lit(DEFAULT_GROUP))))


def duplicate_processing(fr: Frames) -> DataFrame:
    found = (_processed(fr).groupBy(RUN, "grp", "key", "value")
             .agg(F.count(F.lit(1)).alias("count"), F.array_sort(F.collect_list("offset")).alias("offsets"),
                  F.slice(F.array_sort(F.collect_list("op_index")), 1, MAX_WITNESS_OPS).alias("ops"))
             .where(F.col("count") > 1))
    return emit(found, "duplicate-processing", -F.col("count") * 1e9 + F.col("key"), F.col("ops"),
                group=F.col("grp"), key=F.col("key"), value=F.col("value"), count=F.col("count"),
                offsets=F.col("offsets"))


def unprocessed(fr: Frames) -> DataFrame:
    processed = _processed(fr)
    runs = processed.select(RUN).distinct()
    sent = (fr.writes.where(F.col("type") == "ok").join(runs, [RUN], "left_semi")
            .groupBy(RUN, "key", "value").agg(F.min("op_index").alias("writer"), F.min("offset").alias("offset")))
    found = sent.join(processed.select(RUN, "key", "value"), [RUN, "key", "value"], "left_anti")
    return emit(found, "unprocessed", F.col("key") * 1e9 + F.col("writer"), [F.col("writer")],
                key=F.col("key"), value=F.col("value"), offset=F.col("offset"))


def nonmonotonic_commit(fr: Frames) -> DataFrame:
    commits = (fr.history.where((F.col("mop_f") == "commit") & (F.col("type") == "ok")
                                & F.col("key").isNotNull() & F.col("offset").isNotNull())
               .withColumn("grp", F.coalesce(F.col("group"), F.lit(DEFAULT_GROUP))))
    # Each commit appears twice: where it took effect for others (its completion) and where it
    # is judged (its invocation), against every commit completed before it was invoked.
    done = commits.select(RUN, "grp", "key", F.col("op_index").alias("pos"), "offset", "op_index",
                          F.lit(True).alias("is_done"))
    judged = commits.select(RUN, "grp", "key", F.col("invoke_index").alias("pos"), "offset", "op_index",
                            F.lit(False).alias("is_done"))
    w = Window.partitionBy(RUN, "grp", "key").orderBy("pos").rowsBetween(Window.unboundedPreceding, -1)
    best = F.max(F.when(F.col("is_done"), F.struct(F.col("offset").alias("offset"), F.col("op_index").alias("op"))))
    found = (done.unionByName(judged).select("*", best.over(w).alias("best"))
             .where(~F.col("is_done") & F.col("best").isNotNull() & (F.col("offset") < F.col("best.offset"))))
    return emit(found, "nonmonotonic-commit", F.col("offset") - F.col("best.offset"),
                [F.col("best.op"), F.col("op_index")],
                group=F.col("grp"), key=F.col("key"), offsets=F.array(F.col("best.offset"), F.col("offset")))


DELIVERY_CHECKS = {
    "duplicate-processing": duplicate_processing,
    "unprocessed": unprocessed,
    "nonmonotonic-commit": nonmonotonic_commit,
}
