"""The virtual network carries real frames between in-process nodes, with the failure
behaviour of TCP between processes: answers in order, timeouts drop the connection, a crash
resets it at once, a partition silences it, a pause delays it."""

from __future__ import annotations

import datetime
import random

from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo, Endpoint, OutboundResult, Reply, Response
from cluster.protocol.codec import Request, build, encode_response, request_class, response_class
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.sim.network import NodeScheduler, SimNode, VirtualNetwork

SERVER = Endpoint(7, "127.0.0.17", 9092)


class EchoNode:
    """A real node in miniature: answers ApiVersions after `delay_ms` on its own timers,
    one request at a time per connection like every node."""

    def __init__(self, scheduler: NodeScheduler, delay_ms: float = 0.0) -> None:
        self.scheduler = scheduler
        self.delay_ms = delay_ms
        self.served: list[int] = []

    def handle(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        self.served.append(request.correlation_id)
        body = build(response_class(ApiKey.API_VERSIONS, 3), error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0),
                     supported_features=(), finalized_features_epoch=-1, finalized_features=(), zk_migration_ready=False)
        frame = encode_response(request.api_key, request.api_version, request.correlation_id, body)
        if self.delay_ms:
            self.scheduler.call_later(self.delay_ms, lambda: reply(Response([frame])))
        else:
            reply(Response([frame]))


def setup(delay_ms: float = 0.0) -> tuple[VirtualScheduler, VirtualNetwork, EchoNode]:
    scheduler = VirtualScheduler(VirtualClock())
    network = VirtualNetwork(scheduler, random.Random(3))
    node = EchoNode(NodeScheduler(scheduler, network, SERVER.host), delay_ms)
    network.add_node(SimNode(SERVER, node.handle))
    return scheduler, network, node


def api_versions_body() -> object:
    return build(request_class(ApiKey.API_VERSIONS, 3), client_software_name="t", client_software_version="1")


def send(network: VirtualNetwork, results: list[OutboundResult], timeout_ms: int = 1000, host: str = "127.0.0.1") -> None:
    network.outbound_for(host).send(SERVER, ApiKey.API_VERSIONS, 3, api_versions_body(), results.append, timeout_ms)


def test_requests_are_answered_in_order_with_decoded_bodies() -> None:
    scheduler, network, node = setup(delay_ms=5)
    results: list[OutboundResult] = []
    for _ in range(3):
        send(network, results)
    assert results == []  # never answered inside send
    scheduler.advance(100)
    assert [r.ok for r in results] == [True, True, True]
    assert all(r.body.error_code == ErrorCode.none for r in results)  # type: ignore[union-attr]
    assert node.served == sorted(node.served)


def test_partition_makes_requests_time_out_and_heal_restores() -> None:
    scheduler, network, node = setup()
    network.isolate([["127.0.0.1"], [SERVER.host]])
    results: list[OutboundResult] = []
    send(network, results, timeout_ms=300)
    scheduler.advance(299)
    assert results == []
    scheduler.advance(2)
    assert len(results) == 1 and not results[0].ok and "timed out" in (results[0].error or "")
    assert node.served == []
    network.heal()
    send(network, results)
    scheduler.advance(50)
    assert results[-1].ok


def test_one_way_block_drops_only_the_answers() -> None:
    scheduler, network, node = setup()
    network.block(SERVER.host, "127.0.0.1")
    results: list[OutboundResult] = []
    send(network, results, timeout_ms=200)
    scheduler.advance(300)
    assert len(node.served) == 1  # the request got through
    assert len(results) == 1 and not results[0].ok


def test_crash_resets_connections_at_once_and_refuses_new_ones() -> None:
    scheduler, network, node = setup(delay_ms=50)
    results: list[OutboundResult] = []
    send(network, results, timeout_ms=10_000)
    scheduler.advance(10)
    network.crash(SERVER.host)
    assert len(results) == 1 and "reset" in (results[0].error or "")
    send(network, results, timeout_ms=10_000)
    scheduler.advance(10)
    assert len(results) == 2 and "refused" in (results[1].error or "")
    scheduler.advance(100)  # the dead node's pending reply must not surface
    assert len(results) == 2


def test_pause_holds_requests_and_timers_until_resume() -> None:
    scheduler, network, node = setup(delay_ms=5)
    network.pause(SERVER.host)
    results: list[OutboundResult] = []
    send(network, results, timeout_ms=10_000)
    scheduler.advance(1000)
    assert results == [] and node.served == []
    network.resume(SERVER.host)
    scheduler.advance(20)
    assert len(results) == 1 and results[0].ok


def test_same_seed_same_schedule() -> None:
    def trace(seed: int) -> list[int]:
        scheduler = VirtualScheduler(VirtualClock())
        network = VirtualNetwork(scheduler, random.Random(seed))
        node = EchoNode(NodeScheduler(scheduler, network, SERVER.host))
        network.add_node(SimNode(SERVER, node.handle))
        arrivals: list[int] = []
        for host in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
            network.outbound_for(host).send(SERVER, ApiKey.API_VERSIONS, 3, api_versions_body(),
                                            lambda r, h=host: arrivals.append((int(h.rsplit(".", 1)[1]), scheduler.clock.monotonic_ns())), 1000)
        scheduler.advance(100)
        return arrivals

    assert trace(5) == trace(5)
