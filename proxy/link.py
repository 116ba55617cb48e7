"""A proxied connection: two links (upstream and downstream), each a chain of toxic stages.

    client --read--> [stage] -> [stage] -> --write--> server      (upstream link)
    client <--write-- [stage] <- [stage] <--read-- server         (downstream link)

When a link's chain ends its stream (the source closed, or a toxic closed it), the link's
writer closes its destination socket outright, as Toxiproxy does: the other link then reads
EOF from that socket and closes the other side in turn, through its own toxics (so a
downstream slow_close delays the client's close). A reset closes both sockets with RST.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from typing import Callable

from proxy.channel import Channel, Chunk, Close, Item
from proxy.stage import Stage
from proxy.toxics import Toxic

READ_SIZE_BYTES = 32 * 1024
WRITER_CHANNEL_CAPACITY = 1


class Link:
    """One direction of a connection: reader -> stages -> writer."""

    def __init__(self, connection: Connection, direction: str, source: asyncio.StreamReader, dest: asyncio.StreamWriter,
                 toxics: list[Toxic], rng: random.Random) -> None:
        self.connection = connection
        self.direction = direction
        self.rng = rng
        self._source = source
        self._dest = dest
        self.tail = Channel(WRITER_CHANNEL_CAPACITY)
        self.head = self.tail  # what the reader writes to
        self.stages: list[Stage] = []
        for toxic in toxics:
            self._append_stage(toxic)
        self.done = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for stage in self.stages:
            stage.start()
        self._tasks = [loop.create_task(self._read(), name=f"read {self.direction}"),
                       loop.create_task(self._write(), name=f"write {self.direction}")]

    # ---- chain changes on a live link ----

    def add(self, toxic: Toxic) -> None:
        """Append a toxic at the end of the chain (data already past it stays unaffected)."""
        if self.done:
            return
        self._append_stage(toxic).start()

    async def update(self, toxic: Toxic) -> None:
        stage = self._find(toxic.name)
        if stage is None or stage.closed:
            return
        await stage.stop()
        stage.start()

    async def remove(self, toxic: Toxic) -> None:
        stage = self._find(toxic.name)
        if stage is None:
            return
        if not stage.closed:
            await stage.stop()
        if stage.closed:
            self.stages.remove(stage)
            return
        if stage.applied and toxic.kind.closes_on_removal:
            stage.close(Close())
            self.stages.remove(stage)
            return
        index = self.stages.index(stage)
        if index == 0:
            self.head = stage.output
        else:
            self.stages[index - 1].output = stage.output
        stage.input.forward(stage.output)  # queued data keeps its place, ahead of later data
        self.stages.remove(stage)

    def cancel(self) -> None:
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        for stage in self.stages:
            stage.cancel()

    def _append_stage(self, toxic: Toxic) -> Stage:
        channel = Channel(toxic.kind.buffer_chunks)
        if self.stages:
            self.stages[-1].output = channel
        else:
            self.head = channel
        stage = Stage(toxic, channel, self.tail, self.rng)
        self.stages.append(stage)
        return stage

    def _find(self, name: str) -> Stage | None:
        return next((stage for stage in self.stages if stage.toxic.name == name), None)

    # ---- the two ends ----

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await self._source.read(READ_SIZE_BYTES)
                if not data:
                    break
                await self.head.put(Chunk(data, loop.time()))
        except (ConnectionError, OSError):
            pass
        await self.head.put(Close())

    async def _write(self) -> None:
        end = Close()
        try:
            while True:
                item = await _take(self.tail)
                if isinstance(item, Close):
                    end = item
                    break
                assert isinstance(item, Chunk)
                self._dest.write(item.data)
                await self._dest.drain()
        except (ConnectionError, OSError):
            pass
        self.tail.make_sink()
        self.done = True
        self.connection.link_finished(self, end)


async def _take(channel: Channel) -> Item:
    loop = asyncio.get_running_loop()
    while True:
        item = channel.take()
        if item is not None:
            return item
        waiter = loop.create_future()
        channel.wait_for_item(waiter)
        await waiter


class Connection:
    """A client connection and its upstream connection, with one link per direction."""

    def __init__(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 toxics: dict[str, list[Toxic]], rng: random.Random, on_closed: Callable[[Connection], None]) -> None:
        self._client_writer = client[1]
        self._server_writer = server[1]
        self._on_closed = on_closed
        self.links = {
            "upstream": Link(self, "upstream", client[0], server[1], toxics["upstream"], rng),
            "downstream": Link(self, "downstream", server[0], client[1], toxics["downstream"], rng),
        }
        self._closed = False

    def start(self) -> None:
        for link in self.links.values():
            link.start()

    def link_finished(self, link: Link, end: Close) -> None:
        if end.reset:
            self.reset()
            return
        dest = self._server_writer if link.direction == "upstream" else self._client_writer
        dest.close()
        if all(other.done for other in self.links.values()):
            self._finish()

    def reset(self) -> None:
        """Close both sockets with RST (SO_LINGER 0), as reset_peer promises."""
        for writer in (self._client_writer, self._server_writer):
            sock = writer.get_extra_info("socket")
            try:
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            writer.transport.abort()
        self._finish()

    def close(self) -> None:
        """Close both sockets now (the proxy is being disabled or deleted)."""
        for writer in (self._client_writer, self._server_writer):
            writer.transport.abort()
        self._finish()

    def _finish(self) -> None:
        if self._closed:
            return
        self._closed = True
        for link in self.links.values():
            link.cancel()
        self._on_closed(self)
