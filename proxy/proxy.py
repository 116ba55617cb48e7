"""One named proxy: a listener, its upstream address, its toxics and its live connections."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from proxy.address import format_address, resolve_host, resolve_listen, split_address
from proxy.errors import ApiError
from proxy.link import Connection
from proxy.toxics import STREAMS, Toxic


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str, rng: random.Random) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, list[Toxic]] = {stream: [] for stream in STREAMS}
        self._rng = rng
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._connecting: set[asyncio.Task[Any]] = set()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream, "enabled": self.enabled,
                "toxics": [toxic.to_json() for toxic in self.toxic_list()]}

    def toxic_list(self) -> list[Toxic]:
        """Upstream toxics first, then downstream, each in chain order (Toxiproxy's listing)."""
        return [toxic for stream in STREAMS for toxic in self.toxics[stream]]

    def find_toxic(self, name: str) -> Toxic | None:
        return next((toxic for toxic in self.toxic_list() if toxic.name == name), None)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    # ---- listening ----

    async def start(self) -> None:
        if self.enabled:
            return
        host, port = split_address(self.listen, "listen tcp")
        host = resolve_host(host)  # one address: "localhost" would otherwise bind 127.0.0.1 and ::1 apart
        try:
            server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
        except OSError as error:
            # asyncio's message wraps the system's; Toxiproxy shows Go's `listen tcp ADDR: bind: REASON`.
            reason = os.strerror(error.errno) if error.errno else str(error)
            raise ApiError(f"listen tcp {format_address(host, port)}: bind: {reason.lower()}", 500) from None
        sockname = server.sockets[0].getsockname()
        self.listen = format_address(sockname[0], sockname[1])
        self._server = server
        self.enabled = True

    async def stop(self) -> None:
        """Stop listening and drop every connection (Toxiproxy's disable)."""
        if not self.enabled:
            return
        self.enabled = False
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._connecting):
            task.cancel()
        for connection in list(self._connections):
            connection.close()
        if server is not None:
            await server.wait_closed()

    def differs(self, listen: str, upstream: str) -> bool:
        return resolve_listen(listen) != self.listen or upstream != self.upstream

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connecting.add(task)
        try:
            host, port = split_address(self.upstream, "dial tcp")
            server = await asyncio.open_connection(host, port)
        except (OSError, ApiError, asyncio.CancelledError):
            writer.transport.abort()  # as Toxiproxy: the client sees its connection closed
            return
        finally:
            self._connecting.discard(task)
        if not self.enabled:
            writer.transport.abort()
            server[1].transport.abort()
            return
        connection = Connection((reader, writer), server, self.toxics, self._rng, self._connections.discard)
        self._connections.add(connection)
        connection.start()

    # ---- toxics, applied to live connections too ----

    def add_toxic(self, toxic: Toxic) -> None:
        self.toxics[toxic.direction].append(toxic)
        for connection in list(self._connections):
            connection.links[toxic.direction].add(toxic)

    async def update_toxic(self, toxic: Toxic, attributes: dict[str, int], toxicity: float) -> None:
        toxic.attributes = attributes
        toxic.toxicity = toxicity
        await asyncio.gather(*(connection.links[toxic.direction].update(toxic) for connection in list(self._connections)))

    async def remove_toxic(self, toxic: Toxic) -> None:
        self.toxics[toxic.direction].remove(toxic)
        await asyncio.gather(*(connection.links[toxic.direction].remove(toxic) for connection in list(self._connections)))

    async def remove_all_toxics(self) -> None:
        for toxic in self.toxic_list():
            await self.remove_toxic(toxic)
