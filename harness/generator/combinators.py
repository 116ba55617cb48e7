"""Jepsen's generator combinators, as immutable Python objects.

Each combinator keeps its state in its fields and returns a new object instead of mutating.
Time is whatever the context says it is, so the same code runs under `simulate()` and the
real run loop. Names and behaviour follow jepsen.generator: `phases` waits for every thread
to be free between phases, `stagger` spaces ops by uniform random gaps in [0, 2·dt) across
all threads it serves, `time_limit` stops asking once its deadline has passed, `each_thread`
gives every thread its own copy, `any` takes whichever child's op is due first.
"""

from __future__ import annotations

from typing import Any as AnyT
from typing import Callable, Iterable, Iterator, Protocol

from harness.generator.core import (
    EMPTY,
    NEMESIS_THREAD,
    PENDING,
    Context,
    Event,
    Generator,
    GeneratorLike,
    Invocation,
    OpResult,
    Thread,
    fill_in,
    lift,
)
from harness.generator.prng import Rand

_NS_PER_S = 1_000_000_000


def _seconds_to_ns(seconds: float, what: str) -> int:
    if seconds < 0:
        raise ValueError(f"{what} must not be negative, got {seconds}")
    return int(round(seconds * _NS_PER_S))


class Seq(Generator):
    """Run each generator until it is exhausted, then the next."""

    __slots__ = ("gens",)

    def __init__(self, *gens: GeneratorLike):
        self.gens = tuple(lift(g) for g in gens)

    def op(self, ctx: Context) -> OpResult:
        gens = self.gens
        while gens:
            result = gens[0].op(ctx)
            if result is None:
                gens = gens[1:]
                continue
            op, nxt = result
            return op, Seq._of((nxt,) + gens[1:])
        return None

    def update(self, ctx: Context, event: Event) -> Generator:
        if not self.gens:
            return self
        return Seq._of((self.gens[0].update(ctx, event),) + self.gens[1:])

    @staticmethod
    def _of(gens: tuple[Generator, ...]) -> "Seq":
        out = Seq.__new__(Seq)
        out.gens = gens
        return out


class Synchronize(Generator):
    """Wait until every thread in the context is free, then behave as `gen`."""

    __slots__ = ("gen",)

    def __init__(self, gen: GeneratorLike):
        self.gen = lift(gen)

    def op(self, ctx: Context) -> OpResult:
        if not ctx.all_free():
            return PENDING, self
        return self.gen.op(ctx)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else Synchronize(nxt)


def Phases(*gens: GeneratorLike) -> Generator:  # noqa: N802 — reads as a combinator
    """Each phase starts only once every operation of the previous one has completed."""
    return Seq(*(Synchronize(g) for g in gens))


class Any(Generator):
    """Whichever child has the soonest op; ties go to the earlier child. Updates reach all."""

    __slots__ = ("gens",)

    def __init__(self, *gens: GeneratorLike):
        self.gens = tuple(lift(g) for g in gens)

    def op(self, ctx: Context) -> OpResult:
        best: tuple[int, Invocation, int, Generator] | None = None
        live: list[Generator] = []
        live_index: dict[int, int] = {}
        pending = False
        for i, gen in enumerate(self.gens):
            result = gen.op(ctx)
            if result is None:
                continue
            live_index[i] = len(live)
            live.append(gen)
            op, nxt = result
            if op is PENDING:
                pending = True
                continue
            assert isinstance(op, Invocation)
            if best is None or op.time_ns < best[0]:
                best = (op.time_ns, op, i, nxt)
        if best is None:
            return (PENDING, Any._of(tuple(live))) if pending else None
        _, op, i, nxt = best
        live[live_index[i]] = nxt
        return op, Any._of(tuple(live))

    def update(self, ctx: Context, event: Event) -> Generator:
        return Any._of(tuple(g.update(ctx, event) for g in self.gens))

    @staticmethod
    def _of(gens: tuple[Generator, ...]) -> "Any":
        out = Any.__new__(Any)
        out.gens = gens
        return out


