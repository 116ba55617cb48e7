"""Deferred wake-ups of parked fetches: run once the current request (or fetch response) is
fully handled, so a request that appends to several partitions, or moves several HWMs,
re-checks each parked fetch once and answers it with all of it. Outside a request they run
on the next scheduler turn. Sans-I/O: time comes through the Scheduler."""

from __future__ import annotations

from collections.abc import Callable

from cluster.broker.env import Scheduler, TimerHandle


class DeferredWakeups:
    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._pending: list[Callable[[], None]] = []
        self._depth = 0  # requests being handled (nested: a handler may complete another)
        self._timer: TimerHandle | None = None

    def defer(self, callback: Callable[[], None]) -> None:
        self._pending.append(callback)
        if self._depth == 0 and self._timer is None:
            self._timer = self._scheduler.call_later(0, self._on_timer)

    def __enter__(self) -> DeferredWakeups:
        self._depth += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.run()

    def _on_timer(self) -> None:
        self._timer = None
        self.run()

    def run(self) -> None:
        """Run what is deferred, including what those callbacks defer in turn."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._depth += 1  # wake-ups that completions cause join this drain
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                for callback in batch:
                    callback()
        finally:
            self._depth -= 1
