"""Benchmark: the whole Spark check against plain DuckDB SQL for the five core checks.

Generates a synthetic queue history of N micro-ops straight to Parquet (numpy, vectorised):
producers send unique values to K partitions (97 % ok, 2 % fail, 1 % info, half of which
reach the log), each partition's offsets have occasional gaps, three consumers assigned to
every partition read it from offset 0 in chunks of 1–29 records, and a few anomalies are
injected (lost acknowledged writes, duplicated values). Then it times:

  spark cold   the first check_runs in a fresh session (session start reported apart)
  spark warm   the second check_runs in the same session
  duckdb       lost-write, duplicate, inconsistent-offsets, nonmonotonic-poll and poll-skip as
               SQL over the same Parquet (single-machine reference)

and prints micro-ops/s, the Spark/DuckDB ratio, peak memory (the process tree's RSS: the
driver, Spark's JVM and its Python workers) and the Spark jobs and stages of the warm check.
With `--many N` it measures instead N small histories (`--many-size` micro-ops each, every
one in a run directory of its own, as `logquake analyze DIR...` reads them) checked in one job
(checkers.pipeline.check_many) against one by one (check_run per history) in the same warm
session, with the same verdicts required of both.
Usage: bench/bench_checkers.py [--sizes 1e5,1e6,1e7,1e8] [--plan fused|per-check] [--keep DIR]
       bench/bench_checkers.py --sizes 1e9 --no-duckdb --cold-only --partitions 256
       bench/bench_checkers.py --many 100 [--many-size 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.history_parquet import KEY_BUCKETS, SCHEMA, RunWriter  # noqa: E402

CONSUMERS = 3
STREAM_ABOVE = 1e8  # larger histories are generated block by block (generate_streaming)


def generate(n_micro_ops: int, out_dir: Path, seed: int = 7, partitions: int = 16,
             run_id: str = "bench", buckets: int = KEY_BUCKETS) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    sends = max(n_micro_ops // (1 + CONSUMERS), 10)
    key = rng.integers(0, partitions, sends)
    roll = rng.random(sends)
    typ = np.where(roll < 0.97, "ok", np.where(roll < 0.99, "fail", "info"))
    in_log = (typ == "ok") | ((typ == "info") & (rng.random(sends) < 0.5))
    value = np.arange(sends, dtype=np.int64)
    # Offsets per partition in send order, with a gap after ~5 % of records (commit markers).
    order = np.lexsort((np.arange(sends), key))
    step = np.where(in_log[order], 1 + (rng.random(sends) < 0.05), 0)
    keys_sorted = key[order]
    cum = np.cumsum(step)
    first_of_key = np.r_[0, np.flatnonzero(np.diff(keys_sorted)) + 1]
    base = np.repeat(cum[first_of_key] - step[first_of_key], np.diff(np.r_[first_of_key, sends]))
    offset_sorted = cum - base - step  # offset of each record within its partition
    offset = np.empty(sends, np.int64)
    offset[order] = offset_sorted
    # Injected anomalies: lost acknowledged writes (consumers never see them) and duplicates.
    ok_idx = np.flatnonzero(typ == "ok")
    lost = rng.choice(ok_idx, 3, replace=False)
    visible = in_log.copy()
    visible[lost] = False
    send_op = 2 * np.arange(sends, dtype=np.int64) + 1
    send_offset = np.where(typ == "fail", -1, offset)
    run_dir = out_dir / f"run={run_id}"
    run_dir.mkdir(parents=True)
    writer = RunWriter(run_dir, buckets=buckets)  # the layout the harness writes (key buckets when big)
    write = writer.write  # as soon as built: 10^8 rows do not fit in memory twice

    write(_table(process=np.zeros(sends, np.int64), op_index=send_op, invoke_index=send_op - 1, typ=typ,
                 f="send", mop_f="send", key=key, offset=send_offset, value=value,
                 row_in_op=np.zeros(sends, np.int32)))
    # The log each consumer reads: visible records sorted by (key, offset), plus duplicates.
    log_idx = np.flatnonzero(visible)
    dup_src = rng.choice(ok_idx[~np.isin(ok_idx, lost)], 3, replace=False)
    log_key = np.r_[key[log_idx], key[dup_src]]
    log_off = np.r_[offset[log_idx], np.array([10**9 + i for i in range(3)])]
    log_val = np.r_[value[log_idx], value[dup_src]]
    by = np.lexsort((log_off, log_key))
    log_key, log_off, log_val = log_key[by], log_off[by], log_val[by]
    next_index = 2 * sends
    for consumer in range(1, CONSUMERS + 1):
        n = len(log_key)
        sizes = rng.integers(1, 30, n)
        chunk = np.searchsorted(np.cumsum(sizes), np.arange(n), side="right")  # record → its chunk
        new_key = np.r_[True, log_key[1:] != log_key[:-1]]
        chunk = np.cumsum(np.r_[True, (chunk[1:] != chunk[:-1]) | new_key[1:]]) - 1
        first = np.r_[0, np.flatnonzero(np.diff(chunk)) + 1]
        row_in_op = (np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))).astype(np.int32)
        assign_index = next_index + 1
        write(_table(process=np.full(partitions, consumer), op_index=np.full(partitions, assign_index),
                     invoke_index=np.full(partitions, assign_index - 1), typ="ok", f="assign",
                     mop_f="assign", key=np.arange(partitions), offset=None, value=None,
                     row_in_op=np.arange(partitions, dtype=np.int32)))
        op = assign_index + 2 + 2 * chunk
        write(_table(process=np.full(n, consumer), op_index=op, invoke_index=op - 1, typ="ok", f="poll",
                     mop_f="poll", key=log_key, offset=log_off, value=log_val, row_in_op=row_in_op))
        next_index = int(op.max()) + 1
    writer.close()
    return {"rows": writer.rows, "sends": sends, "lost": 3, "duplicates": 3}


def generate_streaming(n_micro_ops: int, out_dir: Path, seed: int = 7, partitions: int = 16,
                       run_id: str = "bench", block_sends: int = 1_000_000, buckets: int = KEY_BUCKETS) -> dict[str, int]:
    """The same history shape as `generate`, written block by block so that memory holds one
    block of sends (and the logs the consumers read of it), whatever N: for 10^9 micro-ops,
    which do not fit in memory at once.

    Sends are made in blocks; each consumer reads each block's new records key by key (a
    consumer assigned every partition may read them in that order), so a key is read in offset
    order across blocks. Op indices: sends 2i+1; each consumer's ops in a range of its own
    after all sends (gaps between the ranges, which the checks do not mind). The injected
    anomalies are `generate`'s: three acknowledged writes of the first block never read, three
    values of the first block written again at offsets 10^9+i, read at the end of their keys."""
    rng = np.random.default_rng(seed)
    sends = max(n_micro_ops // (1 + CONSUMERS), 10)
    run_dir = out_dir / f"run={run_id}"
    run_dir.mkdir(parents=True)
    writer = RunWriter(run_dir, buckets=buckets)
    write = writer.write

    span = 2 * (sends + 3) + 8  # index range of one consumer: its assign and at most one poll per record
    assign_index = {c: 2 * sends + 1 + (c - 1) * span for c in range(1, CONSUMERS + 1)}
    next_poll = {c: assign_index[c] + 2 for c in assign_index}
    for consumer, index in assign_index.items():
        write(_table(process=np.full(partitions, consumer), op_index=np.full(partitions, index),
                     invoke_index=np.full(partitions, index - 1), typ="ok", f="assign",
                     mop_f="assign", key=np.arange(partitions), offset=None, value=None,
                     row_in_op=np.arange(partitions, dtype=np.int32)))
    next_offset = np.zeros(partitions, np.int64)
    duplicates: tuple[np.ndarray, np.ndarray] | None = None
    for first in range(0, sends, block_sends):
        count = min(block_sends, sends - first)
        key = rng.integers(0, partitions, count)
        roll = rng.random(count)
        typ = np.where(roll < 0.97, "ok", np.where(roll < 0.99, "fail", "info"))
        in_log = (typ == "ok") | ((typ == "info") & (rng.random(count) < 0.5))
        value = np.arange(first, first + count, dtype=np.int64)
        step = np.where(in_log, 1 + (rng.random(count) < 0.05), 0).astype(np.int64)
        order = np.argsort(key, kind="stable")
        keys_sorted, step_sorted = key[order], step[order]
        cum = np.cumsum(step_sorted)
        starts = np.r_[0, np.flatnonzero(np.diff(keys_sorted)) + 1]
        base = np.repeat(cum[starts] - step_sorted[starts], np.diff(np.r_[starts, count]))
        offset = np.empty(count, np.int64)
        offset[order] = next_offset[keys_sorted] + cum - base - step_sorted
        next_offset += np.bincount(key, weights=step, minlength=partitions).astype(np.int64)
        visible = in_log.copy()
        ok_idx = np.flatnonzero(typ == "ok")
        if first == 0:
            lost = rng.choice(ok_idx, 3, replace=False)
            visible[lost] = False
            dup = rng.choice(ok_idx[~np.isin(ok_idx, lost)], 3, replace=False)
            duplicates = (key[dup], value[dup])
        send_op = 2 * np.arange(first, first + count, dtype=np.int64) + 1
        write(_table(process=np.zeros(count, np.int64), op_index=send_op, invoke_index=send_op - 1, typ=typ,
                     f="send", mop_f="send", key=key, offset=np.where(typ == "fail", -1, offset), value=value,
                     row_in_op=np.zeros(count, np.int32)))
        log_idx = np.flatnonzero(visible)
        log_key, log_off, log_val = key[log_idx], offset[log_idx], value[log_idx]
        if first + count >= sends and duplicates is not None:  # the last block: the rewritten values
            log_key = np.r_[log_key, duplicates[0]]
            log_off = np.r_[log_off, np.array([10**9 + i for i in range(3)])]
            log_val = np.r_[log_val, duplicates[1]]
        by = np.lexsort((log_off, log_key))
        log_key, log_off, log_val = log_key[by], log_off[by], log_val[by]
        for consumer in range(1, CONSUMERS + 1):
            n = len(log_key)
            sizes = rng.integers(1, 30, n)
            chunk = np.searchsorted(np.cumsum(sizes), np.arange(n), side="right")
            new_key = np.r_[True, log_key[1:] != log_key[:-1]]
            chunk = np.cumsum(np.r_[True, (chunk[1:] != chunk[:-1]) | new_key[1:]]) - 1
            starts = np.r_[0, np.flatnonzero(np.diff(chunk)) + 1]
            row_in_op = (np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))).astype(np.int32)
            op = next_poll[consumer] + 2 * chunk
            write(_table(process=np.full(n, consumer), op_index=op, invoke_index=op - 1, typ="ok", f="poll",
                         mop_f="poll", key=log_key, offset=log_off, value=log_val, row_in_op=row_in_op))
            if n:
                next_poll[consumer] = int(op.max()) + 2
    writer.close()
    return {"rows": writer.rows, "sends": sends, "lost": 3, "duplicates": 3}


def _table(*, process, op_index, invoke_index, typ, f, mop_f, key, offset, value, row_in_op) -> pa.Table:
    n = len(op_index)

    def col(x, dtype):
        if x is None:
            return pa.nulls(n, dtype)
        if isinstance(x, str):  # a constant, without a Python list of n strings
            return pa.DictionaryArray.from_arrays(np.zeros(n, np.int8), pa.array([x], dtype)).cast(dtype)
        return pa.array(x, dtype)

    off = None if offset is None else pa.array(offset, pa.int64(), mask=np.asarray(offset) < 0)
    return pa.table({
        "process": col(process, pa.int64()), "op_index": col(op_index, pa.int64()),
        "invoke_index": col(invoke_index, pa.int64()), "type": col(typ, pa.string()),
        "f": col(f, pa.string()), "mop_index": pa.array(np.zeros(n, np.int32)), "row_in_op": col(row_in_op, pa.int32()),
        "mop_f": col(mop_f, pa.string()), "key": col(key, pa.int64()),
        "offset": off if off is not None else pa.nulls(n, pa.int64()), "value": col(value, pa.int64()),
        "invoke_time_ns": col(np.asarray(invoke_index) * 1000, pa.int64()),
        "complete_time_ns": col(np.asarray(op_index) * 1000, pa.int64()),
        "error": pa.nulls(n, pa.string()), "rebalanced": pa.array(np.zeros(n, bool)),
        "group": pa.nulls(n, pa.string()),
    }, schema=SCHEMA)


DUCKDB_CHECKS = {
    "lost-write": """
        WITH polls AS (SELECT key, "offset", value FROM h WHERE f = 'poll' AND type = 'ok' AND key IS NOT NULL),
             sends AS (SELECT key, "offset", value FROM h WHERE f = 'send' AND type = 'ok' AND "offset" IS NOT NULL),
             mx AS (SELECT key, max("offset") AS max_off FROM polls GROUP BY key)
        SELECT count(*) FROM sends s JOIN mx USING (key) WHERE s."offset" < mx.max_off
          AND NOT EXISTS (SELECT 1 FROM polls p WHERE p.key = s.key AND p.value = s.value)""",
    "duplicate": """
        WITH pov AS (SELECT DISTINCT key, "offset", value FROM h
                     WHERE (f = 'poll' OR (f = 'send' AND type = 'ok')) AND "offset" IS NOT NULL)
        SELECT count(*) FROM (SELECT key, value FROM pov GROUP BY key, value HAVING count(*) > 1)""",
    "inconsistent-offsets": """
        WITH pov AS (SELECT DISTINCT key, "offset", value FROM h
                     WHERE (f = 'poll' OR (f = 'send' AND type = 'ok')) AND "offset" IS NOT NULL)
        SELECT count(*) FROM (SELECT key, "offset" FROM pov GROUP BY key, "offset" HAVING count(*) > 1)""",
    "nonmonotonic-poll": """
        SELECT count(*) FROM (SELECT "offset", lag("offset") OVER (PARTITION BY process, key
                              ORDER BY op_index, row_in_op) AS prev FROM h WHERE f = 'poll' AND type = 'ok')
        WHERE "offset" <= prev""",
    "poll-skip": """
        WITH known AS (SELECT DISTINCT key, "offset" FROM h WHERE (f = 'poll' OR (f = 'send' AND type = 'ok'))
                       AND "offset" IS NOT NULL),
             nxt AS (SELECT key, "offset" AS prev, lead("offset") OVER (PARTITION BY key ORDER BY "offset") AS next_known
                     FROM known),
             succ AS (SELECT key, "offset" AS cur, lag("offset") OVER (PARTITION BY process, key
                      ORDER BY op_index, row_in_op) AS prev FROM h WHERE f = 'poll' AND type = 'ok')
        SELECT count(*) FROM succ JOIN nxt USING (key, prev) WHERE cur > prev + 1 AND cur > next_known""",
}


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every descendant so far, the dead ones
    included once reaped (a process's children_* times): on a shared machine wall time says
    little, CPU time of the process tree (driver, Spark's JVM, its Python workers) is the
    measure of the code."""
    me = psutil.Process()
    total = 0.0
    for proc in [me] + me.children(recursive=True):
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def driver_hwm_bytes() -> int:
    """This process's own peak RSS (VmHWM): the checks' driver side, without Spark's JVM and
    its Python workers."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_driver_hwm() -> None:
    """Start VmHWM again from the current RSS (Linux: 5 into clear_refs), so that the
    generator's own peak is not counted as the check's."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


