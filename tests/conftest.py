"""Suite-wide set-up for parallel runs (pytest-xdist, `-n`).

Each xdist worker gets its own temporary directory as TMPDIR, for itself and every process it
starts (brokers, `logquake test` runs, Spark's JVM). Why: `checkers.spark` removes the Spark
scratch directories under the temp dir whose owning PID it cannot see, and a run analysed inside
its own PID namespace sees no process outside it, so with one shared /tmp a fault-run test on one
worker deleted the scratch of the live Spark session of another. Sharing a temp dir only with
its own worker keeps a parallel suite exactly as isolated as a serial one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_WORKER_TMP: Path | None = None

if _WORKER is not None:
    # Set at import, before any fixture or module asks tempfile for its directory.
    _WORKER_TMP = Path(tempfile.mkdtemp(prefix=f"logquake-{_WORKER}-"))
    os.environ["TMPDIR"] = str(_WORKER_TMP)
    tempfile.tempdir = None  # gettempdir() caches; make it read TMPDIR again


def pytest_unconfigure(config) -> None:
    if _WORKER_TMP is not None:
        shutil.rmtree(_WORKER_TMP, ignore_errors=True)


def pytest_collection_modifyitems(config, items) -> None:
    """Under xdist, start the tests marked `slow` (minute-long fault runs) first, one per worker.

    Why: `--dist worksteal` hands each worker a contiguous share of the collection, and a worker
    keeps the test after its running one; the three slow tests of test_claims_end_to_end.py are
    neighbours, so they ran one after the other on one worker (259 s of a 264 s harness run).
    The shares are cut as xdist cuts them (share i is len(rest) // workers-left), and each begins
    with its round-robin part of the slow tests; the rest keep their collection order.
    """
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if not slow:
        return
    slow_ids = {id(item) for item in slow}
    fast = [item for item in items if id(item) not in slow_ids]
    ordered = []
    remaining = len(items)
    for share in range(workers):
        size = remaining // (workers - share)
        head = slow[share::workers][:size]
        take = size - len(head)
        ordered += head + fast[:take]
        fast = fast[take:]
        remaining -= size
    # Anything the shares could not hold (more slow tests than room) keeps its place at the end.
    leftover = [item for item in slow if not any(item is o for o in ordered)]
    items[:] = ordered + fast + leftover
