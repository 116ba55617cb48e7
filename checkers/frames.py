"""The history as Spark reads it: Parquet directories hive-partitioned by run=<id>.

Every frame and answer of the checks is keyed by `RUN`, so one job checks one history or many.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

RUN = "run"
RUN_FROM_PATH = r"/run=([^/]+)/[^/]*$"  # the run=<id> directory holding a Parquet file


def _run_dirs(path: str) -> list[str]:
    """The run=<id> directories of a history directory (empty if it has none)."""
    return sorted(str(child) for child in Path(path).glob("run=*") if child.is_dir())


def load_history(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Read Parquet history directories (hive-partitioned by run=) or files with a run column."""
    if not paths:
        raise ValueError("no history paths given")
    runs = [_run_dirs(path) for path in paths]
    if len(paths) > 1 and all(runs):
        # Several history directories have different roots, which Spark's partition discovery
        # refuses ("conflicting directory structures"): read their run=<id> directories
        # themselves and take each row's run from its file's path.
        df = spark.read.parquet(*[leaf for found in runs for leaf in found])
        return df.withColumn(RUN, F.regexp_extract(F.col("_metadata.file_path"), RUN_FROM_PATH, 1))
    df = spark.read.parquet(*paths)
    if RUN not in df.columns:
        raise ValueError(f"{', '.join(paths)}: no run column (expected run=<id>/ directories)")
    return df
