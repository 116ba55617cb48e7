"""The common shape of every check's output, so all checks of a job union into one frame.

Columns: run, anomaly, sort (ascending: the first rows are the witnesses kept), op_indices
(array<long>: the ops involved, by history index), detail (JSON text of the facts).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

ANOMALY_COLUMNS = ("run", "anomaly", "sort", "op_indices", "detail")


def emit(df: DataFrame, name: str, sort: Column, op_indices: list[Column] | Column, **detail: Column) -> DataFrame:
    """`op_indices` is a list of op-index columns or one array column."""
    array = op_indices if isinstance(op_indices, Column) else F.array(*[c.cast("long") for c in op_indices])
    ops = F.filter(array.cast("array<long>"), lambda x: x.isNotNull())
    return df.select(
        F.col("run"),
        F.lit(name).alias("anomaly"),
        sort.cast("double").alias("sort"),
        ops.alias("op_indices"),
        F.to_json(F.struct(*[c.alias(k) for k, c in detail.items()])).alias("detail"),
    )
