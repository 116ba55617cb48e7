"""AsyncioOutbound over real TCP: requests leave from the node's own address, are answered in
order, and every failure (refused, timed out, connection closed) reaches the caller once."""

from __future__ import annotations

import asyncio
import datetime
import struct

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint, OutboundResult
from cluster.protocol.codec import build, decode_request, encode_response, request_class, response_class
from cluster.protocol.versions import ApiKey
from cluster.runtime.outbound import AsyncioOutbound

SERVER_HOST = "127.0.0.31"
NODE_HOST = "127.0.0.23"


class Server(asyncio.Protocol):
    """A node that answers ApiVersions through the real codec; `mode` makes it misbehave."""

    peers: list[str] = []
    mode = "answer"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buffer = bytearray()
        Server.peers.append(transport.get_extra_info("peername")[0])

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (size,) = struct.unpack_from(">i", self.buffer)
            if len(self.buffer) < 4 + size:
                return
            frame = bytes(self.buffer[4 : 4 + size])
            del self.buffer[: 4 + size]
            request = decode_request(frame)
            if Server.mode == "silent":
                continue
            if Server.mode == "close":
                self.transport.close()  # type: ignore[attr-defined]
                return
            body = build(response_class(ApiKey.API_VERSIONS, 3), error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0),
                         supported_features=(), finalized_features_epoch=request.correlation_id, finalized_features=(), zk_migration_ready=False)
            self.transport.write(encode_response(request.api_key, request.api_version, request.correlation_id, body))  # type: ignore[attr-defined]


def run(scenario: object) -> list[OutboundResult]:
    async def main() -> list[OutboundResult]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Server, SERVER_HOST, 0)
        port = server.sockets[0].getsockname()[1]
        outbound = AsyncioOutbound(loop, NODE_HOST, "test-node")
        try:
            return await scenario(loop, outbound, Endpoint(5, SERVER_HOST, port))  # type: ignore[operator]
        finally:
            outbound.close_all()
            server.close()

    Server.peers = []
    return asyncio.run(main())


def body() -> object:
    return build(request_class(ApiKey.API_VERSIONS, 3), client_software_name="t", client_software_version="1")


async def collect(outbound: AsyncioOutbound, endpoint: Endpoint, n: int, timeout_ms: int = 2000) -> list[OutboundResult]:
    results: list[OutboundResult] = []
    done = asyncio.Event()

    def on_done(result: OutboundResult) -> None:
        results.append(result)
        if len(results) == n:
            done.set()

    for _ in range(n):
        outbound.send(endpoint, ApiKey.API_VERSIONS, 3, body(), on_done, timeout_ms)
    assert results == []  # never called inside send
    await asyncio.wait_for(done.wait(), 10)
    return results


def test_pipelined_requests_are_answered_in_order_from_the_node_address() -> None:
    Server.mode = "answer"

    async def scenario(loop: asyncio.AbstractEventLoop, outbound: AsyncioOutbound, endpoint: Endpoint) -> list[OutboundResult]:
        return await collect(outbound, endpoint, 20)

    results = run(scenario)
    assert all(r.ok for r in results)
    echoed = [r.body.finalized_features_epoch for r in results]  # type: ignore[union-attr]
    assert echoed == sorted(echoed) and len(set(echoed)) == 20
    assert Server.peers == [NODE_HOST]  # one connection, bound to the node's own address


def test_refused_connection_is_reported() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop, outbound: AsyncioOutbound, endpoint: Endpoint) -> list[OutboundResult]:
        return await collect(outbound, Endpoint(6, "127.0.0.32", 1), 2)

    results = run(scenario)
    assert [r.ok for r in results] == [False, False]
    assert all("cannot connect" in (r.error or "") for r in results)


def test_timeout_fails_the_request_and_the_next_one_reconnects() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop, outbound: AsyncioOutbound, endpoint: Endpoint) -> list[OutboundResult]:
        Server.mode = "silent"
        first = await collect(outbound, endpoint, 2, timeout_ms=200)
        Server.mode = "answer"
        second = await collect(outbound, endpoint, 1)
        return first + second

    results = run(scenario)
    assert [r.ok for r in results] == [False, False, True]
    assert "timed out after 200 ms" in (results[0].error or "")
    assert len(Server.peers) == 2  # the timeout dropped the first connection


def test_peer_closing_fails_everything_in_flight() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop, outbound: AsyncioOutbound, endpoint: Endpoint) -> list[OutboundResult]:
        Server.mode = "close"
        return await collect(outbound, endpoint, 3)

    results = run(scenario)
    assert [r.ok for r in results] == [False, False, False]
    assert all("lost" in (r.error or "") for r in results)


def test_a_shorter_timeout_sent_later_fires_first() -> None:
    # One timer per destination, armed for the earliest deadline: a later request with a
    # shorter timeout must re-arm it.
    async def scenario(loop: asyncio.AbstractEventLoop, outbound: AsyncioOutbound, endpoint: Endpoint) -> list[OutboundResult]:
        Server.mode = "silent"
        results: list[OutboundResult] = []
        done = asyncio.Event()

        def on_done(result: OutboundResult) -> None:
            results.append(result)
            if len(results) == 2:
                done.set()

        outbound.send(endpoint, ApiKey.API_VERSIONS, 3, body(), on_done, 60_000)
        outbound.send(endpoint, ApiKey.API_VERSIONS, 3, body(), on_done, 200)
        await asyncio.wait_for(done.wait(), 10)
        return results

    results = run(scenario)
    assert [r.ok for r in results] == [False, False]
    assert all("timed out after 200 ms" in (r.error or "") for r in results)  # not after 60000 ms


def test_an_answered_request_leaves_the_timer_to_watch_the_next_one() -> None:
    # The first request is answered before its deadline; when its timer fires, the second
    # (silent, later deadline) is still in flight and must time out at its own deadline.
    async def scenario(loop: asyncio.AbstractEventLoop, outbound: AsyncioOutbound, endpoint: Endpoint) -> list[OutboundResult]:
        Server.mode = "answer"
        first = await collect(outbound, endpoint, 1, timeout_ms=100)
        Server.mode = "silent"
        second = await collect(outbound, endpoint, 1, timeout_ms=600)
        Server.mode = "answer"
        third = await collect(outbound, endpoint, 1, timeout_ms=100)
        return first + second + third

    results = run(scenario)
    assert [r.ok for r in results] == [True, False, True]
    assert "timed out after 600 ms" in (results[1].error or "")