class PeakMemory:
    """Samples the RSS of this process and its children (Spark's JVM) every 100 ms."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in [me] + me.children(recursive=True):
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(0.1)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def bench_duckdb(parquet_dir: Path) -> tuple[float, dict[str, int], int]:
    import duckdb

    with PeakMemory() as mem:
        con = duckdb.connect()
        con.execute(f"CREATE VIEW h AS SELECT * FROM read_parquet('{parquet_dir}/run=*/*.parquet')")
        best, best_cpu = float("inf"), float("inf")
        counts = {}
        for _ in range(2):
            start, cpu = time.perf_counter(), tree_cpu_s()
            counts = {name: con.execute(sql).fetchone()[0] for name, sql in DUCKDB_CHECKS.items()}
            if time.perf_counter() - start < best:
                best, best_cpu = time.perf_counter() - start, tree_cpu_s() - cpu
        con.close()
    return best, best_cpu, counts, mem.peak_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e5,1e6", help="comma-separated micro-op counts (e.g. 1e5,1e6,1e7)")
    parser.add_argument("--keep", default=None, help="write histories here and keep them")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--plan", choices=("fused", "per-check"), default="fused",
                        help="fused per-key pass (default) or the tests' one-check-at-a-time DataFrame oracle")
    parser.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB reference")
    parser.add_argument("--cold-only", action="store_true", help="check once, in a fresh session (for 10^9)")
    parser.add_argument("--generator", choices=("auto", "memory", "stream"), default="auto",
                        help="history generator: in memory (the figures so far), streaming by blocks, "
                             f"or auto: streaming above {STREAM_ABOVE:.0e} micro-ops")
    parser.add_argument("--partitions", type=int, default=16, help="keys (Kafka partitions) of the history")
    parser.add_argument("--one-size", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--many", type=int, default=None, metavar="N",
                        help="N small histories: one job against one by one")
    parser.add_argument("--many-size", type=float, default=2000, help="micro-ops per history with --many")
    args = parser.parse_args()
    if args.many is not None:
        return bench_many(args.many, int(args.many_size), args)
    if args.one_size is not None:
        return bench_one(int(args.one_size), args)
    # Each size in a fresh process: the JVM's options (C1 JIT for small runs, not for big
    # ones) are fixed when it starts, and a big run must not inherit a small run's JVM.
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'plan':>9} {'micro-ops':>10} {'rows':>10} {'start s':>8} {'cold s':>8} {'warm s':>8} "
          f"{'duckdb s':>9} {'warm ops/s':>11} {'ratio':>6} {'spark peak MB':>14} {'duckdb peak MB':>15} "
          f"{'jobs':>5} {'stages':>6} {'load':>5} {'cold cpu s':>10} {'warm cpu s':>10} {'duck cpu s':>10}  found", flush=True)
    passed = ["--plan", args.plan, *(["--keep", args.keep] if args.keep else []),
              *(["--no-duckdb"] if args.no_duckdb else []), *(["--cold-only"] if args.cold_only else []),
              "--generator", args.generator, "--partitions", str(args.partitions),
              *[arg for item in args.spark_conf for arg in ("--spark-conf", item)]]
    status = 0
    for size in args.sizes.split(","):
        done = subprocess.run([sys.executable, __file__, "--one-size", size, *passed])
        status = status or done.returncode
    return status


def bench_one(size: int, args: argparse.Namespace) -> int:
    from checkers.claims import ClaimInputs
    from checkers.pipeline import check_runs
    from checkers.spark import make_spark

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-checkers-"))
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    inputs = ClaimInputs(acks="all", min_insync_replicas=2, idempotence=True)
    findings_of = {}
    if args.plan != "fused":  # the tests' DataFrame oracle, the product's reference
        from tests.checkers.dataframe_oracle.plan import findings
        findings_of = {"findings_of": findings}
    out = root / f"h{size}"
    try:
        if out.exists():
            shutil.rmtree(out)
        stream = args.generator == "stream" or (args.generator == "auto" and size > STREAM_ABOVE)
        generated_at = time.perf_counter()
        facts = (generate_streaming if stream else generate)(size, out, partitions=args.partitions)
        print(f"generated {facts['rows']} rows ({'streaming' if stream else 'in memory'}, {args.partitions} keys) "
              f"in {time.perf_counter() - generated_at:.0f} s", file=sys.stderr, flush=True)
        small = facts["rows"] < 2_000_000
        reset_driver_hwm()
        with PeakMemory() as spark_mem:
            start = time.perf_counter()
            spark = make_spark(spark_conf=conf, small=small)
            spark.range(1).count()
            started = time.perf_counter() - start
            start, cpu = time.perf_counter(), tree_cpu_s()
            cold = check_runs(out, inputs, spark, **findings_of)["bench"]
            cold_s = time.perf_counter() - start
            cold_cpu_s = tree_cpu_s() - cpu
            tracker = spark.sparkContext.statusTracker()
            jobs_before = set(tracker.getJobIdsForGroup(None))
            start, cpu = time.perf_counter(), tree_cpu_s()
            if args.cold_only:  # one check only (10^9: each takes many minutes)
                warm, warm_s, warm_cpu_s, jobs_before = cold, float("nan"), float("nan"), set()
            else:
                warm = check_runs(out, inputs, spark, **findings_of)["bench"]
                warm_s = time.perf_counter() - start
                warm_cpu_s = tree_cpu_s() - cpu
            jobs = sorted(set(tracker.getJobIdsForGroup(None)) - jobs_before)
            stages = sum(len(info.stageIds) for info in map(tracker.getJobInfo, jobs) if info is not None)
            load = os.getloadavg()[0]
            driver_peak = driver_hwm_bytes()
            spark.stop()
        print(f"driver peak (VmHWM of this process, from the session's start) {driver_peak / 2**20:.0f} MB",
              file=sys.stderr, flush=True)
        if args.no_duckdb:
            duck_s, duck_cpu_s, duck_counts, duck_peak = float("nan"), float("nan"), {}, 0
        else:
            duck_s, duck_cpu_s, duck_counts, duck_peak = bench_duckdb(out)
        found = {a.name: a.count for a in warm.anomalies}
        assert {a.name: a.count for a in cold.anomalies} == found
        print(f"{args.plan:>9} {size:>10} {facts['rows']:>10} {started:>8.1f} {cold_s:>8.1f} {warm_s:>8.1f} "
              f"{duck_s:>9.2f} {facts['rows'] / warm_s:>11.0f} {warm_s / duck_s:>6.1f} "
              f"{spark_mem.peak_bytes / 2**20:>14.0f} {duck_peak / 2**20:>15.0f} {len(jobs):>5} {stages:>6} "
              f"{load:>5.1f} {cold_cpu_s:>10.1f} {warm_cpu_s:>10.1f} {duck_cpu_s:>10.1f}  spark {found} duckdb {duck_counts} errors {warm.errors}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)  # 10^8 micro-ops take 0.5 GB of disk
    return 0


def bench_many(count: int, size: int, args: argparse.Namespace) -> int:
    from checkers.claims import ClaimInputs
    from checkers.pipeline import check_many, check_run
    from checkers.spark import make_spark

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-checkers-many-"))
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    inputs = ClaimInputs(acks="all", min_insync_replicas=2, idempotence=True)
    try:
        runs = {}
        for i in range(count):
            run_dir = root / f"run{i:04d}"
            generate(size, run_dir / "history.parquet", seed=i, run_id=f"run{i:04d}")
            runs[f"run{i:04d}"] = run_dir
        start = time.perf_counter()
        spark = make_spark(spark_conf=conf, small=True)
        spark.range(1).count()
        started = time.perf_counter() - start
        first = next(iter(runs))
        check_run(runs[first], inputs, spark)  # warm-up: both modes below run on a warm JVM
        with PeakMemory() as mem:
            start = time.perf_counter()
            together = check_many(runs, {run: inputs for run in runs}, spark)
            together_s = time.perf_counter() - start
            start = time.perf_counter()
            alone = {run: check_run(path, inputs, spark) for run, path in runs.items()}
            alone_s = time.perf_counter() - start
        spark.stop()

        def verdicts(results):
            return {run: (r.valid, sorted((a.name, a.count) for a in r.anomalies), len(r.errors))
                    for run, r in results.items()}

        assert verdicts(together) == verdicts(alone), "one job and one by one disagree"
        invalid = sum(1 for r in together.values() if r.valid is False)
        print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}; {count} histories of {size} "
              f"micro-ops ({invalid} invalid, as generated); session start {started:.1f} s")
        print(f"one job {together_s:.1f} s; one by one (same warm session) {alone_s:.1f} s; "
              f"one job is {alone_s / together_s:.1f}x faster; peak {mem.peak_bytes / 2**20:.0f} MB", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