class Mix(Generator):
    """Each op comes from a child chosen uniformly at random; exhausted children drop out."""

    __slots__ = ("gens", "rand")

    def __init__(self, gens: Iterable[GeneratorLike], rand: Rand):
        self.gens = tuple(lift(g) for g in gens)
        self.rand = rand

    def op(self, ctx: Context) -> OpResult:
        gens, rand = self.gens, self.rand
        while gens:
            i, after = rand.below(len(gens))
            result = gens[i].op(ctx)
            if result is None:
                gens = gens[:i] + gens[i + 1:]
                rand = after
                continue
            op, nxt = result
            if op is PENDING:
                # Keep the draw unspent: asking again must give the same answer.
                return PENDING, Mix._of(gens, rand)
            return op, Mix._of(gens[:i] + (nxt,) + gens[i + 1:], after)
        return None

    def update(self, ctx: Context, event: Event) -> Generator:
        return Mix._of(tuple(g.update(ctx, event) for g in self.gens), self.rand)

    @staticmethod
    def _of(gens: tuple[Generator, ...], rand: Rand) -> "Mix":
        out = Mix.__new__(Mix)
        out.gens, out.rand = gens, rand
        return out


class Limit(Generator):
    """At most `remaining` ops from `gen`."""

    __slots__ = ("remaining", "gen")

    def __init__(self, remaining: int, gen: GeneratorLike):
        if remaining < 0:
            raise ValueError(f"limit must not be negative, got {remaining}")
        self.remaining = remaining
        self.gen = lift(gen)

    def op(self, ctx: Context) -> OpResult:
        if self.remaining <= 0:
            return None
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        if op is PENDING:
            return PENDING, Limit._of(self.remaining, nxt)
        return op, Limit._of(self.remaining - 1, nxt)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else Limit._of(self.remaining, nxt)

    @staticmethod
    def _of(remaining: int, gen: Generator) -> "Limit":
        out = Limit.__new__(Limit)
        out.remaining, out.gen = remaining, gen
        return out


def once(gen: GeneratorLike) -> Generator:
    return Limit(1, gen)


class Repeat(Generator):
    """Ask the original generator again for every op (Jepsen's `repeat`): a fixed op
    repeats verbatim. `times` None repeats forever."""

    __slots__ = ("gen", "times")

    def __init__(self, gen: GeneratorLike, times: int | None = None):
        if times is not None and times < 0:
            raise ValueError(f"times must not be negative, got {times}")
        self.gen = lift(gen)
        self.times = times

    def op(self, ctx: Context) -> OpResult:
        if self.times == 0:
            return None
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, _ = result
        if op is PENDING:
            return PENDING, self
        return op, Repeat._of(self.gen, None if self.times is None else self.times - 1)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else Repeat._of(nxt, self.times)

    @staticmethod
    def _of(gen: Generator, times: int | None) -> "Repeat":
        out = Repeat.__new__(Repeat)
        out.gen, out.times = gen, times
        return out


class Cycle(Generator):
    """Run `gen` to exhaustion, then start it again from the beginning."""

    __slots__ = ("original", "current", "times", "emitted")

    def __init__(self, gen: GeneratorLike, times: int | None = None):
        self.original = lift(gen)
        self.current = self.original
        self.times = times
        self.emitted = False

    def op(self, ctx: Context) -> OpResult:
        current, times, emitted = self.current, self.times, self.emitted
        while times is None or times > 0:
            result = current.op(ctx)
            if result is not None:
                op, nxt = result
                if op is PENDING:
                    return PENDING, self._with(current, times, emitted)
                return op, self._with(nxt, times, True)
            if not emitted:
                return None  # an empty cycle would spin forever
            current, emitted = self.original, False
            times = None if times is None else times - 1
        return None

    def update(self, ctx: Context, event: Event) -> Generator:
        return self._with(self.current.update(ctx, event), self.times, self.emitted)

    def _with(self, current: Generator, times: int | None, emitted: bool) -> "Cycle":
        out = Cycle.__new__(Cycle)
        out.original, out.current, out.times, out.emitted = self.original, current, times, emitted
        return out


