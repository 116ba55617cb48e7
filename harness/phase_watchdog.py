"""A run phase that lasts far longer than its settings allow is stuck somewhere: say so on
stderr and write every thread's stack into harness.log, once per phase, and let the run go
on (it may still finish; a hung run at least leaves where it hung in its run directory).

Every wait inside a phase is bounded (the run loop completes an op as info after its
op_timeout_s, clients close under a timeout, brokers are SIGKILLed after theirs), so a budget
is the phase's own time limit plus two op timeouts and a margin. Checking and reporting have
no budget: their time grows with the history. Simulated runs are not watched: their phases
are measured in virtual time.
"""

from __future__ import annotations

import faulthandler
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Mapping, TextIO

from harness.spec import RunSpec

SETUP_BUDGET_S = 600.0  # a cold Docker image build is part of the Docker back end's setup
HEAL_BUDGET_S = 300.0
TEARDOWN_BUDGET_S = 300.0
MARGIN_S = 60.0


def phase_budgets_s(spec: RunSpec, op_timeout_s: float) -> dict[str, float]:
    """How long each watched phase of a real run may take before it counts as stuck."""
    ops_s = 2 * op_timeout_s + MARGIN_S
    return {
        "setup": SETUP_BUDGET_S,
        "main": spec.time_limit_s + ops_s,
        "heal": HEAL_BUDGET_S,
        "quiet": spec.quiet_period_s + MARGIN_S,
        "final": spec.final_time_limit_s + ops_s,
        "teardown": TEARDOWN_BUDGET_S,
    }


class PhaseWatchdog:
    """`enter(phase)` at each phase change; when the phase is still current after its
    budget, the warning and the stacks go to `stacks_path` (the run's harness.log)."""

    def __init__(self, log: logging.Logger, stacks_path: Path, budgets_s: Mapping[str, float],
                 stream: TextIO | None = None):
        self.log, self.stacks_path, self.budgets_s = log, stacks_path, dict(budgets_s)
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._phase: str | None = None
        self._entered_s = 0.0
        self._closed = False
        self.overdue: list[str] = []  # phases that outlasted their budget, in order

    def enter(self, phase: str) -> None:
        with self._lock:
            self._cancel()
            self._phase, self._entered_s = phase, time.monotonic()
            budget_s = self.budgets_s.get(phase)
            if budget_s is not None and not self._closed:
                self._timer = threading.Timer(budget_s, self._fire, args=(phase, budget_s))
                self._timer.name = f"phase-watchdog-{phase}"
                self._timer.daemon = True
                self._timer.start()

    def close(self) -> None:
        with self._lock:
            self._cancel()
            self._phase = None
            self._closed = True  # the phases after it (check, report) are not watched

    def __enter__(self) -> "PhaseWatchdog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, phase: str, budget_s: float) -> None:
        with self._lock:
            if self._phase != phase:
                return
            elapsed_s = time.monotonic() - self._entered_s
            self.overdue.append(phase)
        self.log.warning("phase %s has run %.0f s, past its budget of %.0f s: every thread's stack follows",
                         phase, elapsed_s, budget_s)
        for handler in self.log.handlers:
            handler.flush()
        try:
            with open(self.stacks_path, "a", encoding="utf-8") as out:
                faulthandler.dump_traceback(out, all_threads=True)
        except OSError as exc:
            self.log.warning("cannot write the stacks to %s: %s", self.stacks_path, exc)
        print(f"logquake: the {phase} phase has run {elapsed_s:.0f} s, past its budget of {budget_s:.0f} s; "
              f"every thread's stack is in {self.stacks_path}", file=self.stream, flush=True)
