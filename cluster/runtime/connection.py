"""One client connection: an asyncio Protocol that splits frames, decodes them, hands them to
the node's core (a broker or the controller) one at a time, and writes the answers in
request order.

Kafka mutes a channel while a request is in flight; here the next frame is dispatched only
once the previous one has been answered (possibly later, for a long-poll Fetch), so
pipelined requests are both served and answered in order. Every answer produced while
processing one `data_received` is coalesced into one `writelines`. Malformed input closes
this connection only, with the reason in the log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque

from typing import Any

from cluster.broker.env import ClientInfo, Response
from cluster.protocol.codec import RequestError, UnsupportedVersionError, decode_request, unsupported_api_versions_response
from cluster.protocol.frames import FrameError, FrameSplitter
from cluster.protocol.versions import ApiKey
from cluster.runtime import request_trace

log = logging.getLogger(__name__)
_connection_ids = itertools.count(1)
# Stop reading from a client that has this many undispatched frames queued.
MAX_QUEUED_FRAMES = 1000


class BrokerConnection(asyncio.Protocol):
    def __init__(self, broker: Any) -> None:
        # Any node core with `handle(request, client, reply)`, a `config` with
        # socket_request_max_bytes, and optionally `versions` (its API version table).
        self._broker = broker
        self._versions = getattr(broker, "versions", None)
        self._splitter = FrameSplitter(broker.config.socket_request_max_bytes)
        self._queue: deque[bytes] = deque()
        self._out: list[bytes | memoryview] = []
        self._busy = False
        self._pumping = False
        self._pump_scheduled = False
        self._closing = False
        self._reading_paused = False
        self._writing_paused = False
        self._transport: asyncio.Transport | None = None
        self._id = next(_connection_ids)
        self._peer = "?"
        self._client = ClientInfo(None, "?", self._id)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._client = ClientInfo(None, f"/{peer[0]}" if peer else "?", self._id)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._queue.clear()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            frames = self._splitter.feed(data)
        except FrameError as error:
            self._close(f"bad frame: {error}")
            return
        self._queue.extend(frames)
        if len(self._queue) > MAX_QUEUED_FRAMES and self._transport is not None and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        self._pump()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._pump()

    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._queue and not self._busy and not self._closing and not self._writing_paused:
                self._dispatch(self._queue.popleft())
            if self._reading_paused and len(self._queue) < MAX_QUEUED_FRAMES // 2 and self._transport is not None:
                self._transport.resume_reading()
                self._reading_paused = False
        finally:
            self._pumping = False
            self._flush()

    def _dispatch(self, frame: bytes) -> None:
        try:
            request = decode_request(frame, self._versions)
        except UnsupportedVersionError as error:
            if error.api_key == ApiKey.API_VERSIONS:
                # Kafka answers an unknown ApiVersions version with a v0 body and error 35,
                # so the client can retry with a version we speak.
                self._out.append(unsupported_api_versions_response(error.correlation_id))
                return
            self._close(str(error))
            return
        except RequestError as error:
            self._close(str(error))
            return
        self._client.client_id = request.client_id
        self._busy = True
        answered = False
        trace = request_trace.TRACE
        if trace is not None:
            trace.event("in", request.api_key, request.api_version, self._id)

        def reply(response: Response) -> None:
            nonlocal answered
            if answered:
                raise RuntimeError(f"request {request.api_key} v{request.api_version} answered twice")
            answered = True
            if trace is not None:
                trace.event("out", request.api_key, request.api_version, self._id)
            self._on_reply(response)

        try:
            self._broker.handle(request, self._client, reply)
        except Exception:
            log.exception("connection %d (%s): handling api %d v%d failed", self._id, self._peer, request.api_key, request.api_version)
            if not answered:
                answered = True
                self._on_reply(Response(None, close_connection=True, close_reason="internal error while handling the request"))

    def _on_reply(self, response: Response) -> None:
        self._busy = False
        if self._closing:
            return
        if response.chunks:
            self._out.extend(response.chunks)
        if response.close_connection:
            self._close(response.close_reason)
            return
        if not self._pumping:
            # An answer given later, from inside another request's handling (an acks=all
            # Produce completed by a follower's Fetch): send it now, but take this
            # connection's next request in a fresh loop iteration. Handled inline, it would
            # run inside the other handler, which may not have registered its own waits yet
            # (a Fetch about to park would miss the append that request makes).
            self._flush()
            if self._queue and not self._pump_scheduled:
                self._pump_scheduled = True
                asyncio.get_running_loop().call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    def _flush(self) -> None:
        if self._out and self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(self._out)
        self._out = []

    def _close(self, reason: str) -> None:
        if self._closing:
            return
        log.info("closing connection %d from %s: %s", self._id, self._peer, reason)
        self._flush()
        self._closing = True
        self._queue.clear()
        if self._transport is not None:
            self._transport.close()
