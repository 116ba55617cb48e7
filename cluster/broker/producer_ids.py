"""Producer id allocation from blocks the controller hands out (KIP-730): ids are unique
across brokers and across restarts of any of them, because the controller records each
block durably before giving it out. A broker takes a new block when its current one is used
up; requests that arrive meanwhile wait for it."""

from __future__ import annotations

from collections.abc import Callable

from cluster.broker.controller_client import ControllerClient, ProducerIdBlock


class ProducerIdAllocator:
    def __init__(self, controller: ControllerClient) -> None:
        self._controller = controller
        self._next = 0
        self._end = 0
        self._waiting: list[Callable[[int | None, str | None], None]] = []

    def allocate(self, done: Callable[[int | None, str | None], None]) -> None:
        """Call `done(producer_id, None)`, now or once a block arrives; `done(None, reason)`
        if the controller cannot be asked."""
        if self._next < self._end and not self._waiting:
            producer_id = self._next
            self._next += 1
            done(producer_id, None)
            return
        self._waiting.append(done)
        if len(self._waiting) == 1:
            self._controller.allocate_producer_ids(self._on_block)

    def _on_block(self, block: ProducerIdBlock | None, error: str | None) -> None:
        waiting, self._waiting = self._waiting, []
        if block is None:
            for done in waiting:
                done(None, error or "no producer id block")
            return
        self._next, self._end = block.first_id, block.first_id + block.count
        for done in waiting:
            self.allocate(done)
