"""harness.phase_watchdog: a phase past its budget leaves a warning and every thread's stack
in harness.log and a line on stderr; a phase left in time, or one without a budget, leaves
nothing. The budgets follow the run's own limits."""

import io
import logging
import time

import pytest

from harness.phase_watchdog import MARGIN_S, PhaseWatchdog, phase_budgets_s
from harness.spec import RunSpec


@pytest.fixture
def watched_log(tmp_path, request):
    """A logger writing to tmp_path/harness.log, as a run's does; the path too."""
    path = tmp_path / "harness.log"
    log = logging.getLogger(f"logquake.test-watchdog.{request.node.name}")
    log.setLevel(logging.DEBUG)
    handler = logging.FileHandler(path, encoding="utf-8")
    log.addHandler(handler)
    yield log, path
    log.removeHandler(handler)
    handler.close()


def sleeping_in_a_stuck_phase(seconds):
    time.sleep(seconds)


def test_a_phase_past_its_budget_writes_the_stacks_of_every_thread(watched_log):
    log, path = watched_log
    stderr = io.StringIO()
    with PhaseWatchdog(log, path, {"final": 0.3}, stream=stderr) as watchdog:
        watchdog.enter("final")
        sleeping_in_a_stuck_phase(1.0)
    text = path.read_text()
    assert "phase final has run 0 s, past its budget of 0 s" in text
    # faulthandler's dump names this thread's frames: where the phase is stuck.
    assert "sleeping_in_a_stuck_phase" in text and "test_phase_watchdog.py" in text
    assert watchdog.overdue == ["final"]
    assert "the final phase has run" in stderr.getvalue() and str(path) in stderr.getvalue()


def test_a_phase_left_in_time_or_without_a_budget_writes_nothing(watched_log):
    log, path = watched_log
    stderr = io.StringIO()
    with PhaseWatchdog(log, path, {"main": 0.3}, stream=stderr) as watchdog:
        watchdog.enter("main")
        time.sleep(0.1)
        watchdog.enter("check")  # no budget: never overdue
        time.sleep(0.6)
    watchdog.enter("main")  # closed: no longer watched
    time.sleep(0.5)
    assert path.read_text() == "" and stderr.getvalue() == "" and watchdog.overdue == []


def test_budgets_follow_the_runs_limits():
    spec = RunSpec(name="t", seed=1, workload="queue", time_limit_s=30, quiet_period_s=2, final_time_limit_s=45)
    budgets = phase_budgets_s(spec, op_timeout_s=120)
    assert budgets["main"] == 30 + 240 + MARGIN_S
    assert budgets["final"] == 45 + 240 + MARGIN_S
    assert budgets["quiet"] == 2 + MARGIN_S
    assert "check" not in budgets and "report" not in budgets
