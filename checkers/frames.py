"""The history as Spark reads it: Parquet directories hive-partitioned by run=<id>.

Every frame and answer of the checks is keyed by `RUN`, so one job checks one history or many.
"""

from __future__ import annotations

import re
import weakref
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

RUN = "run"
RUN_FROM_PATH = r"/run=([^/]+)/[^/]*$"  # the run=<id> directory holding a Parquet file


def _run_dirs(path: str) -> list[str]:
    """The run=<id> directories of a history directory (empty if it has none)."""
    return sorted(str(child) for child in Path(path).glob("run=*") if child.is_dir())


# The DataFrames load_history returned, as read: a DataFrame derived from one (filtered,
# projected) is another object and not in here, so its files say nothing about its rows.
_PLAIN_READS: "weakref.WeakKeyDictionary[DataFrame, None]" = weakref.WeakKeyDictionary()


def run_files(history: DataFrame) -> dict[str, list[str]]:
    """Run id → the files holding its rows, for a DataFrame as load_history returned it;
    empty for any other DataFrame, and without the runs whose rows are not all in run=<id>
    directories of one history directory (a Parquet file given with a run column, the same
    run id in two history directories)."""
    if history not in _PLAIN_READS:
        return {}
    by_run: dict[str, list[str]] = defaultdict(list)
    parents: dict[str, set[str]] = defaultdict(set)
    for uri in history.inputFiles():
        found = re.search(RUN_FROM_PATH, uri)
        if found is None:
            return {}
        run = unquote(found.group(1))
        by_run[run].append(uri)
        parents[run].add(uri[:found.start()])
    return {run: sorted(files) for run, files in by_run.items() if len(parents[run]) == 1}


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
        df = df.withColumn(RUN, F.regexp_extract(F.col("_metadata.file_path"), RUN_FROM_PATH, 1))
        _PLAIN_READS[df] = None
        return df
    df = spark.read.parquet(*paths)
    if RUN not in df.columns:
        raise ValueError(f"{', '.join(paths)}: no run column (expected run=<id>/ directories)")
    if all(Path(path).is_dir() for path in paths):  # a file's run may be a column of its own
        _PLAIN_READS[df] = None
    return df
