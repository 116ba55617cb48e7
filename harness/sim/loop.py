"""The run loop of a simulated run: `harness.interpreter.Interpreter`'s rules, as coroutines on
the simulation's event loop (`cluster.sim.aio_loop.SimEventLoop`), on virtual time.

The same generator protocol, Context and history as a real run: one task per outstanding op
instead of one worker thread per client thread, and a clock that is the simulation's, so
history timestamps are virtual nanoseconds since the run opened. The rules are the real
loop's:

1. completions first, then ask the generator (only when a thread is free);
2. an op due later means waiting, on virtual time, until it is due or something completes;
   pending means waiting for a completion (at most `MAX_WAIT_S`, as the real loop asks a
   pending generator again);
3. every invocation and completion goes to the history as it happens;
4. an `info` completion (or end_process) retires the process: its client is closed in a
   background task and the thread continues at once as process p + concurrency with a fresh
   client; an op not complete within `op_timeout_s` (virtual) is completed as info and its
   task cancelled.

Nothing here reads a real clock, sleeps for real or starts a thread: a run is a function of
its seed. The nemesis thread's ops run inline (the simulated faults are instantaneous).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from harness.generator.core import NEMESIS_THREAD, PENDING, Completion, Context, GeneratorLike, Invocation, Thread, lift
from harness.history import HistoryWriter, Op
from harness.interpreter import MAX_WAIT_S, PENDING_POLL_S
from harness.op_recorder import OpRecorder

NS_PER_S = 1_000_000_000


@dataclass(slots=True)
class _Done:
    thread: Thread
    invocation: Invocation
    completion: Completion | None  # None: an internal sleep ended
    time_ns: int


@dataclass(slots=True)
class _Outstanding:
    invocation: Invocation
    task: asyncio.Task
    started_ns: int


class SimInterpreter(OpRecorder):
    """`open_client(process)` makes a client whose `invoke` and `close` are coroutines;
    `nemesis.invoke(invocation)` returns a Completion, or an awaitable of one (a fault
    that takes time); `clock_ns()` is the simulation's monotonic clock."""

    def __init__(self, *, concurrency: int, open_client: Callable[[int | str], Any], history: HistoryWriter,
                 clock_ns: Callable[[], int], start_ns: int, nemesis: Any = None, log: logging.Logger | None = None,
                 on_op: Callable[[Op], None] | None = None, op_timeout_s: float = 120.0, drain_timeout_s: float = 15.0):
        self.history = history
        self.log = log or logging.getLogger("logquake.sim")
        self.on_op = on_op
        self.start_ns = start_ns
        self.op_timeout_ns = int(op_timeout_s * NS_PER_S)
        self.drain_timeout_ns = int(drain_timeout_s * NS_PER_S)
        self.ctx = Context.initial(concurrency, with_nemesis=nemesis is not None)
        self._clock_ns = clock_ns
        self._open_client = open_client
        self._nemesis = nemesis
        self._clients: dict[Thread, tuple[int | str, Any]] = {}
        self._outstanding: dict[Thread, _Outstanding] = {}
        self._done: deque[_Done] = deque()
        self._waiter: asyncio.Future | None = None
        self._closers: set[asyncio.Task] = set()
        self._index = history.count
        self._stop = False

    # -- time and recording
    def now_ns(self) -> int:
        return self._clock_ns() - self.start_ns

    def stop(self) -> None:
        """Stop generating; outstanding ops get their completions (or info) and run() returns."""
        self._stop = True
        self._wake()

    @property
    def stopped(self) -> bool:
        return self._stop

    # -- the loop
    async def run(self, gen: GeneratorLike) -> bool:
        """Run `gen` to exhaustion. Returns False if stopped first."""
        try:
            return await self._run(lift(gen))
        finally:
            self.history.flush()

    async def _run(self, gen_: Any) -> bool:
        while True:
            gen_ = self._apply_done(gen_)
            if self._stop:
                await self._finish_outstanding(gen_, "interrupted", self.drain_timeout_ns)
                return False
            gen_ = self._expire_stuck(gen_)
            if not self.ctx.free:
                await self._wait_ns(self._until_expiry_ns())
                continue
            ctx = self.ctx.at(self.now_ns())
            result = gen_.op(ctx)
            if result is None:
                if not self._outstanding:
                    return True
                await self._wait_ns(self._until_expiry_ns())
                continue
            op, nxt = result
            if op is PENDING:
                poll_s = MAX_WAIT_S if self._outstanding else PENDING_POLL_S
                await self._wait_ns(min(int(poll_s * NS_PER_S), self._until_expiry_ns()))
                continue
            assert isinstance(op, Invocation)
            wait_ns = op.time_ns - ctx.time_ns
            if wait_ns > 0:
                await self._wait_ns(min(wait_ns, self._until_expiry_ns()))
                continue
            gen_ = self._dispatch(op, nxt)

    def _until_expiry_ns(self) -> int:
        """How long until the oldest outstanding op times out (a long wait when none is)."""
        if not self._outstanding:
            return self.op_timeout_ns
        oldest = min(o.started_ns for o in self._outstanding.values())
        return max(1, oldest + self.op_timeout_ns - self.now_ns())

    async def _wait_ns(self, timeout_ns: int) -> None:
        """Until a completion arrives, a stop is asked for, or timeout_ns of virtual time pass."""
        if self._done or self._stop:
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiter = waiter
        handle = loop.call_later(timeout_ns / NS_PER_S, self._wake)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _dispatch(self, op: Invocation, gen_: Any) -> Any:
        if op.kind == "log":
            self.log.info("%s", op.value)
            return gen_
        thread = self.ctx.thread_of(op.process)
        self.ctx = self.ctx.busy(thread)
        if op.kind == "client":
            type_ = "info" if thread == NEMESIS_THREAD else "invoke"  # Jepsen: nemesis ops are info
            event = self.record(type_, op.process, op.f, op.value, time_ns=self.now_ns(), extra=op.extra)
            gen_ = gen_.update(self.ctx, event)
        task = asyncio.get_running_loop().create_task(self._perform(thread, op))
        self._outstanding[thread] = _Outstanding(op, task, self.now_ns())
        return gen_

    async def _perform(self, thread: Thread, op: Invocation) -> None:
        completion: Completion | None
        if op.kind == "sleep":
            await asyncio.sleep(float(op.value))
            completion = None
        elif thread == NEMESIS_THREAD:
            try:
                completion = self._nemesis.invoke(op)
                if inspect.isawaitable(completion):  # a scripted fault runs on the loop's time
                    completion = await completion
            except Exception as exc:  # as a real worker does: the fault's outcome is unknown
                self.log.warning("nemesis %s raised %s\n%s", op.f, exc, traceback.format_exc())
                completion = Completion("info", None, error=["exception", f"{type(exc).__name__}: {exc}"])
        else:
            completion = await self._invoke(thread, op)
        self._done.append(_Done(thread, op, completion, self.now_ns()))
        self._wake()

    async def _invoke(self, thread: Thread, op: Invocation) -> Completion:
        try:
            current = self._clients.get(thread)
            if current is None or current[0] != op.process:
                if current is not None:
                    self._close_in_background(thread)
                self._clients[thread] = (op.process, self._open_client(op.process))  # type: ignore[arg-type]
            completion = await self._clients[thread][1].invoke(op)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an unexpected client failure: the outcome is unknown
            self.log.warning("process %s: %s raised %s\n%s", op.process, op.f, exc, traceback.format_exc())
            completion = Completion("info", None, error=["exception", f"{type(exc).__name__}: {exc}"])
        if completion.retires_process:
            self._close_in_background(thread)
        return completion

    def _close_in_background(self, thread: Thread) -> None:
        """A retired process's client closes in its own task: its successor starts at once,
        as in Jepsen (a close can wait seconds for a coordinator a fault cut off)."""
        entry = self._clients.pop(thread, None)
        if entry is None:
            return
        process, client = entry

        async def close() -> None:
            try:
                await client.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.log.debug("closing the client of process %s: %s", process, exc)

        task = asyncio.get_running_loop().create_task(close())
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    def _apply_done(self, gen_: Any) -> Any:
        while self._done:
            done = self._done.popleft()
            current = self._outstanding.get(done.thread)
            if current is None or current.invocation is not done.invocation:
                continue  # already completed as info
            del self._outstanding[done.thread]
            self.ctx = self.ctx.freed(done.thread)
            if done.completion is not None:
                gen_ = self._record_completion(gen_, done.thread, done.invocation, done.completion, done.time_ns)
        return gen_

    def _expire_stuck(self, gen_: Any) -> Any:
        now = self.now_ns()
        # Asked on every turn of the loop: nothing to sort when no op is overdue.
        if not self._outstanding or min(o.started_ns for o in self._outstanding.values()) > now - self.op_timeout_ns:
            return gen_
        for thread, outstanding in sorted(self._outstanding.items(), key=lambda item: str(item[0])):
            if now - outstanding.started_ns >= self.op_timeout_ns:
                gen_ = self._force_complete(gen_, thread, f"no completion within {self.op_timeout_ns / NS_PER_S:g} s")
        return gen_

    async def _finish_outstanding(self, gen_: Any, reason: str, timeout_ns: int) -> Any:
        deadline = self.now_ns() + timeout_ns
        while self._outstanding and self.now_ns() < deadline:
            await self._wait_ns(deadline - self.now_ns())
            gen_ = self._apply_done(gen_)
        for thread in sorted(self._outstanding, key=str):
            gen_ = self._force_complete(gen_, thread, reason)
        return gen_

    def _force_complete(self, gen_: Any, thread: Thread, reason: str) -> Any:
        """Complete a hung op as info, retire its process, cancel its task."""
        outstanding = self._outstanding.pop(thread)
        op = outstanding.invocation
        self.log.warning("process %s: %s completed as info: %s", op.process, op.f, reason)
        outstanding.task.cancel()
        self.ctx = self.ctx.freed(thread)
        if thread != NEMESIS_THREAD:
            self._close_in_background(thread)
        if op.kind != "client":
            return gen_
        return self._record_completion(gen_, thread, op, Completion("info", None, error=reason), self.now_ns())

    async def close(self, timeout_s: float = 10.0) -> None:
        """Complete anything outstanding as info, then close every client (each within
        `timeout_s` of virtual time)."""
        self._stop = True
        await self._finish_outstanding(lift(None), "run ended", 0)
        if not self.history.closed:
            self.history.flush()
        for thread in sorted(self._clients, key=str):
            self._close_in_background(thread)
        closers = sorted(self._closers, key=lambda t: t.get_name())
        if closers:
            _, pending = await asyncio.wait(closers, timeout=timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
