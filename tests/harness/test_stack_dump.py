"""A run that does not finish in time tells where it is waiting: `kill -USR1` makes `logquake
test` print every thread's stack and go on (harness.cli), and tests.run_logquake uses that
before it stops the run with SIGTERM, which still heals and tears down."""

import pytest

from tests.run_logquake import run_logquake


def test_a_run_past_its_time_prints_its_stacks_then_stops_cleanly(tmp_path):
    argv = ["--workload", "queue", "--brokers", "1", "--time-limit", "600", "--seed", "3",
            "--results-dir", str(tmp_path / "results")]
    with pytest.raises(AssertionError) as failure:
        run_logquake(argv, timeout_s=15)
    message = str(failure.value)
    assert "did not finish in 15 s" in message
    # faulthandler's dump: the main thread inside the interpreter's loop, and its workers.
    assert "Current thread" in message or "Thread 0x" in message, message[-3000:]
    assert "harness/interpreter.py" in message, message[-3000:]
    # The dump did not end the run: the SIGTERM after it found it running and stopped it.
    assert "SIGTERM: stopping, healing faults and tearing down" in message, message[-3000:]
    histories = list((tmp_path / "results").rglob("history.jsonl"))
    assert len(histories) == 1 and histories[0].stat().st_size > 0