class FlipFlop(Generator):
    """Alternate: an op from `a`, then from `b`, then `a`... ; ends when the due one ends."""

    __slots__ = ("gens", "turn")

    def __init__(self, a: GeneratorLike, b: GeneratorLike, turn: int = 0):
        self.gens = (lift(a), lift(b))
        self.turn = turn

    def op(self, ctx: Context) -> OpResult:
        result = self.gens[self.turn].op(ctx)
        if result is None:
            return None
        op, nxt = result
        gens = list(self.gens)
        gens[self.turn] = nxt
        if op is PENDING:
            return PENDING, FlipFlop(gens[0], gens[1], self.turn)
        return op, FlipFlop(gens[0], gens[1], 1 - self.turn)

    def update(self, ctx: Context, event: Event) -> Generator:
        return FlipFlop(self.gens[0].update(ctx, event), self.gens[1].update(ctx, event), self.turn)


class TimeLimit(Generator):
    """Emit ops from `gen` only until `limit_s` after the first time this is asked."""

    __slots__ = ("limit_ns", "deadline_ns", "gen")

    def __init__(self, limit_s: float, gen: GeneratorLike, *, _deadline_ns: int | None = None):
        self.limit_ns = _seconds_to_ns(limit_s, "time limit")
        self.deadline_ns = _deadline_ns
        self.gen = lift(gen)

    def op(self, ctx: Context) -> OpResult:
        deadline = self.deadline_ns if self.deadline_ns is not None else ctx.time_ns + self.limit_ns
        if ctx.time_ns >= deadline:
            return None
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        if op is not PENDING and op.time_ns >= deadline:
            return None
        return op, self._with(nxt, deadline)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else self._with(nxt, self.deadline_ns)

    def _with(self, gen: Generator, deadline_ns: int | None) -> "TimeLimit":
        out = TimeLimit.__new__(TimeLimit)
        out.limit_ns, out.deadline_ns, out.gen = self.limit_ns, deadline_ns, gen
        return out


class Stagger(Generator):
    """Space ops by uniform random gaps in [0, 2·dt): on average 1/dt ops per second across
    every thread this generator serves (so `rate` is a global target, as in Jepsen)."""

    __slots__ = ("span_ns", "gen", "rand", "next_ns")

    def __init__(self, dt_s: float, gen: GeneratorLike, rand: Rand, *, _next_ns: int | None = None):
        self.span_ns = 2 * _seconds_to_ns(dt_s, "stagger interval")
        self.gen = lift(gen)
        self.rand = rand
        self.next_ns = _next_ns

    def op(self, ctx: Context) -> OpResult:
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        if op is PENDING:
            return PENDING, self._with(nxt, self.rand, self.next_ns)
        due = self.next_ns if self.next_ns is not None else ctx.time_ns
        if op.time_ns < due:
            op = op.at_time(op.process, due)
        gap, rand = self.rand.below(self.span_ns) if self.span_ns > 0 else (0, self.rand)
        return op, self._with(nxt, rand, op.time_ns + gap)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else self._with(nxt, self.rand, self.next_ns)

    def _with(self, gen: Generator, rand: Rand, next_ns: int | None) -> "Stagger":
        out = Stagger.__new__(Stagger)
        out.span_ns, out.gen, out.rand, out.next_ns = self.span_ns, gen, rand, next_ns
        return out


