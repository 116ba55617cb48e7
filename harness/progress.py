"""The live progress line on stderr: phase, elapsed time, ops/s, outcomes, active faults.

The run loop calls `observe(op)` for every op it records (from one thread); a small printer
thread renders a line once a second. On a terminal the line rewrites itself; otherwise (CI
logs) one line is printed every `interval_s`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from harness.history import NEMESIS, Op


class Progress:
    def __init__(self, stream: TextIO | None = None, interval_s: float = 1.0):
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.phase = "setup"
        self.started = time.monotonic()
        self.counts = {"ok": 0, "fail": 0, "info": 0}
        self.invocations = 0
        self.faults: set[str] = set()
        self._nemesis_open = False
        self._window: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def observe(self, op: Op) -> None:
        if op.process == NEMESIS:
            # Nemesis ops are info on both ends; a fault counts as active from its invocation.
            if not self._nemesis_open:
                kind = op.f.split("-", 1)[1] if "-" in op.f else op.f
                if op.f.startswith("start-"):
                    self.faults.add(kind)
                elif op.f.startswith("stop-"):
                    self.faults.discard(kind)
            self._nemesis_open = not self._nemesis_open
            return
        if op.type == "invoke":
            self.invocations += 1
        else:
            self.counts[op.type] = self.counts.get(op.type, 0) + 1

    def line(self) -> str:
        now = time.monotonic()
        self._window.append((now, self.invocations))
        while len(self._window) > 1 and now - self._window[0][0] > 5.0:
            self._window.pop(0)
        (t0, n0), (t1, n1) = self._window[0], self._window[-1]
        rate = (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
        faults = ",".join(sorted(self.faults)) or "none"
        return (f"[{now - self.started:6.1f}s] {self.phase:<6} {rate:7.1f} ops/s  ok {self.counts['ok']}  "
                f"fail {self.counts['fail']}  info {self.counts['info']}  faults: {faults}")

    def _print_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._emit()

    def _emit(self, final: bool = False) -> None:
        text = self.line()
        if self._tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._print_loop, name="progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._emit(final=True)
