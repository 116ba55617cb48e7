"""The history as Spark reads it: Parquet directories hive-partitioned by run=<id>.

Every frame and answer of the checks is keyed by `RUN`, so one job checks one history or many.
"""

from __future__ import annotations

import re
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from harness.history_parquet import key_bucket

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


def bucketed_files(history: DataFrame, runs: Sequence[str] | None = None) -> dict[str, list[tuple[str, int]]]:
    """Run → its files and their rows, for the runs (of `runs`, if given) written in key
    buckets (every file's footer names its bucket of one bucket count, none twice)."""
    out = {}
    for run, files in run_files(history).items():
        if runs is not None and run not in runs:
            continue
        seen, rows = set(), []
        for uri in files:
            try:
                filesystem, path = pafs.FileSystem.from_uri(uri)
                with filesystem.open_input_file(path) as handle:
                    metadata = pq.read_metadata(handle)
            except (OSError, ValueError, pa.ArrowException):
                seen.add(None)  # not readable from Python here (a file system pyarrow lacks): shuffled
                break
            seen.add(key_bucket(metadata.schema.to_arrow_schema().metadata))
            rows.append((uri, metadata.num_rows))
        counts = {bucket[1] for bucket in seen if bucket is not None}
        if None not in seen and len(seen) == len(files) and len(counts) == 1:
            out[run] = rows
    return out


STRING_COLUMNS = ("type", "f", "mop_f", "group")  # read as Parquet stores them: dictionary-encoded


def read_file(uri: str, columns: Sequence[str]) -> pa.Table:
    """Some columns of one history file, read by a Python task."""
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return pq.read_table(path, filesystem=filesystem, columns=list(columns),
                         read_dictionary=[name for name in STRING_COLUMNS if name in columns], use_threads=False)


def map_files(spark: SparkSession, by_file: dict[str, list[tuple[str, int]]],
              per_file: Callable[[str, str], Iterator[pa.RecordBatch]], schema: str) -> DataFrame:
    """`per_file(run, uri)` in Python tasks over these files (bucketed_files' answer; files
    without rows are left out), as a DataFrame of `schema`: no rows cross the JVM, each task
    reads its files itself."""
    units = sorted(((rows, run, uri) for run, files in by_file.items() for uri, rows in files if rows), reverse=True)
    # As many tasks as the session's parallelism, not one per file: a task costs ~0.1 s of
    # CPU however little it does (an empty 16-task mapInArrow: 1.5-1.8 s of CPU, 4 tasks:
    # 0.3-0.4 s), and a worker holds one file at a time whatever its task's share.
    tasks = max(1, min(len(units), int(spark.conf.get("spark.sql.shuffle.partitions"))))
    # The biggest files first, dealt round: every task gets a like share, and a big history's
    # last tasks to start are its small files.
    groups = [[(run, uri) for _, run, uri in units[i::tasks]] for i in range(tasks)]

    def per_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column("id").to_pylist():
                for run, uri in groups[task]:
                    yield from per_file(run, uri)

    # Task i is the one row i of a range in `tasks` slices: no Python data source feeding the
    # tasks (a parallelized list took a Python worker of its own per task).
    return spark.range(0, tasks, 1, tasks).mapInArrow(per_task, schema)