class Delay(Generator):
    """Space ops exactly dt apart (a fixed rate of 1/dt)."""

    __slots__ = ("dt_ns", "gen", "next_ns")

    def __init__(self, dt_s: float, gen: GeneratorLike, *, _next_ns: int | None = None):
        self.dt_ns = _seconds_to_ns(dt_s, "delay")
        self.gen = lift(gen)
        self.next_ns = _next_ns

    def op(self, ctx: Context) -> OpResult:
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        if op is PENDING:
            return PENDING, self._with(nxt, self.next_ns)
        due = self.next_ns if self.next_ns is not None else ctx.time_ns
        if op.time_ns < due:
            op = op.at_time(op.process, due)
        return op, self._with(nxt, op.time_ns + self.dt_ns)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else self._with(nxt, self.next_ns)

    def _with(self, gen: Generator, next_ns: int | None) -> "Delay":
        out = Delay.__new__(Delay)
        out.dt_ns, out.gen, out.next_ns = self.dt_ns, gen, next_ns
        return out


def Sleep(dt_s: float) -> Generator:  # noqa: N802
    """Occupy one thread for dt_s (inside `phases`, this pauses the whole test)."""
    return lift(Invocation(f="sleep", value=_seconds_to_ns(dt_s, "sleep") / _NS_PER_S, kind="sleep"))


def Log(message: str) -> Generator:  # noqa: N802
    """Write a line to the run log when reached."""
    return lift(Invocation(f="log", value=str(message), kind="log"))


class OnThreads(Generator):
    """Route `gen` to the threads `keep` accepts; it sees only their updates."""

    __slots__ = ("keep", "gen")

    def __init__(self, keep: Callable[[Thread], bool], gen: GeneratorLike):
        self.keep = keep
        self.gen = lift(gen)

    def op(self, ctx: Context) -> OpResult:
        result = self.gen.op(ctx.restrict(self.keep))
        if result is None:
            return None
        op, nxt = result
        return op, OnThreads._of(self.keep, nxt)

    def update(self, ctx: Context, event: Event) -> Generator:
        if not self.keep(ctx.thread_of(event.process)):
            return self
        nxt = self.gen.update(ctx.restrict(self.keep), event)
        return self if nxt is self.gen else OnThreads._of(self.keep, nxt)

    @staticmethod
    def _of(keep: Callable[[Thread], bool], gen: Generator) -> "OnThreads":
        out = OnThreads.__new__(OnThreads)
        out.keep, out.gen = keep, gen
        return out


def _is_client_thread(thread: Thread) -> bool:
    return thread != NEMESIS_THREAD


def _is_nemesis_thread(thread: Thread) -> bool:
    return thread == NEMESIS_THREAD


def clients(gen: GeneratorLike) -> Generator:
    return OnThreads(_is_client_thread, gen)


def nemesis(gen: GeneratorLike) -> Generator:
    return OnThreads(_is_nemesis_thread, gen)


def with_nemesis(nemesis_gen: GeneratorLike, client_gen: GeneratorLike) -> Generator:
    """Client ops to the client threads and fault ops to the nemesis, at the same time."""
    return Any(nemesis(nemesis_gen), clients(client_gen))


