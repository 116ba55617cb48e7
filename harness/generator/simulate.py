"""Run a generator with no threads, no clients and fake time (Jepsen's `simulate`).

Every invocation completes after a latency chosen by `complete`, in simulated time; the
result is the history the real run loop would record if the system behaved that way. Used
to test generators, and workloads' schedules, with no cluster.
"""

from __future__ import annotations

import heapq
from typing import Callable

from harness.generator.core import (
    NEMESIS_THREAD,
    PENDING,
    Completion,
    Context,
    Event,
    GeneratorLike,
    Invocation,
    lift,
)
from harness.history import Op

# (invocation) -> (completion, latency_ns)
Completer = Callable[[Invocation], tuple[Completion, int]]


def perfect(latency_ns: int = 10) -> Completer:
    """Every op succeeds, echoing its value, after `latency_ns`."""

    def complete(invocation: Invocation) -> tuple[Completion, int]:
        return Completion("ok", invocation.value), latency_ns

    return complete


def simulate(
    gen: GeneratorLike,
    *,
    concurrency: int = 2,
    complete: Completer | None = None,
    max_ops: int = 100_000,
    with_nemesis: bool = True,
    logs: list[str] | None = None,
) -> list[Op]:
    """The history (invocations and completions, in order) of running `gen`.

    Stops when the generator is exhausted and every op has completed, or after `max_ops`
    invocations. A generator that is pending with nothing in flight can never progress:
    that raises, naming the time, rather than looping forever.
    """
    complete = complete or perfect()
    ctx = Context.initial(concurrency, with_nemesis=with_nemesis)
    gen_ = lift(gen)
    in_flight: list[tuple[int, int, Invocation, Completion | None]] = []
    history: list[Op] = []
    sequence = 0
    invocations = 0

    def record(type_: str, process: int | str, f: str, value, time_ns: int, error=None, extra=None) -> Event:
        event = Event(type=type_, process=process, f=f, value=value, time_ns=time_ns,
                      error=error, extra=dict(extra or {}))
        history.append(Op(index=len(history), time_ns=time_ns, type=type_, process=process, f=f,
                          value=value, error=error, extra=dict(extra or {})))
        return event

    def finish_next() -> None:
        nonlocal ctx, gen_
        done_ns, _, invocation, completion = heapq.heappop(in_flight)
        thread = ctx.thread_of(invocation.process)
        ctx = ctx.at(max(ctx.time_ns, done_ns)).freed(thread)
        if completion is None:  # an internal sleep ended
            return
        extra = {**invocation.extra, **completion.extra}
        type_ = "info" if thread == NEMESIS_THREAD else completion.type
        event = record(type_, invocation.process, invocation.f, completion.value,
                       ctx.time_ns, completion.error, extra)
        if completion.retires_process and thread != NEMESIS_THREAD:
            ctx = ctx.retire(thread)
        gen_ = gen_.update(ctx, event)

    while True:
        result = gen_.op(ctx) if invocations < max_ops else None
        if result is None:
            while in_flight:
                finish_next()
            return history
        op, nxt = result
        if op is PENDING:
            if not in_flight:
                raise RuntimeError(f"generator is pending at t={ctx.time_ns} ns with nothing in flight")
            finish_next()
            continue
        assert isinstance(op, Invocation)
        if in_flight and in_flight[0][0] <= op.time_ns:
            finish_next()  # completions first: the generator may change its mind
            continue
        gen_ = nxt
        ctx = ctx.at(max(ctx.time_ns, op.time_ns))
        thread = ctx.thread_of(op.process)
        sequence += 1
        if op.kind == "log":
            if logs is not None:
                logs.append(str(op.value))
            continue
        ctx = ctx.busy(thread)
        if op.kind == "sleep":
            heapq.heappush(in_flight, (ctx.time_ns + int(op.value * 1e9), sequence, op, None))
            continue
        invocations += 1
        # Jepsen records nemesis ops as info on both ends.
        event = record("info" if thread == NEMESIS_THREAD else "invoke", op.process, op.f, op.value,
                       ctx.time_ns, extra=op.extra)
        gen_ = gen_.update(ctx, event)
        completion, latency_ns = complete(op)
        heapq.heappush(in_flight, (ctx.time_ns + max(0, latency_ns), sequence, op, completion))
