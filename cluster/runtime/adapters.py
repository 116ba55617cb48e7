"""Real implementations of the broker core's injected clock and scheduler."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class SystemClock:
    """Monotonic time for timers; wall time where Kafka uses wall-clock time, so that a
    per-process skew (libfaketime with DONT_FAKE_MONOTONIC=1) reaches exactly that."""

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class AsyncioScheduler:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return self._loop.call_later(max(delay_ms, 0.0) / 1000.0, callback)
