"""Partition-log throughput on real files: append and read MB/s for ~16 KB batches of
100-byte records, with the flush policy at "never" (Kafka's default) and "every write"
(flush.messages=1), plus the crash mode that holds unflushed bytes in memory.

Each figure is printed beside a reference run on the same files: plain os.write of the same
bytes (with an fsync per write for the "every write" row) and plain os.pread for reads, so
the ratio is the cost of the log itself (CRC check, header parse, index, bookkeeping).

    .venv/bin/python bench/bench_storage.py [--megabytes 128] [--fsync-seconds 6] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.protocol.records import Record, build_batch  # noqa: E402
from cluster.storage.batch import restamp  # noqa: E402
from cluster.storage.disk import OsDisk  # noqa: E402
from cluster.storage.log import LogConfig, PartitionLog  # noqa: E402

RECORD_VALUE_BYTES = 100
RECORDS_PER_BATCH = 140  # ~16 KB with the per-record framing
FETCH_MAX_BYTES = 1 << 20
MB = 1024 * 1024


def template_batch() -> bytes:
    records = [Record(key=None, value=bytes([i % 251]) * RECORD_VALUE_BYTES) for i in range(RECORDS_PER_BATCH)]
    return build_batch(records, base_offset=0, timestamp_ms=1_700_000_000_000, partition_leader_epoch=0)


def append_run(
    directory: str, batches: list[bytes], *, flush_every_write: bool, lose_unflushed: bool, max_seconds: float
) -> tuple[float, int, int]:
    """(seconds, batches appended, bytes appended)."""
    disk = OsDisk(lose_unflushed_on_crash=lose_unflushed)
    config = LogConfig(retention_ms=None, flush_interval_messages=1 if flush_every_write else None)
    log = PartitionLog.open(disk, directory, config, now_ms=0)
    appended = size = 0
    start = time.perf_counter()
    for batch in batches:
        log.append(batch, now_ms=0)
        appended += 1
        size += len(batch)
        if appended % 64 == 0 and time.perf_counter() - start > max_seconds:
            break
    elapsed = time.perf_counter() - start
    log.close()
    disk.close()
    return elapsed, appended, size


def reference_write(path: str, batches: list[bytes], *, fsync: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for batch in batches:
        os.write(fd, batch)
        if fsync:
            os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def sequential_read(directory: str) -> tuple[float, int]:
    disk = OsDisk()
    log = PartitionLog.open(disk, directory, LogConfig(retention_ms=None), now_ms=0)
    offset, size = log.log_start_offset, 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        chunks = log.read(offset, FETCH_MAX_BYTES)
        size += sum(len(c) for c in chunks)
        last = chunks[-1]
        offset = int.from_bytes(last[0:8], "big") + int.from_bytes(last[23:27], "big") + 1
    elapsed = time.perf_counter() - start
    log.close()
    disk.close()
    return elapsed, size


def reference_read(directory: str) -> tuple[float, int]:
    size = 0
    start = time.perf_counter()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            position = 0
            while chunk := os.pread(fd, FETCH_MAX_BYTES, position):
                size += len(chunk)
                position += len(chunk)
            os.close(fd)
    return time.perf_counter() - start, size


def random_reads(directory: str, count: int) -> tuple[float, int]:
    disk = OsDisk()
    log = PartitionLog.open(disk, directory, LogConfig(retention_ms=None), now_ms=0)
    rng = random.Random(7)
    offsets = [rng.randrange(log.log_start_offset, log.log_end_offset) for _ in range(count)]
    start = time.perf_counter()
    for offset in offsets:
        log.read(offset, 1)
    elapsed = time.perf_counter() - start
    log.close()
    disk.close()
    return elapsed, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=128, help="data appended with flush=never (default 128)")
    parser.add_argument("--fsync-seconds", type=float, default=6.0, help="time budget of the fsync-every-write runs, all repeats together")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is printed (default 3)")
    parser.add_argument("--dir", help="where to put the files (default: a new temporary directory, removed after)")
    args = parser.parse_args()
    if args.megabytes < 1 or args.fsync_seconds <= 0 or args.repeat < 1:
        parser.error("--megabytes and --repeat must be >= 1, --fsync-seconds > 0")

    template = template_batch()
    count = max(1, args.megabytes * MB // len(template))
    batches = []
    offset = 0
    for _ in range(count):
        batches.append(bytes(restamp(template, offset, 0)))
        offset += RECORDS_PER_BATCH
    print(f"batch: {len(template)} bytes, {RECORDS_PER_BATCH} records of {RECORD_VALUE_BYTES} bytes; {count} batches")

    root = tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir)
    try:
        rows = []
        read_directory = ""
        for name, flush_every_write, lose_unflushed, budget in [
            ("append, flush never", False, False, float("inf")),
            ("append, flush never, lose-unflushed mode", False, True, float("inf")),
            ("append, flush every write", True, False, args.fsync_seconds / args.repeat),
        ]:
            best_rate = best_reference = best_batches = 0.0
            for attempt in range(args.repeat):
                directory = os.path.join(root, f"{name.replace(' ', '_').replace(',', '')}-{attempt}")
                reference_path = os.path.join(root, "reference.bin")
                # Start each run with no dirty pages queued, so an fsync waits for its own data.
                os.sync()
                elapsed, appended, size = append_run(
                    directory, batches, flush_every_write=flush_every_write, lose_unflushed=lose_unflushed, max_seconds=budget
                )
                os.sync()
                reference = reference_write(reference_path, batches[:appended], fsync=flush_every_write)
                os.remove(reference_path)
                best_rate = max(best_rate, size / MB / elapsed)
                best_reference = max(best_reference, size / MB / reference)
                best_batches = max(best_batches, appended / elapsed)
                if name == "append, flush never" and not read_directory:
                    read_directory = directory
                else:
                    shutil.rmtree(directory)
            rows.append((name, best_rate, best_reference, best_batches))

        best_read = best_reference_read = best_random = 0.0
        for _ in range(args.repeat):
            reference_elapsed, reference_size = reference_read(read_directory)
            elapsed, size = sequential_read(read_directory)
            best_read = max(best_read, size / MB / elapsed)
            best_reference_read = max(best_reference_read, reference_size / MB / reference_elapsed)
            elapsed, reads = random_reads(read_directory, 5_000)
            best_random = max(best_random, reads / elapsed)
        rows.append(("read, sequential, 1 MB fetches", best_read, best_reference_read, None))

        print(f"best of {args.repeat}")
        print(f"{'':44} {'MB/s':>9} {'reference':>10} {'ratio':>6} {'batches/s':>10}")
        for name, rate, reference_rate, batches_per_s in rows:
            per_s = f"{batches_per_s:10.0f}" if batches_per_s is not None else ""
            print(f"{name:44} {rate:9.1f} {reference_rate:10.1f} {rate / reference_rate:6.2f} {per_s}")
        print(f"{'read, one batch at a random offset':44} {best_random:9.0f} reads/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
