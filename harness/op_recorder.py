"""How a run loop writes its history: the one implementation of the recording rules that the
threaded loop (`harness.interpreter.Interpreter`) and the simulated one
(`harness.sim.loop.SimInterpreter`) share, so a real and a simulated run record alike.

- every invocation and completion is an `Op` with the next index, appended as it happens;
  a nemesis op is flushed at once, so fault boundaries are on disk before the fault acts;
- nemesis ops are `info` on both invocation and completion (Jepsen);
- a completion's extra is merged over its invocation's, with `end_process` when it retires
  the process; an `info` (or end_process) completion retires the process in the Context;
- a fault action run outside the generator (the heal phase) is recorded like any nemesis op,
  its exception as the completion's error.
"""

from __future__ import annotations

import abc
import logging
import traceback
from typing import Any, Callable, Mapping

from harness.generator.core import NEMESIS_THREAD, Completion, Context, Event, Invocation, Thread
from harness.history import HistoryWriter, Op


class OpRecorder(abc.ABC):
    """Mixin: the loop sets `history`, `log`, `on_op`, `ctx` and `_index`, and gives `now_ns()`."""

    history: HistoryWriter
    log: logging.Logger
    on_op: Callable[[Op], None] | None
    ctx: Context
    _index: int

    @abc.abstractmethod
    def now_ns(self) -> int:
        """Nanoseconds since the run opened, on the loop's own clock (monotonic or virtual)."""

    def record(self, type_: str, process: int | str, f: str, value: Any, *, time_ns: int, error: Any = None,
               extra: Mapping[str, Any] | None = None) -> Event:
        # The op owns a fresh dict: callers' mappings (an invocation's extra) stay untouched.
        op = Op(self._index, time_ns, type_, process, f, value, error, dict(extra) if extra else {})
        self._index += 1
        self.history.append(op)
        if process == NEMESIS_THREAD:
            self.history.flush()  # fault boundaries are on disk before the fault acts
        if self.on_op is not None:
            self.on_op(op)
        return Event(type_, process, f, value, time_ns, error, op.extra)

    def _record_completion(self, gen_: Any, thread: Thread, invocation: Invocation, completion: Completion,
                           time_ns: int) -> Any:
        type_ = "info" if thread == NEMESIS_THREAD else completion.type  # nemesis ops are info (Jepsen)
        extra: Mapping[str, Any] = invocation.extra
        if completion.extra or completion.end_process:
            extra = {**invocation.extra, **completion.extra}
            if completion.end_process:
                extra["end_process"] = True
        event = self.record(type_, invocation.process, invocation.f, completion.value, time_ns=time_ns,
                            error=completion.error, extra=extra)
        if completion.retires_process and thread != NEMESIS_THREAD:
            self.ctx = self.ctx.retire(thread)
        return gen_.update(self.ctx, event)

    def record_nemesis(self, f: str, value: Any, action: Callable[[], Any], *, extra: dict | None = None) -> Any:
        """Run a fault action now (the heal phase) and record it like any nemesis op."""
        self.record("info", NEMESIS_THREAD, f, value, time_ns=self.now_ns(), extra=extra)
        error = None
        result = None
        try:
            result = action()
        except Exception as exc:
            error = ["exception", f"{type(exc).__name__}: {exc}"]
            self.log.error("nemesis %s failed: %s\n%s", f, exc, traceback.format_exc())
        self.record("info", NEMESIS_THREAD, f, result, time_ns=self.now_ns(), error=error, extra=extra)
        return result
