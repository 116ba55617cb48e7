"""Running the API server and its proxies: on the caller's event loop, or in a thread.

`serve()` is the coroutine `logquake proxy` runs until a signal; `ProxyServer` runs the same
on an event loop in a daemon thread so synchronous code (the harness, tests) can start it,
point toxiproxy-python at `server.port`, and stop it, every listener and connection with it:

    with ProxyServer(port=0, seed=7) as server:
        Toxiproxy().update_api_consumer(server.host, server.port)
        ...
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from proxy.api import Api
from proxy.errors import ApiError
from proxy.http import serve_connection
from proxy.registry import Registry

DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8474  # Toxiproxy's
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class ProxyServerError(Exception):
    """The server could not start (its address is taken, a populate file is invalid, ...)."""


def new_seed() -> int:
    return random.SystemRandom().randrange(2**63)


@dataclass
class RunningApi:
    registry: Registry
    host: str
    port: int
    seed: int
    _server: asyncio.Server
    _connections: set[asyncio.Task[Any]] = field(default_factory=set)

    async def close(self) -> None:
        self._server.close()
        requests = list(self._connections)
        for task in requests:
            task.cancel()
        await asyncio.gather(*requests, return_exceptions=True)
        await self.registry.close()
        await self._server.wait_closed()


async def start_api(host: str, port: int, seed: int, populate: list[Any] | None = None) -> RunningApi:
    registry = Registry(random.Random(seed))
    api = Api(registry)
    connections: set[asyncio.Task[Any]] = set()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            await serve_connection(reader, writer, api.handle)
        finally:
            connections.discard(task)

    try:
        server = await asyncio.start_server(on_connection, host, port, reuse_address=True)
    except OSError as error:
        raise ProxyServerError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    bound_host, bound_port = server.sockets[0].getsockname()[:2]
    running = RunningApi(registry, bound_host, bound_port, seed, server, connections)
    if populate is not None:
        try:
            async with registry.lock:
                _, error = await registry.populate(populate)
        except ApiError as invalid:
            error = invalid
        if error is not None:
            await running.close()
            raise ProxyServerError(f"cannot create the proxies: {error.message}")
    return running


async def serve(host: str, port: int, seed: int, stop: asyncio.Event, populate: list[Any] | None = None,
                on_ready: Callable[[RunningApi], None] | None = None) -> None:
    """Serve until `stop` is set, then close every listener and connection."""
    running = await start_api(host, port, seed, populate)
    try:
        if on_ready is not None:
            on_ready(running)
        await stop.wait()
    finally:
        await running.close()


class ProxyServer:
    """The API server and its proxies on their own event loop thread; a context manager."""

    def __init__(self, host: str = DEFAULT_API_HOST, port: int = DEFAULT_API_PORT, seed: int | None = None,
                 populate: list[Any] | None = None) -> None:
        self.host = host
        self.port = port  # the bound port once started (useful with port 0)
        self.seed = new_seed() if seed is None else seed
        self._populate = populate
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.registry: Registry | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ProxyServer:
        if self._thread is not None:
            raise ProxyServerError("already started")
        self._thread = threading.Thread(target=self._run, name=f"toxiproxy-api-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise ProxyServerError(f"the proxy server did not start within {START_TIMEOUT_S:.0f} s")
        if self._error is not None:
            self._thread.join(STOP_TIMEOUT_S)
            self._thread = None
            raise ProxyServerError(str(self._error)) from self._error
        return self

    def stop(self) -> None:
        """Close the API, every proxy's listener and every connection; wait for the thread."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already ended
                pass
        thread.join(STOP_TIMEOUT_S)
        self._thread = None

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to start(), or lost after a clean start
            self._error = self._error or error
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def ready(running: RunningApi) -> None:
            self.host, self.port, self.registry = running.host, running.port, running.registry
            self._ready.set()

        await serve(self.host, self.port, self.seed, self._stop, self._populate, ready)
