"""Run a `logquake` command line in a child process for a test, and when it does not finish in
time, fail with where it was waiting instead of a bare timeout.

A run that hangs under pytest-timeout leaves nothing behind: pytest kills the worker's wait,
not the child, and the child's output is lost. Here the child gets SIGUSR1 first (harness.cli
registers faulthandler on it: every thread's stack goes to stderr) and its Java descendants
(the Spark driver) SIGQUIT (the JVM prints its threads to its stdout, which is the child's),
then SIGTERM (testcmd heals its faults and tears its cluster down), then SIGKILL, and the test
fails with the tail of both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

PROJECT = Path(__file__).resolve().parents[1]
STACK_DUMP_WAIT_S = 3.0
TEARDOWN_WAIT_S = 30.0
STDERR_TAIL_CHARS = 12000
STDOUT_TAIL_CHARS = 60000


def run_logquake(argv: Sequence[str], *, timeout_s: float, module: str = "harness.testcmd",
                 cwd: Path = PROJECT) -> subprocess.CompletedProcess:
    """`python -m module *argv` (the test subcommand by default; "harness.cli" for any)."""
    return run_command([sys.executable, "-m", module, *argv], timeout_s=timeout_s, cwd=cwd)


def run_command(command: Sequence[str], *, timeout_s: float, cwd: Path = PROJECT,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a logquake process (`command` starts with the interpreter), output captured as
    text. Raises AssertionError (with the child's stacks and stderr) if it has not exited
    after `timeout_s`."""
    child = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                             env=None if env is None else dict(env))
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        shown = " ".join(command[1:])
        if child.poll() is not None:
            # It ended, but something it started still holds its output open.
            holders = _pipe_holders(child)
            stdout, stderr = _stop_holders(child, holders)
            what = (f"`{shown}` exited with status {child.returncode}, but after {timeout_s:g} s its output was "
                    f"still held open by: {'; '.join(holders.values()) or 'nothing found'} (SIGQUIT to Java, then SIGKILL)")
        else:
            stdout, stderr = _stop(child)
            what = f"`{shown}` did not finish in {timeout_s:g} s; its stacks (SIGUSR1)"
        raise AssertionError(f"{what} and stderr:\n{stderr[-STDERR_TAIL_CHARS:]}\n"
                             f"stdout (with any JVM's thread dump):\n{stdout[-STDOUT_TAIL_CHARS:]}") from None
    return subprocess.CompletedProcess(list(command), child.returncode, stdout, stderr)


def _pipe_holders(child: subprocess.Popen) -> dict[int, str]:
    """The processes (pid -> command line) holding the child's stdout or stderr pipe."""
    pipes = {f"pipe:[{os.fstat(stream.fileno()).st_ino}]" for stream in (child.stdout, child.stderr) if stream}
    holders: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in pipes for fd in os.listdir(f"/proc/{entry}/fd")):
                holders[int(entry)] = open(f"/proc/{entry}/cmdline").read().replace("\0", " ").strip()[:300]
        except OSError:
            continue
    return holders


def _stop_holders(child: subprocess.Popen, holders: dict[int, str]) -> tuple[str, str]:
    for pid in holders:
        if _command_name(pid) == "java":
            _signal(pid, signal.SIGQUIT)
    _read_for(child, STACK_DUMP_WAIT_S)  # time for their dumps; what is read so far is kept
    for pid in holders:
        _signal(pid, signal.SIGKILL)
    return _read_for(child, TEARDOWN_WAIT_S) or ("", "")


def _read_for(child: subprocess.Popen, wait_s: float) -> tuple[str, str] | None:
    try:
        return child.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired as exc:
        return (_text(exc.stdout), _text(exc.stderr)) if exc.stdout or exc.stderr else None


def _stop(child: subprocess.Popen) -> tuple[str, str]:
    outputs: tuple[str, str] = ("", "")
    for sig, wait_s in ((signal.SIGUSR1, STACK_DUMP_WAIT_S), (signal.SIGTERM, TEARDOWN_WAIT_S),
                        (signal.SIGKILL, TEARDOWN_WAIT_S)):
        if child.poll() is not None:
            break
        if sig == signal.SIGUSR1:
            for pid in _descendants(child.pid):
                if _command_name(pid) == "java":
                    _signal(pid, signal.SIGQUIT)
        child.send_signal(sig)
        try:
            outputs = child.communicate(timeout=wait_s)
            break
        except subprocess.TimeoutExpired as exc:
            # Keep what has been read so far (a grandchild holding the pipes open keeps
            # communicate() from ever seeing their end).
            outputs = (_text(exc.stdout), _text(exc.stderr))
    return outputs


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        found += children
        frontier += children
    return found


def _command_name(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return ""


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