class EachThread(Generator):
    """Every thread gets its own generator, made by `factory(thread)`; each sees only its
    own thread's updates. Exhausted once every thread's generator is."""

    __slots__ = ("factory", "gens", "turn")

    def __init__(self, factory: Callable[[Thread], GeneratorLike], *, _gens: dict | None = None, _turn: int = 0):
        self.factory = factory
        self.gens: dict[Thread, Generator | None] = _gens if _gens is not None else {}
        # Threads are asked round-robin from `turn`, and the first op already due wins: no
        # other thread can offer an earlier due time that matters, and asking every thread
        # for every op made the harness's cost grow with concurrency.
        self.turn = _turn

    def op(self, ctx: Context) -> OpResult:
        best: tuple[int, Invocation, Thread, Generator] | None = None
        gens = self.gens
        copied = False
        free = ctx.free_threads()
        if free:
            start = self.turn % len(free)
            free = free[start:] + free[:start]
        for thread in free:
            if thread in gens:
                gen = gens[thread]
                if gen is None:
                    continue
            else:
                gen = lift(self.factory(thread))
                if not copied:
                    gens, copied = dict(gens), True
                gens[thread] = gen
            result = gen.op(ctx.only(thread))
            if result is None:
                if not copied:
                    gens, copied = dict(gens), True
                gens[thread] = None
                continue
            op, nxt = result
            if op is PENDING:
                continue
            if best is None or op.time_ns < best[0]:
                best = (op.time_ns, op, thread, nxt)
                if op.time_ns <= ctx.time_ns:
                    break
        if best is None:
            if all(gens.get(t, EMPTY) is None for t in ctx.threads):
                return None
            return PENDING, EachThread(self.factory, _gens=gens, _turn=self.turn)
        _, op, thread, nxt = best
        gens = dict(gens)
        gens[thread] = nxt
        return op, EachThread(self.factory, _gens=gens, _turn=self.turn + 1)

    def update(self, ctx: Context, event: Event) -> Generator:
        thread = ctx.thread_of(event.process)
        if thread not in ctx.threads:
            return self
        gen = self.gens[thread] if thread in self.gens else lift(self.factory(thread))
        if gen is None:
            return self
        nxt = gen.update(ctx.only(thread), event)
        if nxt is gen and thread in self.gens:
            return self
        gens = dict(self.gens)
        gens[thread] = nxt
        return EachThread(self.factory, _gens=gens, _turn=self.turn)


class Map(Generator):
    """Transform every op `gen` emits."""

    __slots__ = ("fn", "gen")

    def __init__(self, fn: Callable[[Invocation], Invocation], gen: GeneratorLike):
        self.fn = fn
        self.gen = lift(gen)

    def op(self, ctx: Context) -> OpResult:
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        return (op if op is PENDING else self.fn(op)), Map(self.fn, nxt)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else Map(self.fn, nxt)


class _StreamSource:
    """A Python iterator of ops, materialised lazily and remembered, so that positions in it
    are values: asking position n twice gives the same op."""

    __slots__ = ("iterator", "items", "done")

    def __init__(self, iterator: Iterator[AnyT]):
        self.iterator = iterator
        self.items: list[AnyT] = []
        self.done = False

    def get(self, index: int) -> AnyT | None:
        while len(self.items) <= index and not self.done:
            try:
                self.items.append(next(self.iterator))
            except StopIteration:
                self.done = True
        return self.items[index] if index < len(self.items) else None


class Stream(Generator):
    """Ops from a Python iterator (a seeded workload written as plain code), in order.

    Each item is an Invocation or a dict of its fields. The iterator runs ahead only as far
    as ops are asked for, and an op asked for twice is the same op."""

    __slots__ = ("source", "index")

    def __init__(self, items: Iterable[AnyT], *, _index: int = 0, _source: _StreamSource | None = None):
        self.source = _source if _source is not None else _StreamSource(iter(items))
        self.index = _index

    def op(self, ctx: Context) -> OpResult:
        item = self.source.get(self.index)
        if item is None:
            return None
        invocation = item if isinstance(item, Invocation) else Invocation(**item)
        filled = fill_in(invocation, ctx)
        if filled is PENDING:
            return PENDING, self
        return filled, Stream((), _index=self.index + 1, _source=self.source)


class Observer(Protocol):
    def observe(self, event: Event) -> None: ...


class Observe(Generator):
    """Feed every event `gen` sees to a mutable observer (Jepsen's atoms, e.g. the highest
    offset written per key). Updates are never speculative, so the observer's state is a
    function of the history so far and generators that read it stay deterministic."""

    __slots__ = ("observer", "gen")

    def __init__(self, observer: Observer, gen: GeneratorLike):
        self.observer = observer
        self.gen = lift(gen)

    def op(self, ctx: Context) -> OpResult:
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        return op, Observe(self.observer, nxt)

    def update(self, ctx: Context, event: Event) -> Generator:
        self.observer.observe(event)
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else Observe(self.observer, nxt)
