"""Run as a subprocess by test_recovery: append `count` batches to a log on OsDisk, fsync after
the `flush_after`-th, then SIGKILL itself, so whatever it had not fsynced meets a real crash.

    python -m tests.cluster.storage.crash_writer DIR COUNT FLUSH_AFTER lose|keep
"""

from __future__ import annotations

import os
import signal
import sys

from cluster.storage.disk import OsDisk
from cluster.storage.log import LogConfig, PartitionLog
from tests.cluster.storage.batches import make_batch


def main(argv: list[str]) -> None:
    directory, count, flush_after, mode = argv[0], int(argv[1]), int(argv[2]), argv[3]
    if mode not in ("lose", "keep"):
        raise SystemExit(f"mode must be 'lose' or 'keep', not {mode!r}")
    disk = OsDisk(lose_unflushed_on_crash=mode == "lose")
    log = PartitionLog.open(disk, directory, LogConfig(retention_ms=None, index_interval_bytes=64), now_ms=0)
    for i in range(count):
        log.append(make_batch(i, body_size=100), now_ms=0)
        if i + 1 == flush_after:
            log.flush()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
