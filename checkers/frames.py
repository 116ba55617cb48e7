"""The history as Spark reads it: Parquet directories hive-partitioned by run=<id>.

Every frame and answer of the checks is keyed by `RUN`, so one job checks one history or many.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

RUN = "run"


def load_history(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Read Parquet history directories (hive-partitioned by run=) or files with a run column."""
    if not paths:
        raise ValueError("no history paths given")
    df = spark.read.parquet(*paths)
    if RUN not in df.columns:
        raise ValueError(f"{', '.join(paths)}: no run column (expected run=<id>/ directories)")
    return df
