"""The generator protocol and the data it trades in: invocations, completions, contexts."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Literal, Mapping, Union

Thread = Union[int, str]  # client threads are 0..concurrency-1; the nemesis thread is "nemesis"
NEMESIS_THREAD = "nemesis"

# Internal ops are handled by the run loop and never reach a client or the history.
OpKind = Literal["client", "sleep", "log"]


@dataclass(frozen=True, slots=True)
class Invocation:
    """An operation a generator wants performed.

    `process` and `time_ns` may be left None: the generator layer fills them in with a free
    process and the current time. `extra` rides along into the history (e.g. `poll_ms`).
    """

    f: str
    value: Any = None
    process: int | str | None = None
    time_ns: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    kind: OpKind = "client"

    def with_(self, **changes: Any) -> "Invocation":
        return replace(self, **changes)

    def at_time(self, process: int | str, time_ns: int) -> "Invocation":
        # The hot path of fill_in: a direct constructor call is several times cheaper than replace().
        return Invocation(self.f, self.value, process, time_ns, self.extra, self.kind)


@dataclass(frozen=True, slots=True)
class Completion:
    """What a client (or nemesis) reports for one invocation.

    type: ok (took effect), fail (did not), info (unknown: the process is retired).
    end_process: retire the process even on ok/fail (Jepsen's :end-process?), e.g. after a
    fenced producer, whose client can never be used again.
    """

    type: Literal["ok", "fail", "info"]
    value: Any = None
    error: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    end_process: bool = False

    def __post_init__(self) -> None:
        if self.type not in ("ok", "fail", "info"):
            raise ValueError(f"completion type {self.type!r} is not one of ok, fail, info")

    @property
    def retires_process(self) -> bool:
        return self.type == "info" or self.end_process


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()


_RESTRICTED: dict[tuple, tuple] = {}


class Context:
    """What a generator may know about the world when asked for an op. Immutable.

    time_ns: nanoseconds since the run started (simulated or real).
    threads: every thread the generator may use, in scheduling order.
    free: the threads with no operation in flight.
    processes: thread -> its current process id (a thread's process changes when one of
    its ops completes as info).
    concurrency: the number of client threads (process p runs on thread p % concurrency).

    A plain slotted class rather than a dataclass: contexts are rebuilt several times per
    operation, and `dataclasses.replace` dominated the harness's CPU cost per op.
    """

    __slots__ = ("time_ns", "threads", "free", "processes", "concurrency")

    def __init__(self, time_ns: int, threads: tuple[Thread, ...], free: frozenset[Thread],
                 processes: Mapping[Thread, int | str], concurrency: int):
        self.time_ns = time_ns
        self.threads = threads
        self.free = free
        self.processes = processes
        self.concurrency = concurrency

    def __repr__(self) -> str:
        return (f"Context(time_ns={self.time_ns}, threads={self.threads}, free={sorted(map(str, self.free))}, "
                f"processes={dict(self.processes)})")

    @classmethod
    def initial(cls, concurrency: int, *, with_nemesis: bool = True) -> "Context":
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        threads: tuple[Thread, ...] = tuple(range(concurrency))
        if with_nemesis:
            threads += (NEMESIS_THREAD,)
        return cls(0, threads, frozenset(threads), {t: t for t in threads}, concurrency)

    def thread_of(self, process: int | str) -> Thread:
        if process == NEMESIS_THREAD:
            return NEMESIS_THREAD
        if not isinstance(process, int):
            raise ValueError(f"process {process!r} is neither an int nor {NEMESIS_THREAD!r}")
        return process % self.concurrency

    def free_threads(self) -> list[Thread]:
        free = self.free
        return [t for t in self.threads if t in free]

    def all_free(self) -> bool:
        free = self.free
        return all(t in free for t in self.threads)

    def restrict(self, keep: Callable[[Thread], bool]) -> "Context":
        key = (keep, self.threads)
        threads = _RESTRICTED.get(key)
        if threads is None:
            threads = tuple(t for t in self.threads if keep(t))
            if len(_RESTRICTED) < 1024:  # a handful of (filter, thread set) pairs per run
                _RESTRICTED[key] = threads
        return Context(self.time_ns, threads, self.free.intersection(threads), self.processes, self.concurrency)

    def only(self, thread: Thread) -> "Context":
        """The context as one thread sees it."""
        free = self.free if thread in self.free else frozenset()
        return Context(self.time_ns, (thread,), free, self.processes, self.concurrency)

    def at(self, time_ns: int) -> "Context":
        return Context(time_ns, self.threads, self.free, self.processes, self.concurrency)

    def busy(self, thread: Thread) -> "Context":
        return Context(self.time_ns, self.threads, self.free - {thread}, self.processes, self.concurrency)

    def freed(self, thread: Thread) -> "Context":
        return Context(self.time_ns, self.threads, self.free | {thread}, self.processes, self.concurrency)

    def retire(self, thread: Thread) -> "Context":
        """The thread's process crashed: the thread continues as a fresh process."""
        if thread == NEMESIS_THREAD:
            return self
        processes = dict(self.processes)
        processes[thread] = int(processes[thread]) + self.concurrency
        return Context(self.time_ns, self.threads, self.free, processes, self.concurrency)


OpResult = Union[tuple[Union[Invocation, _Pending], "Generator"], None]


class Generator:
    """Base class. Subclasses are immutable: `op` and `update` return new generators."""

    def op(self, ctx: Context) -> OpResult:
        raise TypeError(f"{type(self).__name__} does not implement op()")

    def update(self, ctx: Context, event: "Event") -> "Generator":
        return self


@dataclass(frozen=True, slots=True)
class Event:
    """An invocation or completion as generators see it (history ops without the index)."""

    type: Literal["invoke", "ok", "fail", "info"]
    process: int | str
    f: str
    value: Any
    time_ns: int
    error: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def fill_in(invocation: Invocation, ctx: Context) -> Invocation | _Pending:
    """Give an invocation a free process and a time, or say it must wait."""
    process = invocation.process
    if process is None:
        free = ctx.free_threads()
        if not free:
            return PENDING
        process = ctx.processes[free[0]]
    else:
        thread = ctx.thread_of(process)
        # A named process runs only on its own free thread, and only while it is that
        # thread's current process (a retired process never runs again).
        if thread not in ctx.free or ctx.processes.get(thread) != process:
            return PENDING
    time_ns = invocation.time_ns if invocation.time_ns is not None else ctx.time_ns
    if process == invocation.process and time_ns == invocation.time_ns:
        return invocation
    return invocation.at_time(process, time_ns)


class _Empty(Generator):
    def op(self, ctx: Context) -> OpResult:
        return None

    def __repr__(self) -> str:
        return "Empty"


EMPTY = _Empty()


class _Once(Generator):
    __slots__ = ("invocation",)

    def __init__(self, invocation: Invocation):
        self.invocation = invocation

    def op(self, ctx: Context) -> OpResult:
        filled = fill_in(self.invocation, ctx)
        if filled is PENDING:
            return PENDING, self
        return filled, EMPTY

    def __repr__(self) -> str:
        return f"Once({self.invocation!r})"


GeneratorLike = Union[Generator, Invocation, Mapping[str, Any], Iterable[Any], None]


def lift(source: GeneratorLike) -> Generator:
    """Turn the shorthand forms into generators.

    An Invocation (or a dict of its fields) is emitted once; a list or tuple runs each
    element in turn; None is the empty generator.
    """
    if source is None:
        return EMPTY
    if isinstance(source, Generator):
        return source
    if isinstance(source, Invocation):
        return _Once(source)
    if isinstance(source, Mapping):
        if "f" not in source:
            raise ValueError(f"an op needs an 'f': {dict(source)!r}")
        return _Once(Invocation(**source))
    if isinstance(source, (list, tuple)):
        from harness.generator.combinators import Seq

        return Seq(*source)
    raise TypeError(f"cannot make a generator from {type(source).__name__}: {source!r}")
