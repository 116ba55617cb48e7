"""The run loop: drives a generator against real clients on worker threads.

One worker thread per client thread (plus one for the nemesis), each a Jepsen process with
its own client. The loop itself is single-threaded and owns the generator, the context and
the history:

1. completions first (they are latency sensitive, and the generator may change its mind);
2. then ask the generator: an op due now goes to its thread's worker; an op due later
   means waiting for a completion until it is due; pending means waiting for a completion;
3. every invocation and completion goes to the history as it happens. The writer streams it
   in batches (at least every flush interval); the loop flushes it at once for every nemesis
   op and whenever run() returns, so phase changes, heals and stops are on disk.

The loop asks the generator only when it may get something: while every thread is busy a
generator can only answer pending (or that it is done, which changes nothing while ops are
outstanding), so the loop just waits for a completion. Asking anyway cost a full pass
through the generator stack per op.

An `info` completion (or one marked end_process) retires the process: the worker closes
that client on a helper thread and the thread continues at once as process p + concurrency
with a fresh client. Every
invocation gets exactly one completion: an op still outstanding when the run stops, or one
that does not complete within `op_timeout_s`, is completed as info by the loop, and a late
answer from its worker is discarded.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from harness.generator.core import (
    NEMESIS_THREAD,
    PENDING,
    Completion,
    Context,
    Event,
    GeneratorLike,
    Invocation,
    Thread,
    lift,
)
from harness.history import HistoryWriter, Op
from harness.op_recorder import OpRecorder

PENDING_POLL_S = 0.002  # how often a pending generator is asked again when nothing is in flight
MAX_WAIT_S = 0.1  # never block longer than this, so a stop request is seen promptly
EXPIRY_CHECK_S = 0.05  # how often outstanding ops are checked against op_timeout_s
OP_TIMEOUT_S = 120.0  # an op with no completion after this long is completed as info


class Client:  # the shape workers need; workloads.base.Client is the full protocol
    def invoke(self, invocation: Invocation) -> Completion: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _Done:
    thread: Thread
    invocation: Invocation
    completion: Completion | None  # None: an internal sleep ended
    time_ns: int


class _Worker:
    """A thread that runs one thread's ops through its current process's client."""

    def __init__(self, thread: Thread, open_client: Callable[[int | str], Client], done: "queue.SimpleQueue[_Done]",
                 now_ns: Callable[[], int], stopping: threading.Event, log: logging.Logger):
        self.thread = thread
        self.inbox: "queue.SimpleQueue[Invocation | None]" = queue.SimpleQueue()
        self._open_client = open_client
        self._done = done
        self._now_ns = now_ns
        self._stopping = stopping
        self._log = log
        self._client: Client | None = None
        self._process: int | str | None = None
        self._closers: list[threading.Thread] = []  # closes of retired clients still running
        self._thread = threading.Thread(target=self._run, name=f"worker-{thread}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            invocation = self.inbox.get()
            if invocation is None:
                self._close_client()
                return
            if invocation.kind == "sleep":
                self._stopping.wait(float(invocation.value))
                self._done.put(_Done(self.thread, invocation, None, self._now_ns()))
                continue
            completion = self._invoke(invocation)
            if completion.retires_process:
                self._close_client_in_background()
            self._done.put(_Done(self.thread, invocation, completion, self._now_ns()))

    def _invoke(self, invocation: Invocation) -> Completion:
        try:
            if self._client is None or self._process != invocation.process:
                self._close_client()
                self._client = self._open_client(invocation.process)
                self._process = invocation.process
            return self._client.invoke(invocation)
        except Exception as exc:  # an unexpected client failure: the outcome is unknown
            self._log.warning("process %s: %s raised %s\n%s", invocation.process, invocation.f, exc,
                              traceback.format_exc())
            return Completion("info", None, error=["exception", f"{type(exc).__name__}: {exc}"])

    def _close_client_in_background(self) -> None:
        """A retired process's client is closed on a helper thread: a close can wait seconds
        (librdkafka's consumer close waits for a coordinator a fault may have cut off), and
        the thread's next process must not wait with it, as in Jepsen, where a crashed
        process's successor starts at once."""
        client, process = self._client, self._process
        self._client, self._process = None, None
        if client is None:
            return

        def close() -> None:
            try:
                client.close()
            except Exception as exc:
                self._log.debug("closing the client of process %s: %s", process, exc)

        closer = threading.Thread(target=close, name=f"close-{process}", daemon=True)
        closer.start()
        self._closers = [t for t in self._closers if t.is_alive()] + [closer]

    def _close_client(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception as exc:
                self._log.debug("closing the client of process %s: %s", self._process, exc)
        self._client, self._process = None, None

    def shut_down(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self.inbox.put(None)
        self._thread.join(timeout_s)
        for closer in list(self._closers):
            closer.join(max(0.0, deadline - time.monotonic()))


class Interpreter(OpRecorder):
    def __init__(self, *, concurrency: int, open_client: Callable[[int], Client], history: HistoryWriter,
                 nemesis: Client | None = None, log: logging.Logger | None = None,
                 on_op: Callable[[Op], None] | None = None, start_ns: int | None = None,
                 op_timeout_s: float = OP_TIMEOUT_S, drain_timeout_s: float = 15.0):
        self.history = history
        self.log = log or logging.getLogger("logquake.interpreter")
        self.on_op = on_op
        self.start_ns = start_ns if start_ns is not None else time.monotonic_ns()
        self.op_timeout_s = op_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.ctx = Context.initial(concurrency, with_nemesis=nemesis is not None)
        self._open_client = open_client
        self._nemesis = nemesis
        self._done: "queue.SimpleQueue[_Done]" = queue.SimpleQueue()
        self._stop = threading.Event()
        self._stopping_workers = threading.Event()
        self._outstanding: dict[Thread, tuple[Invocation, float]] = {}
        self._workers: dict[Thread, _Worker] = {}
        self._index = history.count
        self._next_expiry_check = 0.0
        for thread in self.ctx.threads:
            self._workers[thread] = self._new_worker(thread)

    # -- time and recording
    def now_ns(self) -> int:
        return time.monotonic_ns() - self.start_ns

    def _new_worker(self, thread: Thread) -> _Worker:
        opener = (lambda process: self._nemesis) if thread == NEMESIS_THREAD else self._open_client
        return _Worker(thread, opener, self._done, self.now_ns, self._stopping_workers, self.log)

    # -- control
    def stop(self) -> None:
        """Stop generating; outstanding ops get their completions (or info) and run() returns."""
        self._stop.set()
        self._stopping_workers.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- the loop
    def run(self, gen: GeneratorLike) -> bool:
        """Run `gen` to exhaustion. Returns False if stopped first. Everything it recorded is
        written to the history file when it returns."""
        try:
            return self._run(lift(gen))
        finally:
            self.history.flush()

    def _run(self, gen_: Any) -> bool:
        while True:
            gen_ = self._drain(gen_, wait_s=0.0)
            if self._stop.is_set():
                self._finish_outstanding(gen_, "interrupted", self.drain_timeout_s)
                return False
            if self._outstanding and time.monotonic() >= self._next_expiry_check:
                gen_ = self._expire_stuck(gen_)
            if not self.ctx.free:
                gen_ = self._drain(gen_, wait_s=MAX_WAIT_S)
                continue
            ctx = self.ctx.at(self.now_ns())
            result = gen_.op(ctx)
            if result is None:
                if not self._outstanding:
                    return True
                gen_ = self._drain(gen_, wait_s=MAX_WAIT_S)
                continue
            op, nxt = result
            if op is PENDING:
                gen_ = self._drain(gen_, wait_s=MAX_WAIT_S if self._outstanding else PENDING_POLL_S)
                continue
            assert isinstance(op, Invocation)
            wait_ns = op.time_ns - ctx.time_ns
            if wait_ns > 0:
                gen_ = self._drain(gen_, wait_s=min(wait_ns / 1e9, MAX_WAIT_S))
                continue
            gen_ = self._dispatch(op, nxt)

    def _dispatch(self, op: Invocation, gen_: Any) -> Any:
        if op.kind == "log":
            self.log.info("%s", op.value)
            return gen_
        thread = self.ctx.thread_of(op.process)
        self.ctx = self.ctx.busy(thread)
        self._outstanding[thread] = (op, time.monotonic())
        if op.kind == "client":
            # Jepsen records nemesis ops as info on both ends.
            type_ = "info" if thread == NEMESIS_THREAD else "invoke"
            event = self.record(type_, op.process, op.f, op.value, time_ns=self.now_ns(), extra=op.extra)
            gen_ = gen_.update(self.ctx, event)
        self._workers[thread].inbox.put(op)
        return gen_

    def _drain(self, gen_: Any, *, wait_s: float) -> Any:
        """Apply every completion that has arrived, waiting up to wait_s for the first."""
        done_queue = self._done
        # empty() first: this runs several times per op, and a raised queue.Empty costs more
        # than the whole check. Only this thread takes from the queue, so a non-empty
        # queue stays non-empty until it does.
        if done_queue.empty():
            if wait_s <= 0:
                return gen_
            try:
                gen_ = self._complete(gen_, done_queue.get(timeout=wait_s))
            except queue.Empty:
                return gen_
        while not done_queue.empty():
            gen_ = self._complete(gen_, done_queue.get_nowait())
        return gen_

    def _complete(self, gen_: Any, done: _Done) -> Any:
        current = self._outstanding.get(done.thread)
        if current is None or current[0] is not done.invocation:
            self.log.info("discarding a late completion of %s by process %s (already completed as info)",
                          done.invocation.f, done.invocation.process)
            return gen_
        del self._outstanding[done.thread]
        self.ctx = self.ctx.freed(done.thread)
        if done.completion is None:
            return gen_
        return self._record_completion(gen_, done.thread, done.invocation, done.completion, done.time_ns)

    def _expire_stuck(self, gen_: Any) -> Any:
        now = time.monotonic()
        self._next_expiry_check = now + EXPIRY_CHECK_S
        for thread, (op, started) in list(self._outstanding.items()):
            if now - started > self.op_timeout_s:
                gen_ = self._force_complete(gen_, thread, f"no completion within {self.op_timeout_s:g} s")
        return gen_

    def _finish_outstanding(self, gen_: Any, reason: str, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while self._outstanding and time.monotonic() < deadline:
            gen_ = self._drain(gen_, wait_s=min(MAX_WAIT_S, max(0.0, deadline - time.monotonic())))
        for thread in list(self._outstanding):
            gen_ = self._force_complete(gen_, thread, reason)
        return gen_

    def _force_complete(self, gen_: Any, thread: Thread, reason: str) -> Any:
        """Complete a hung op as info, retire its process, and give its thread a fresh worker
        (the stuck one is abandoned; whatever it returns later is discarded)."""
        op, _ = self._outstanding.pop(thread)
        self.log.warning("process %s: %s completed as info: %s", op.process, op.f, reason)
        self.ctx = self.ctx.freed(thread)
        self._workers[thread] = self._new_worker(thread)
        if op.kind != "client":
            return gen_
        return self._record_completion(gen_, thread, op, Completion("info", None, error=reason), self.now_ns())

    def close(self, timeout_s: float = 10.0) -> None:
        """Complete anything outstanding as info, then close every client."""
        self._stopping_workers.set()
        self._finish_outstanding(lift(None), "run ended", 0.0)
        if not self.history.closed:
            self.history.flush()
        deadline = time.monotonic() + timeout_s
        for worker in self._workers.values():
            worker.shut_down(max(0.0, deadline - time.monotonic()))
