"""Opening a partition log that holds transactions, on real files: the old way against the
reference of this run, the way the broker opens one now.

A log of N small batches (transactional ones from 200 producers, a commit or abort marker
closing each transaction, plain ones between) is written once. Then, alternating, each timed
`--repeat` times:

  old          open the log and rebuild the producer state and the aborted-transaction list
               from every batch header (session 8's design, now the test oracle
               tests/cluster/storage/txn_oracle.py)
  clean        open with the state after a clean close: the index files and the snapshot at
               the log end, nothing replayed
  crash        open after a crash (the process died after a flush, so the recovery point is
               the last roll): the snapshot of that roll, the active segment replayed and its
               .txnindex rebuilt

Printed: median seconds per open, batches replayed, and old/new ratios.

    .venv/bin/python bench/bench_txn_open.py [--batches 100000] [--segment-mb 8] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.broker.producer_state import ProducerStateTable  # noqa: E402
from cluster.protocol.records import Record, build_batch, build_control_batch  # noqa: E402
from cluster.storage.batch import ATTR_TRANSACTIONAL, restamp  # noqa: E402
from cluster.storage.disk import OsDisk  # noqa: E402
from cluster.storage.log import LogConfig, PartitionLog  # noqa: E402
from tests.cluster.storage import txn_oracle  # noqa: E402

PRODUCERS = 200
TXN_BATCHES = 4  # data batches per transaction, then its marker


def templates() -> tuple[list[bytes], list[bytes], list[bytes], bytes]:
    """Per producer: a transactional batch, a commit and an abort marker; one plain batch."""
    data = [build_batch([Record(b"k", b"v" * 60)], base_offset=0, timestamp_ms=1_700_000_000_000, attributes=ATTR_TRANSACTIONAL,
                        producer_id=1000 + p, producer_epoch=0, base_sequence=0, partition_leader_epoch=0) for p in range(PRODUCERS)]
    commits, aborts = ([build_control_batch(committed=committed, producer_id=1000 + p, producer_epoch=0, coordinator_epoch=0, base_offset=0,
                                            timestamp_ms=1_700_000_000_000, partition_leader_epoch=0) for p in range(PRODUCERS)]
                       for committed in (True, False))
    plain = build_batch([Record(None, b"p" * 60)], base_offset=0, timestamp_ms=1_700_000_000_000, partition_leader_epoch=0)
    return data, commits, aborts, plain


def write_log(directory: str, batches: int, config: LogConfig) -> tuple[int, int]:
    """Write the log and close it cleanly; returns (batches, aborted transactions)."""
    data, commits, aborts, plain = templates()
    disk = OsDisk()
    table = ProducerStateTable()
    log = PartitionLog.open(disk, directory, config, now_ms=0, state=table)
    written = aborted = 0
    step = 0
    while written < batches:
        # Producers take turns: each writes TXN_BATCHES batches then its marker; every
        # tenth transaction is aborted.
        p = step % PRODUCERS
        for _ in range(TXN_BATCHES):
            log.append(restamp(data[p], log.log_end_offset, 0), now_ms=0)
            log.append(restamp(plain, log.log_end_offset, 0), now_ms=0)
        abort = step % 10 == 0
        log.append(restamp((aborts if abort else commits)[p], log.log_end_offset, 0), now_ms=0)
        aborted += abort
        table.on_high_watermark(log.log_end_offset)  # a single replica's HWM follows its log end
        written += 2 * TXN_BATCHES + 1
        step += 1
    log.close()
    disk.close()
    return written, aborted


def open_old(directory: str, config: LogConfig) -> tuple[float, int]:
    disk = OsDisk()
    start = time.perf_counter()
    log = PartitionLog.open(disk, directory, config, now_ms=0)
    oracle = txn_oracle.rebuild(log)
    elapsed = time.perf_counter() - start
    log.close()
    disk.close()
    return elapsed, len(oracle.aborted)


def open_new(directory: str, config: LogConfig) -> tuple[float, int, int]:
    disk = OsDisk()
    start = time.perf_counter()
    log = PartitionLog.open(disk, directory, config, now_ms=0, state=ProducerStateTable())
    elapsed = time.perf_counter() - start
    replayed, aborted = log.recovery.state_batches, len(log.aborted_txns())
    log.close()
    disk.close()
    return elapsed, replayed, aborted


def crash_after_flush(directory: str, config: LogConfig) -> None:
    """Leave the log as a process killed after a flush does: the recovery-point file still
    says the last roll, and no snapshot at the log end."""
    disk = OsDisk()
    log = PartitionLog.open(disk, directory, config, now_ms=0, state=ProducerStateTable())
    end = log.log_end_offset
    log.flush()
    # What close() wrote for the clean shutdown goes: the checkpoint back to the active
    # segment's base (as after the last roll), the snapshot at the end.
    disk.write_atomic(f"{directory}/recovery-point", f"{log.active_segment.base_offset}\n".encode())
    disk.remove(f"{directory}/{end:020d}.snapshot")
    disk.close()  # append handles are dropped unclosed, as by a SIGKILL


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--segment-mb", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write the log (default: a temp dir)")
    args = parser.parse_args()
    if args.batches < 1 or args.repeat < 1 or args.segment_mb <= 0:
        parser.error("--batches, --repeat and --segment-mb must be positive")
    base = tempfile.mkdtemp(prefix="bench-txn-open-", dir=args.dir)
    directory = f"{base}/t-0"
    config = LogConfig(retention_ms=None, segment_bytes=int(args.segment_mb * 1024 * 1024))
    try:
        start = time.perf_counter()
        batches, aborted = write_log(directory, args.batches, config)
        size_mb = sum(p.stat().st_size for p in Path(directory).glob("*.log")) / 1024 / 1024
        segments = len(list(Path(directory).glob("*.log")))
        print(f"log: {batches} batches, {aborted} aborted transactions, {segments} segments, {size_mb:.1f} MB "
              f"(written in {time.perf_counter() - start:.1f} s)")
        old, clean, crash = [], [], []
        replayed_clean = replayed_crash = 0
        for _ in range(args.repeat):
            seconds, found = open_old(directory, config)
            assert found == aborted, (found, aborted)
            old.append(seconds)
            seconds, replayed_clean, found = open_new(directory, config)
            assert found == aborted, (found, aborted)
            clean.append(seconds)
            crash_after_flush(directory, config)
            seconds, replayed_crash, found = open_new(directory, config)
            assert found == aborted, (found, aborted)
            crash.append(seconds)
        o, c, k = statistics.median(old), statistics.median(clean), statistics.median(crash)
        print(f"old (rebuild from every batch): {o:8.3f} s  ({batches} batches replayed)")
        print(f"clean (files + snapshot):       {c:8.3f} s  ({replayed_clean} batches replayed)  old/new {o / c:6.1f}x")
        print(f"crash (last roll's snapshot):   {k:8.3f} s  ({replayed_crash} batches replayed)  old/new {o / k:6.1f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
