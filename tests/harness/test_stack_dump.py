"""A run that does not finish in time tells where it is waiting: `kill -USR1` makes `logquake
test` print every thread's stack and go on (harness.cli), and tests.run_logquake uses that
before it stops the run with SIGTERM, which still heals and tears down. A process that ended
while something it started holds its output open is named too, and that holder killed."""

import os
import sys
import time

import pytest

from tests.run_logquake import run_command, run_logquake


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


def test_a_process_that_ended_but_left_its_output_held_open_names_the_holder_which_is_killed():
    # The parent exits at once; the grandchild it leaves behind keeps the pipes open, and a
    # plain subprocess.run would wait for it for ever.
    code = "import subprocess; subprocess.Popen(['sleep', '300']); print('parent done', flush=True)"
    started = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_command([sys.executable, "-c", code], timeout_s=3)
    message = str(failure.value)
    assert "exited with status 0, but after 3 s its output was still held open by: sleep 300" in message, message
    assert "parent done" in message
    assert time.monotonic() - started < 30
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == "sleep 300"]  # killed


def _cmdline(pid: str) -> str:
    try:
        return open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip()
    except OSError:
        return ""
