"""One toxic at work on one direction of one connection.

A `Stage` reads its input channel and writes its output channel, running its toxic's `pipe`
coroutine (or a plain pass-through when the toxicity draw says the toxic does not apply to
this connection). To change the chain of a live connection, a stage is *interrupted*: its
pipe stops at the next wait (a read, a sleep, or a write that has no room), hands on any data
it holds so that none is lost, and returns; the stage can then start again with new
attributes or leave the chain. This mirrors how Toxiproxy swaps toxics on live links.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Awaitable, Callable

from proxy.channel import Channel, Chunk, Close, Item

if TYPE_CHECKING:
    from proxy.toxics import Toxic


class Interrupted(Exception):
    """Raised inside a pipe when the chain is being changed; the pipe must hand on what it holds."""


class Stage:
    def __init__(self, toxic: Toxic, input: Channel, output: Channel, rng: random.Random) -> None:
        self.toxic = toxic
        self.input = input
        self.output = output
        self.rng = rng
        self.applied = False  # the toxicity draw for this connection
        self.closed = False
        self.state: dict[str, int] = {}  # per-connection state that survives updates (limit_data)
        self._interrupted = False
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- lifecycle (called by the link) ----

    def start(self) -> None:
        """Run the toxic, drawing anew whether it applies (Toxiproxy draws at every (re)start)."""
        if self.closed:
            return
        self._interrupted = False
        self.applied = self.rng.random() < self.toxic.toxicity
        pipe: Callable[[Stage], Awaitable[None]] = self.toxic.kind.pipe if self.applied else pass_through
        self._task = asyncio.get_running_loop().create_task(self._run(pipe), name=f"toxic {self.toxic.name}")

    async def stop(self) -> None:
        """Interrupt the pipe and wait until it has handed on what it held."""
        task = self._task
        if task is None or task.done():
            return
        self._interrupted = True
        self._wake_up()
        # asyncio.wait, not await: a stage cancelled meanwhile (its connection closed) is as good
        # as stopped, and must not cancel the API request waiting here.
        await asyncio.wait([task])

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _run(self, pipe: Callable[[Stage], Awaitable[None]]) -> None:
        try:
            await pipe(self)
        except Interrupted:
            pass

    # ---- what pipes use ----

    async def recv(self, timeout_s: float | None = None) -> Item | None:
        """The next chunk or close; None if `timeout_s` passed first. Raises Interrupted."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            if self._interrupted:
                raise Interrupted
            item = self.input.take()
            if item is not None:
                return item
            if deadline is not None and loop.time() >= deadline:
                return None
            waiter = loop.create_future()
            self.input.wait_for_item(waiter)
            await self._wait(waiter, deadline)

    async def sleep(self, delay_s: float) -> None:
        """Sleep, unless interrupted first (raises Interrupted)."""
        if self._interrupted:
            raise Interrupted
        if delay_s <= 0:
            return
        loop = asyncio.get_running_loop()
        await self._wait(loop.create_future(), loop.time() + delay_s)
        if self._interrupted:
            raise Interrupted

    async def send(self, item: Item) -> None:
        """Write to the output, waiting for room; if interrupted meanwhile, hand the item on and raise."""
        loop = asyncio.get_running_loop()
        while True:
            channel = self.output.resolve()
            if channel.sink or channel.has_room():
                channel.put_now(item)
                return
            if self._interrupted:
                channel.put_now(item)
                raise Interrupted
            waiter = loop.create_future()
            channel.wait_for_room(waiter)
            await self._wait(waiter, None)

    def hand_on(self, item: Item) -> None:
        """Pass data on at once (an interrupted pipe never drops what it holds)."""
        self.output.put_now(item)

    def close(self, item: Close) -> None:
        """End this direction: send the close on and swallow whatever still arrives."""
        self.closed = True
        self.output.put_now(item)
        self.input.make_sink()

    # ---- internals ----

    async def _wait(self, waiter: asyncio.Future[None], deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        timer = loop.call_at(deadline, _resolve, waiter) if deadline is not None else None
        self._wake = waiter
        try:
            await waiter
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()

    def _wake_up(self) -> None:
        if self._wake is not None:
            _resolve(self._wake)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def pass_through(stage: Stage) -> None:
    """A toxic that does nothing (Toxiproxy's noop, and any toxic the toxicity draw skipped)."""
    while True:
        item = await stage.recv()
        if isinstance(item, Close):
            stage.close(item)
            return
        if isinstance(item, Chunk):
            await stage.send(item)
