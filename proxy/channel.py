"""The bounded queues between the stages of one direction of a proxied connection.

A `Channel` has one consumer (a toxic stage or the socket writer) and one producer at a
time. It carries `Chunk`s (bytes read from a socket, with the time they were read) and at
most one `Close` at the end. Two features make live chain changes safe without locks:

- `forward_to`: when a stage leaves the chain, its input channel forwards to its output; a
  producer blocked on (or still holding a reference to) the old channel puts into the new one.
- `sink`: a channel whose consumer has closed swallows whatever arrives, so no producer waits
  forever on a connection that is going away.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    data: bytes
    read_at_s: float  # loop time the proxy read it (latency is measured from here)


@dataclass(frozen=True)
class Close:
    """The end of a direction: a graceful close, or a reset (RST) from reset_peer."""

    reset: bool = False


Item = Chunk | Close


class Channel:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._items: deque[Item] = deque()
        self._getter: asyncio.Future[None] | None = None
        self._putters: deque[asyncio.Future[None]] = deque()
        self.forward_to: Channel | None = None
        self.sink = False

    def resolve(self) -> Channel:
        channel = self
        while channel.forward_to is not None:
            channel = channel.forward_to
        return channel

    async def put(self, item: Item) -> None:
        """Append once there is room (backpressure towards the socket reader)."""
        while True:
            channel = self.resolve()
            if channel.sink:
                return
            if len(channel._items) < channel.capacity:
                channel._append(item)
                return
            waiter = asyncio.get_running_loop().create_future()
            channel._putters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in channel._putters:
                    channel._putters.remove(waiter)

    def has_room(self) -> bool:
        return len(self._items) < self.capacity

    def wait_for_room(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` when an item leaves (or the channel forwards or sinks)."""
        if self.has_room() or self.sink or self.forward_to is not None:
            if not waiter.done():
                waiter.set_result(None)
        else:
            self._putters.append(waiter)

    def put_now(self, item: Item) -> None:
        """Append at once, over capacity if need be: for data a stopping stage hands on."""
        channel = self.resolve()
        if not channel.sink:
            channel._append(item)

    def take(self) -> Item | None:
        """The next item, or None when empty."""
        if not self._items:
            return None
        item = self._items.popleft()
        self._wake_putter()
        return item

    def drain(self) -> list[Item]:
        items = list(self._items)
        self._items.clear()
        self._wake_all_putters()
        return items

    def wait_for_item(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` when an item arrives (the consumer's wake-up)."""
        if self._items:
            if not waiter.done():
                waiter.set_result(None)
        else:
            self._getter = waiter

    def forward(self, target: Channel) -> None:
        """Hand everything queued here to `target`, and every later put too."""
        for item in self.drain():
            target.put_now(item)
        self.forward_to = target
        self._wake_all_putters()

    def make_sink(self) -> None:
        self.sink = True
        self._items.clear()
        self._wake_all_putters()

    def _append(self, item: Item) -> None:
        self._items.append(item)
        getter, self._getter = self._getter, None
        if getter is not None and not getter.done():
            getter.set_result(None)

    def _wake_putter(self) -> None:
        while self._putters:
            waiter = self._putters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_all_putters(self) -> None:
        while self._putters:
            waiter = self._putters.popleft()
            if not waiter.done():
                waiter.set_result(None)
