"""The DataFrame oracle's dependency edges: the pruned ww/wr edges of checkers/cycles.py's rules
as Spark joins (the product finds them per key in checkers/perkey.py `edges`)."""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.frames import RUN

from .frames import Frames


def _writer_of(fr: Frames) -> DataFrame:
    """(run, key, value) → its writing op with that op's invocation index and type."""
    return (fr.writes.groupBy(RUN, "key", "value")
            .agg(F.min(F.struct("op_index", "invoke_index", "type")).alias("w"))
            .select(RUN, "key", "value", F.col("w.op_index").alias("writer"),
                    F.col("w.invoke_index").alias("writer_invoke"), F.col("w.type").alias("writer_type")))


def _shortcut(src_op: str, src_type: str, dst_invoke: str):
    """The source completed ok before the target was invoked (realtime edges start only at
    ok completions, as in Elle): a realtime edge stands in for the data edge."""
    return (F.col(src_type) == "ok") & (F.col(src_op) < F.col(dst_invoke))


EDGE_COLUMNS = ("run", "src", "dst", "rel", "key", "value", "src_invoke", "src_type", "dst_invoke", "dst_type")


def pruned_edges(fr: Frames) -> DataFrame:
    """The ww and wr edges a cycle can use (see the module docstring), with both ends' times.
    Runs without ww-deps drop the ww edges on the driver, so one job serves both kinds."""
    writer = _writer_of(fr)
    write_keys = fr.writes.groupBy(RUN, "op_index").agg(F.countDistinct("key").alias("n_keys"))
    reader_ops = fr.reads.select(RUN, "op_index").distinct().withColumn("reads", F.lit(True))
    writer_ops = (write_keys.join(reader_ops, [RUN, "op_index"], "left")
                  .select(RUN, "op_index", ((F.col("n_keys") > 1) | F.col("reads").isNotNull()).alias("linking")))
    # Also linked: a key on which one op writes two values (they can straddle another op's
    # value, closing a ww cycle inside the key's own chain).
    multi_value_keys = (fr.writes.groupBy(RUN, "key", "op_index").agg(F.countDistinct("value").alias("n_values"))
                        .where(F.col("n_values") > 1).select(RUN, "key"))
    linked_keys = (fr.writes.join(writer_ops.where("linking"), [RUN, "op_index"], "left_semi")
                   .select(RUN, "key").unionByName(multi_value_keys)
                   .distinct().withColumn("linked", F.lit(True)))
    wr = (fr.reads.select(RUN, "key", "value", F.col("op_index").alias("dst"), F.col("invoke_index").alias("dst_invoke"),
                          F.col("type").alias("dst_type")).distinct()
          .join(writer, [RUN, "key", "value"])
          .join(writer_ops.select(RUN, F.col("op_index").alias("dst"), F.lit(True).alias("dst_writes")), [RUN, "dst"],
                "left")
          .where((F.col("writer") != F.col("dst"))
                 & (F.col("dst_writes").isNotNull()
                    | ((F.col("dst_type") == "ok") & ~_shortcut("writer", "writer_type", "dst"))))
          .select(RUN, F.col("writer").alias("src"), "dst", F.lit("wr").alias("rel"), "key", "value",
                  F.col("writer_invoke").alias("src_invoke"), F.col("writer_type").alias("src_type"),
                  "dst_invoke", "dst_type"))
    prev_slot = fr.slots.select(RUN, "key", (F.col("idx") + 1).alias("idx"), F.col("rep").alias("prev_value"))
    prev_writer = writer.select(RUN, "key", F.col("value").alias("prev_value"), F.col("writer").alias("src"),
                                F.col("writer_invoke").alias("src_invoke"), F.col("writer_type").alias("src_type"))
    ww = (fr.by_value.join(prev_slot, [RUN, "key", "idx"])
          .join(writer, [RUN, "key", "value"])
          .join(prev_writer, [RUN, "key", "prev_value"])
          .join(linked_keys, [RUN, "key"], "left")
          .where((F.col("src") != F.col("writer"))
                 & (F.col("linked").isNotNull() | ~_shortcut("src", "src_type", "writer_invoke")))
          .select(RUN, "src", F.col("writer").alias("dst"), F.lit("ww").alias("rel"), "key", "value", "src_invoke",
                  "src_type", F.col("writer_invoke").alias("dst_invoke"), F.col("writer_type").alias("dst_type")))
    return ww.unionByName(wr)


def collect_graphs(fr: Frames) -> dict[str, tuple[list[tuple], dict[int, tuple[int, str]]]]:
    """run → (edges [(src, dst, rel, key, value)], vertices {op: (invoke_index, type)})."""
    out: dict[str, tuple[list[tuple], dict[int, tuple[int, str]]]] = defaultdict(lambda: ([], {}))
    for row in pruned_edges(fr).collect():
        edges, vertices = out[row["run"]]
        edges.append((row["src"], row["dst"], row["rel"], row["key"], row["value"]))
        vertices[row["src"]] = (row["src_invoke"], row["src_type"])
        vertices[row["dst"]] = (row["dst_invoke"], row["dst_type"])
    return dict(out)
