"""What the disk-fault plumbing costs a healthy broker: a partition log on real files written
and read through the broker's stack (LogDir over FaultyDisk over OsDisk, no fault set)
against the same log on a bare OsDisk, in the same process, alternating runs.

Small batches (1 record of 100 B) make the per-call cost visible: every append is one write,
every fetch of one batch one read, as a caught-up follower or consumer does.

    .venv/bin/python bench/bench_disk_faults.py [--batches 50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster.broker.log_dir import LogDir  # noqa: E402
from cluster.protocol.records import Record, build_batch  # noqa: E402
from cluster.storage.batch import restamp  # noqa: E402
from cluster.storage.disk import Disk, OsDisk  # noqa: E402
from cluster.storage.faulty_disk import FaultyDisk  # noqa: E402
from cluster.storage.log import LogConfig, PartitionLog  # noqa: E402

CONFIG = LogConfig(segment_bytes=1 << 30, retention_ms=None)


def one_run(disk: Disk, directory: str, batches: int, template: bytes) -> tuple[float, float]:
    """(append µs per batch, read µs per batch)."""
    log = PartitionLog.open(disk, directory, CONFIG, now_ms=0)
    stamped = [restamp(template, i, 0) for i in range(batches)]
    started = time.perf_counter()
    for batch in stamped:
        log.append(batch, now_ms=0)
    appended = time.perf_counter()
    for offset in range(batches):
        log.read(offset, 1 << 20, max_offset=offset + 1)
    read = time.perf_counter()
    log.close()
    return (appended - started) / batches * 1e6, (read - appended) / batches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    template = bytes(build_batch([Record(None, b"x" * 100)], base_offset=0, timestamp_ms=1_700_000_000_000))
    root = Path(tempfile.mkdtemp(prefix="bench-disk-faults-"))
    try:
        bare: list[tuple[float, float]] = []
        wrapped: list[tuple[float, float]] = []
        for run in range(args.repeat):
            os_disk = OsDisk()
            bare.append(one_run(os_disk, str(root / f"bare-{run}"), args.batches, template))
            os_disk.close()
            inner = OsDisk()
            stack = LogDir(FaultyDisk(inner), str(root), lambda reason: None)
            wrapped.append(one_run(stack, str(root / f"wrapped-{run}"), args.batches, template))
            inner.close()
        best_bare = (min(a for a, _ in bare), min(r for _, r in bare))
        best_wrapped = (min(a for a, _ in wrapped), min(r for _, r in wrapped))
        print(f"{args.batches} batches of 1 x 100 B, best of {args.repeat}")
        print(f"append: bare OsDisk {best_bare[0]:.2f} us/batch, LogDir+FaultyDisk {best_wrapped[0]:.2f} us/batch "
              f"({best_wrapped[0] / best_bare[0]:.2f}x)")
        print(f"read:   bare OsDisk {best_bare[1]:.2f} us/batch, LogDir+FaultyDisk {best_wrapped[1]:.2f} us/batch "
              f"({best_wrapped[1] / best_bare[1]:.2f}x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
