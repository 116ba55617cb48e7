"""Connections for asyncio clients inside the simulation: an `asyncio.Transport` whose bytes
travel the `VirtualNetwork` to a simulated node.

What the client writes is split into request frames by their 4-byte size prefix; each frame
goes over the virtual network as a message (partitions drop it, a paused node holds it), is
decoded and served by the node's real core, and its encoded answer comes back as bytes for
the client's own decoder. A crashed node resets the connection (the protocol's
`connection_lost` gets a ConnectionResetError); a node that is down refuses new ones; a
partition stalls both, as TCP does, until the client's own timeouts give up.

Every request frame a client sends is recorded in `SimConnector.trace`, with the virtual
time and the node it went to: the raw material of replay checks.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.protocol.codec import RequestError, peek_header
from cluster.protocol.frames import SIZE_PREFIX, FrameError, FrameSplitter
from cluster.sim.aio_loop import Connector, SimEventLoop
from cluster.sim.network import StreamConnection, VirtualNetwork


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request frame a client wrote: when (virtual ns), to which node, which API, and a
    CRC32 of its bytes (so a replay that sent the same requests with other contents, say
    topics in another order, does not pass for the same)."""

    time_ns: int
    node_id: int
    api_key: int
    api_version: int
    connection: int  # the client's n-th connection, in the order opened
    crc32: int


class SimTransport(asyncio.Transport):
    def __init__(self, loop: SimEventLoop, protocol: asyncio.Protocol, stream: StreamConnection, source_host: str,
                 local_port: int, trace: list[TraceEntry] | None, number: int) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._stream = stream
        self._source_host = source_host
        self._local_port = local_port
        self._trace = trace
        self._number = number
        self._splitter = FrameSplitter()
        self._inbox: deque[bytes] = deque()
        self._lost: str | None = None  # reset or closed by the node
        self._closing = False
        self._reading = True
        self._drain_scheduled = False
        self._finished = False

    # ---- from the network ------------------------------------------------------------------

    def on_frame(self, frame: bytes) -> None:
        if not self._closing:
            self._inbox.append(frame)
            self._schedule_drain()

    def on_lost(self, reason: str) -> None:
        if self._lost is None and not self._closing:
            self._lost = reason
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        # Bytes that arrived before the reset are delivered first, as a socket hands them out.
        while self._inbox and self._reading and not self._closing:
            self._protocol.data_received(self._inbox.popleft())
        if self._lost is not None and not self._inbox and not self._closing:
            self._closing = True
            self._finish(ConnectionResetError(f"{self._lost}"))

    def _finish(self, error: Exception | None) -> None:
        if not self._finished:
            self._finished = True
            self._protocol.connection_lost(error)

    # ---- from the client -------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        try:
            frames = self._splitter.feed(bytes(data))
        except FrameError as error:
            # The node would close a connection sending this; close it here, at the source.
            self._closing = True
            self._stream.close()
            self._loop.call_soon(self._finish, ConnectionResetError(f"the client wrote a bad frame: {error}"))
            return
        for frame in frames:
            if self._trace is not None:
                try:
                    api_key, api_version, _ = peek_header(frame)
                except RequestError:
                    api_key, api_version = -1, -1
                self._trace.append(TraceEntry(self._loop.now_ns(), self._stream.destination.node_id,
                                              api_key, api_version, self._number, zlib.crc32(frame)))
            self._stream.send(SIZE_PREFIX.pack(len(frame)) + frame)

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._inbox.clear()
        self._stream.close()
        self._loop.call_soon(self._finish, None)

    def close_after_sent(self) -> None:
        """close() as a real socket's: the requests already written still reach the node
        (StreamConnection.close_after_sent). A client that relies on it (a request it gave up
        on may still be served) calls this when the transport has it."""
        if self._closing:
            return
        self._closing = True
        self._inbox.clear()
        self._stream.close_after_sent()
        self._loop.call_soon(self._finish, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self._schedule_drain()

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return (self._stream.destination.host, self._stream.destination.port)
        if name == "sockname":
            return (self._source_host, self._local_port)
        return default


@dataclass(frozen=True, slots=True)
class _ConnectFailed:
    error: type[OSError]
    reason: str


class SimConnector(Connector):
    """Opens client connections from `source_host` over `network`; host names resolve through
    `names` (besides the nodes' own addresses)."""

    def __init__(self, network: VirtualNetwork, source_host: str, names: dict[str, str] | None = None,
                 record_trace: bool = True) -> None:
        self._network = network
        self._source_host = source_host
        self._names = dict(names or {})
        self._known_hosts: set[str] = set()
        self._ports = itertools.count(40_000)  # ephemeral ports, for peers that log them
        self._numbers = itertools.count(1)
        self.trace: list[TraceEntry] | None = [] if record_trace else None

    def resolve(self, host: str) -> str | None:
        address = self._names.get(host, host)
        # Hosts join the network and never leave it: a known one is remembered (a client
        # retrying a dead broker resolves its name on every attempt).
        if address in self._known_hosts:
            return address
        if self._network.has_host(address):
            self._known_hosts.add(address)
            return address
        return None

    async def connect(self, loop: SimEventLoop, protocol_factory: Callable[[], asyncio.BaseProtocol], address: str,
                      port: int) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        endpoint = self._network.endpoint_at(address, port)
        if endpoint is None:
            # Nothing listens there: the host's kernel answers the SYN with a reset.
            await asyncio.sleep(0)
            raise ConnectionRefusedError(f"connect to {address}:{port}: nothing listens there in the simulation")
        # The future's outcome is the stream or why it failed, never an exception object: an
        # exception set on it would hold (through its traceback) this frame, which holds the
        # future, a reference cycle per failed connect for the garbage collector (a client
        # retrying dead brokers fails thousands of them).
        opened: asyncio.Future[StreamConnection | _ConnectFailed] = loop.create_future()
        holder: list[SimTransport] = []

        def on_connected(stream: StreamConnection) -> None:
            if opened.done() or not stream.alive:
                stream.close()  # the caller gave up (timed out) or the node died meanwhile
                if not opened.done():
                    opened.set_result(_ConnectFailed(ConnectionResetError, f"connection to {address}:{port} reset while opening"))
                return
            opened.set_result(stream)

        def on_refused(reason: str) -> None:
            if not opened.done():
                opened.set_result(_ConnectFailed(ConnectionRefusedError, reason))

        def on_frame(frame: bytes) -> None:
            if holder:
                holder[0].on_frame(frame)

        def on_lost(reason: str) -> None:
            if holder:
                holder[0].on_lost(reason)
            elif not opened.done():
                opened.set_result(_ConnectFailed(ConnectionResetError, reason))

        self._network.connect_stream(self._source_host, endpoint, on_frame, on_lost, on_connected, on_refused)
        outcome = await opened
        if isinstance(outcome, _ConnectFailed):
            raise outcome.error(outcome.reason)
        stream = outcome
        protocol = protocol_factory()
        assert isinstance(protocol, asyncio.Protocol), f"only stream protocols are simulated, not {type(protocol).__name__}"
        transport = SimTransport(loop, protocol, stream, self._source_host, next(self._ports), self.trace, next(self._numbers))
        holder.append(transport)
        protocol.connection_made(transport)
        if not stream.alive:
            transport.on_lost("connection reset while opening")
        return transport, protocol
