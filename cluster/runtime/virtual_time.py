"""Virtual time for driving the broker core deterministically: a clock that only moves when
told to, and a scheduler whose timers fire, in deadline order, as the clock is advanced.

This is the injected interface the sans-I/O core is written against, used by the core's
unit tests now and by the deterministic simulator later.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
import itertools
from collections.abc import Callable


class VirtualClock:
    def __init__(self, monotonic_ns: int = 0, wall_ms: int = 1_700_000_000_000) -> None:
        self._monotonic_ns = monotonic_ns
        # Wall time may be skewed independently of monotonic time (clock faults).
        self.wall_offset_ms = wall_ms - monotonic_ns // 1_000_000

    def monotonic_ns(self) -> int:
        return self._monotonic_ns

    def wall_ms(self) -> int:
        return self._monotonic_ns // 1_000_000 + self.wall_offset_ms

    def _advance_to(self, monotonic_ns: int) -> None:
        if monotonic_ns < self._monotonic_ns:
            raise ValueError(f"virtual time cannot go backwards ({monotonic_ns} < {self._monotonic_ns})")
        self._monotonic_ns = monotonic_ns


class NodeClock:
    """One node's view of a shared VirtualClock: the same monotonic time (timers stay in step
    across nodes) and a wall clock that a clock fault can move on this node alone, as
    libfaketime does to one broker process."""

    def __init__(self, shared: VirtualClock) -> None:
        self.shared = shared
        self.skew_ms = 0

    def monotonic_ns(self) -> int:
        return self.shared.monotonic_ns()

    def wall_ms(self) -> int:
        return self.shared.wall_ms() + self.skew_ms


def _cancelled() -> None:
    pass


# A heap is purged of cancelled timers when they are more than this many and most of it.
PURGE_MIN_CANCELLED = 512


class VirtualTimer:
    """A pending callback at `deadline_ns`; timers due at one instant fire in `sequence` order."""

    __slots__ = ("deadline_ns", "sequence", "callback", "cancelled", "_scheduler")

    def __init__(self, deadline_ns: int, sequence: int, callback: Callable[[], None],
                 scheduler: VirtualScheduler | None = None) -> None:
        self.deadline_ns = deadline_ns
        self.sequence = sequence
        self.callback = callback
        self.cancelled = False
        self._scheduler = scheduler  # while it waits in that scheduler's heap

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        # A cancelled timer stays in the heap until its deadline (or a purge); its callback is
        # let go now. Callbacks often reach their own timer (a request's timeout closes over
        # the request, which holds the timer): holding on would leave a reference cycle for
        # the garbage collector to find, and keep what the callback reaches alive.
        self.callback = _cancelled
        if self._scheduler is not None:
            self._scheduler._timer_cancelled()

    def __repr__(self) -> str:
        state = " cancelled" if self.cancelled else ""
        return f"VirtualTimer(deadline_ns={self.deadline_ns}, sequence={self.sequence}{state})"


class VirtualScheduler:
    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        # Heap entries are (deadline_ns, sequence, timer): the same order as the timers' own,
        # compared by C tuple comparison instead of a Python __lt__ (the simulation pushes
        # and pops one per message and timer; a dataclass's __lt__ was ~7 % of a simulated
        # run's CPU).
        self._timers: list[tuple[int, int, VirtualTimer]] = []
        self._next_sequence = itertools.count().__next__
        self._cancelled_in_heap = 0

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> VirtualTimer:
        deadline = self.clock._monotonic_ns + int(max(delay_ms, 0.0) * 1_000_000)
        sequence = self._next_sequence()
        timer = VirtualTimer(deadline, sequence, callback, self)
        heappush(self._timers, (deadline, sequence, timer))
        return timer

    def call_at_ns(self, deadline_ns: int, callback: Callable[[], None]) -> VirtualTimer:
        """A timer at an absolute monotonic time (never in the past: at least now)."""
        now_ns = self.clock._monotonic_ns
        if deadline_ns < now_ns:
            deadline_ns = now_ns
        sequence = self._next_sequence()
        timer = VirtualTimer(deadline_ns, sequence, callback, self)
        heappush(self._timers, (deadline_ns, sequence, timer))
        return timer

    def _timer_cancelled(self) -> None:
        """Most timers are cancelled (asyncio clients' timeouts, answered requests'), and each
        waited in the heap until its deadline: a simulated run's heap held ~10 cancelled
        entries per live one, and every push and pop paid for its depth. When cancelled
        entries are most of a large heap, they go. The firing order is the entries' own
        (deadline, sequence), unique, so the heap's layout does not change it."""
        self._cancelled_in_heap += 1
        if self._cancelled_in_heap > PURGE_MIN_CANCELLED and 2 * self._cancelled_in_heap > len(self._timers):
            self._timers[:] = [entry for entry in self._timers if not entry[2].cancelled]
            heapify(self._timers)
            self._cancelled_in_heap = 0

    def step(self) -> bool:
        """Fire the earliest pending timer, moving the clock to its deadline; False when no
        timer is pending. Lets another driver (the simulator's asyncio loop) interleave its
        own work between events on the same timeline."""
        timers = self._timers
        while timers:
            timer = heappop(timers)[2]
            timer._scheduler = None  # out of the heap: a later cancel is not counted
            if timer.cancelled:
                self._cancelled_in_heap -= 1
                continue
            self.clock._advance_to(timer.deadline_ns)
            timer.callback()
            return True
        return False

    @property
    def pending(self) -> int:
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    def advance(self, delta_ms: float) -> int:
        """Move time forward by `delta_ms`, firing every timer that comes due on the way (at
        its own deadline, so callbacks see the time they were scheduled for). Returns how
        many fired."""
        target = self.clock.monotonic_ns() + int(delta_ms * 1_000_000)
        fired = 0
        while self._timers and self._timers[0][0] <= target:
            timer = heappop(self._timers)[2]
            timer._scheduler = None
            if timer.cancelled:
                self._cancelled_in_heap -= 1
                continue
            self.clock._advance_to(timer.deadline_ns)
            timer.callback()
            fired += 1
        self.clock._advance_to(target)
        return fired
