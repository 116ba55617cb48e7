"""Did the run make progress? Jepsen's stats checker, with its final-phase companion.

A run in which some kind of operation never succeeded, or in which nothing succeeded once
every fault was healed, has not exercised what its claims are about: no anomaly found means
nothing then, so the verdict is `unknown`, with a reason naming the op kind.

- Every op kind (`f`) the clients invoked has at least one `ok` completion (Jepsen's
  `checker/stats`). `crash` is exempt: a worker crash is recorded as `info` by design.
- If the history has a final phase (it starts at the harness's final heal, see
  harness/report/phases.py), every op kind invoked in it has an `ok` completion in it, and
  some read (poll, txn or process) succeeded in it: after the heal the cluster must serve
  sends and polls again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from checkers.result import CheckerError

# Op kinds that never complete ok by design.
NEVER_OK = frozenset({"crash"})
# Op kinds that read the log: the final phase must have one that succeeded.
READS = ("poll", "txn", "process")

ByF = Mapping[str, Mapping[str, int]]  # f → completion type (ok | fail | info) → ops


@dataclass(frozen=True)
class FinalPhase:
    """The client ops completed after the final heal, counted like stats["by_f"]."""
    by_f: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def _without_ok(by_f: ByF) -> list[str]:
    return sorted(f for f, by_type in by_f.items()
                  if f not in NEVER_OK and sum(by_type.values()) > 0 and by_type.get("ok", 0) == 0)


def progress_errors(by_f: ByF, final: FinalPhase | None = None) -> list[CheckerError]:
    """CheckerErrors (verdict unknown) for each way the run failed to make progress."""
    errors = []
    for f in _without_ok(by_f):
        counts = ", ".join(f"{n} {t}" for t, n in sorted(by_f[f].items()) if n)
        errors.append(CheckerError("progress", f"no {f} op completed ok ({counts}): the run never exercised {f}"))
    if final is not None:
        for f in _without_ok(final.by_f):
            counts = ", ".join(f"{n} {t}" for t, n in sorted(final.by_f[f].items()) if n)
            errors.append(CheckerError("progress", f"no {f} op completed ok in the final phase, after every "
                                                   f"fault was healed ({counts})"))
        if not any(final.by_f.get(f, {}).get("ok", 0) for f in READS):
            errors.append(CheckerError("progress", "no read (poll, txn or process) completed ok in the final phase, "
                                                   "after every fault was healed"))
    return errors
