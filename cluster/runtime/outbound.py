"""Outbound requests over asyncio: one connection per destination, bound to this node's own
address, so that a network partition made with nftables between node addresses cuts
node-to-node traffic exactly as it cuts client traffic.

Requests to the same destination are pipelined on one connection and answered in order
(Kafka answers in request order per connection). A request that gets no answer within its
timeout fails and drops the connection, failing everything else in flight on it; the next
request reconnects. Callbacks always run from the event loop, never inside `send`.

Timeouts are checked by one timer per destination, armed for the earliest deadline in flight
and not touched when an answer arrives: a timer created and cancelled for every request (a
follower sends a Fetch after every answer) cost more than the request's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import struct
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cluster.broker.env import Endpoint, OutboundResult
from cluster.protocol.codec import decode_response, encode_request
from cluster.runtime import request_trace

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
# An answer larger than this is a broken peer, not a response.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    api_version: int
    on_done: Callable[[OutboundResult], None]
    deadline: float  # loop time by which the answer must have arrived
    timeout_ms: int


class _PeerConnection(asyncio.Protocol):
    def __init__(self, owner: _Peer) -> None:
        self._owner = owner
        self._buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 4:
            (size,) = _SIZE.unpack_from(self._buffer, 0)
            if size < 4 or size > MAX_RESPONSE_BYTES:
                self._owner.fail(f"bad response size {size} from {self._owner.endpoint}")
                return
            if len(self._buffer) < 4 + size:
                return
            payload = bytes(self._buffer[4 : 4 + size])
            del self._buffer[: 4 + size]
            self._owner.answer(payload)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.fail(f"connection to {self._owner.endpoint} lost" + (f": {exc}" if exc else ""))


class _Peer:
    """The connection to one destination and the requests in flight on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, endpoint: Endpoint, local_host: str | None, client_id: str) -> None:
        self.loop = loop
        self.endpoint = endpoint
        self._local_host = local_host
        self._client_id = client_id
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._unsent: list[bytes] = []
        self._in_flight: deque[_InFlight] = deque()
        self._correlation = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf  # when `_timer` fires; inf: not armed

    def send(self, api_key: int, api_version: int, body: Any, on_done: Callable[[OutboundResult], None], timeout_ms: int) -> None:
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        try:
            frame = encode_request(api_key, api_version, correlation_id, self._client_id, body)
        except Exception as error:  # noqa: BLE001 - a bad body is the caller's bug; report it to them
            self.loop.call_soon(on_done, OutboundResult(None, f"cannot encode request {api_key} v{api_version}: {error!r}"))
            return
        entry = _InFlight(correlation_id, api_key, api_version, on_done, self.loop.time() + timeout_ms / 1000.0, timeout_ms)
        if request_trace.TRACE is not None:
            request_trace.TRACE.event("send", api_key, api_version, self.endpoint.node_id)
        self._in_flight.append(entry)
        if entry.deadline < self._timer_at:
            self._arm(entry.deadline)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)
            return
        self._unsent.append(frame)
        if self._connecting is None:
            self._connecting = self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        try:
            local_addr = (self._local_host, 0) if self._local_host else None
            transport, _ = await self.loop.create_connection(lambda: _PeerConnection(self), self.endpoint.host, self.endpoint.port, local_addr=local_addr)
        except OSError as error:
            self._connecting = None
            self.fail(f"cannot connect to {self.endpoint}: {error.strerror or error}")
            return
        self._connecting = None
        assert isinstance(transport, asyncio.Transport)
        if not self._in_flight:
            # Everything timed out while connecting.
            transport.close()
            return
        self._transport = transport
        transport.writelines(self._unsent)
        self._unsent = []

    def answer(self, payload: bytes) -> None:
        if not self._in_flight:
            self.fail(f"unsolicited response from {self.endpoint}")
            return
        entry = self._in_flight.popleft()
        try:
            correlation_id, body = decode_response(entry.api_key, entry.api_version, payload)
        except ValueError as error:
            self._in_flight.appendleft(entry)
            self.fail(f"{self.endpoint}: {error}")
            return
        if correlation_id != entry.correlation_id:
            self._in_flight.appendleft(entry)
            self.fail(f"{self.endpoint} answered correlation id {correlation_id}, expected {entry.correlation_id}")
            return
        if request_trace.TRACE is not None:
            request_trace.TRACE.event("answered", entry.api_key, entry.api_version, self.endpoint.node_id)
        entry.on_done(OutboundResult(body))

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._check_deadlines)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf

    def _check_deadlines(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        if not self._in_flight:
            return  # everything was answered: nothing to watch until the next send
        now = self.loop.time()
        expired = [entry for entry in self._in_flight if entry.deadline <= now]
        if expired:
            first = min(expired, key=lambda entry: entry.deadline)
            self.fail(f"request to {self.endpoint} timed out after {first.timeout_ms} ms")
            return
        self._arm(min(entry.deadline for entry in self._in_flight))

    def fail(self, reason: str) -> None:
        """Drop the connection and fail every request in flight with `reason`."""
        transport, self._transport = self._transport, None
        self._unsent = []
        failed, self._in_flight = self._in_flight, deque()
        self._disarm()
        if transport is not None:
            transport.close()
        for entry in failed:
            entry.on_done(OutboundResult(None, reason))


class AsyncioOutbound:
    """The runtime's `Outbound`: real TCP connections from `local_host` (the node's own
    address; None lets the kernel choose)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, local_host: str | None, client_id: str,
                 address_overrides: Mapping[int, tuple[str, int]] | None = None) -> None:
        self._loop = loop
        self._local_host = local_host
        self._client_id = client_id
        # inter.broker.address.overrides: node id -> the address dialled instead of the one
        # the destination registered (a proxy of this source's own, see cluster.proxy_routing).
        self._address_overrides = dict(address_overrides or {})
        self._peers: dict[tuple[str, int, str], _Peer] = {}

    def _routed(self, destination: Endpoint) -> Endpoint:
        override = self._address_overrides.get(destination.node_id)
        if override is None:
            return destination
        return Endpoint(destination.node_id, override[0], override[1], destination.channel)

    def send(self, destination: Endpoint, api_key: int, api_version: int, body: Any,
             on_done: Callable[[OutboundResult], None], timeout_ms: int) -> None:
        if self._address_overrides:
            destination = self._routed(destination)
        key = (destination.host, destination.port, destination.channel)
        peer = self._peers.get(key)
        if peer is None or peer.endpoint.node_id != destination.node_id:
            if peer is not None:
                peer.fail(f"{peer.endpoint} replaced by {destination}")
            peer = self._peers[key] = _Peer(self._loop, destination, self._local_host, self._client_id)
        peer.send(api_key, api_version, body, on_done, timeout_ms)

    def close(self, destination: Endpoint) -> None:
        if self._address_overrides:
            destination = self._routed(destination)
        peer = self._peers.pop((destination.host, destination.port, destination.channel), None)
        if peer is not None:
            peer.fail(f"connection to {destination} closed by this node")

    def close_all(self) -> None:
        for peer in list(self._peers.values()):
            peer.fail("node shutting down")
        self._peers.clear()
