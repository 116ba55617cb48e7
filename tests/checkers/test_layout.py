"""Key-bucketed histories: harness/history_parquet.RunWriter puts each key's rows in one file,
and the per-key pass checks such a run file by file (checkers/fused.py) with exactly the
answer the shuffled pass gives the same rows in one file without a bucket footer (an older
layout); both kinds of run in one job."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from checkers import fused, perkey
from checkers.claims import ClaimInputs
from checkers.frames import load_history
from checkers.pipeline import check_runs
from harness.history_parquet import (SCHEMA, SINGLE_FILE, RunWriter, history_tables, iter_history_lines, key_bucket,
                                     write_tables)

from .builder import History
from .test_fused import comparable, crowded
from .test_properties import generate


def _rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 10, n)
    key = pa.array(keys, pa.int64(), mask=rng.random(n) < 0.1)  # some rows without a key
    columns = {name: pa.nulls(n, field.type) for name, field in zip(SCHEMA.names, SCHEMA)}
    columns.update(key=key, op_index=pa.array(np.arange(n) + 1000 * seed, pa.int64()), type=pa.array(["ok"] * n))
    return pa.table(columns, schema=SCHEMA)


def test_run_writer_puts_each_key_in_one_file(tmp_path):
    writer = RunWriter(tmp_path, buckets=4, bucket_above_rows=50)
    written = [_rows(40, 1), _rows(40, 2), _rows(40, 3)]  # the second makes it more than 50 rows
    for table in written:
        writer.write(table)
    files = writer.close()
    assert len(files) == 4 and not list(tmp_path.glob(".*"))  # no temporary file left
    total = 0
    for path in files:
        bucket, buckets = key_bucket(pq.read_schema(path).metadata)
        assert buckets == 4
        rows = pq.read_table(path)
        keys = rows.column("key").fill_null(0).to_numpy()
        assert (keys % 4 == bucket).all(), path  # every key of the file is in its bucket
        ops = rows.column("op_index").to_numpy()
        assert (np.diff(ops) > 0).all()  # rows keep the order they came in
        total += rows.num_rows
    assert total == 120


def test_a_small_run_is_one_file(tmp_path):
    writer = RunWriter(tmp_path, buckets=4, bucket_above_rows=50)
    writer.write(_rows(20, 1))
    writer.write(_rows(20, 2))
    (path,) = writer.close()
    assert path.name == SINGLE_FILE and key_bucket(pq.read_schema(path).metadata) == (0, 1)
    assert pq.ParquetFile(path).metadata.num_row_groups == 2  # a row group per table, as they came


def test_bucketed_runs_check_as_the_shuffled_ones(spark, tmp_path):
    histories = {f"gen{i}": generate(3000 + i, injection).history
                 for i, injection in enumerate(("none", "lost", "duplicate", "backwards"))}
    histories["crowded"] = History()
    crowded(histories["crowded"])
    out = tmp_path / "parquet"
    for run, history in histories.items():
        tables = list(history_tables(iter_history_lines(history.write(tmp_path / f"{run}.jsonl"))))
        # Every row goes to one of three key-bucket files.
        write_tables(tables, out, f"{run}-b", buckets=3, bucket_above_rows=0)
        plain = out / f"run={run}-s"
        plain.mkdir()
        pq.write_table(pa.concat_tables(tables), plain / "part-00000.parquet")  # no footer: shuffled
    runs = sorted(f"{run}-{how}" for run in histories for how in "bs")
    bucketed = fused.bucketed_files(load_history(spark, [str(out)]), runs)
    assert sorted(bucketed) == [f"{run}-b" for run in sorted(histories)]
    assert max(len(files) for files in bucketed.values()) == 3  # (uri, rows) of three files

    results = check_runs(out, ClaimInputs(acks="all", min_insync_replicas=2), spark)
    assert sorted(results) == runs
    for run in histories:
        assert comparable(results[f"{run}-b"]) == comparable(results[f"{run}-s"]), run
    invalid = sorted(run for run, result in results.items() if result.valid is False)
    assert invalid == [run for run in runs if not run.startswith("gen0")], invalid  # all but the clean one


def test_history_columns_are_what_the_pass_reads():
    assert set(perkey.HISTORY_COLUMNS) <= set(SCHEMA.names)
