"""The simulator's asyncio loop and its connections: time is the cluster's virtual clock and
moves only through events; connections carry real frames to the simulated brokers and fail
as TCP does (reset by a crash, refused by a dead node, stalled by a partition or a pause)."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.codec import build, decode_response, encode_request, request_class
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.sim.aio_loop import SimEventLoop, SimulationStalled, UnsupportedInSimulation
from cluster.sim.aio_transport import SimConnector
from cluster.sim.cluster import BROKER_PORT, SimCluster, broker_host
from cluster.sim.network import VirtualNetwork


def bare_loop() -> tuple[SimEventLoop, VirtualScheduler]:
    scheduler = VirtualScheduler(VirtualClock())
    return SimEventLoop(scheduler, SimConnector(VirtualNetwork(scheduler, random.Random(1)), "127.0.0.1")), scheduler


def cluster_loop(brokers: int = 1) -> tuple[SimCluster, SimEventLoop, SimConnector]:
    sim = SimCluster(brokers, seed=4)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers ready")
    connector = SimConnector(sim.network, "127.0.0.1")
    return sim, SimEventLoop(sim.scheduler, connector), connector


def api_versions_frame(correlation_id: int) -> bytes:
    body = build(request_class(ApiKey.API_VERSIONS, 3), client_software_name="sim-test", client_software_version="1")
    return encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "sim-test", body)


def run(loop: SimEventLoop, coro: object, timeout_s: float = 60.0) -> object:
    """Run to completion, or TimeoutError after `timeout_s` simulated seconds (a broken
    connection would otherwise wait forever while the brokers' timers keep time moving)."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout_s))  # type: ignore[arg-type]


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, object]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return decode_response(ApiKey.API_VERSIONS, 3, await reader.readexactly(size))


def test_timers_fire_in_deadline_order_at_their_virtual_times() -> None:
    loop, scheduler = bare_loop()
    fired: list[tuple[str, float]] = []
    for name, delay in (("c", 3.0), ("a", 1.0), ("b", 2.0), ("a2", 1.0)):
        loop.call_later(delay, lambda n=name: fired.append((n, loop.time())))
    loop.call_soon(lambda: fired.append(("soon", loop.time())))
    cancelled = loop.call_later(1.5, lambda: fired.append(("cancelled", loop.time())))
    cancelled.cancel()
    loop.run_until_complete(asyncio.sleep(4))
    assert fired == [("soon", 0.0), ("a", 1.0), ("a2", 1.0), ("b", 2.0), ("c", 3.0)]
    assert scheduler.clock.monotonic_ns() == 4_000_000_000
    loop.call_later(1.0, lambda: fired.append(("after close", loop.time())))
    loop.close()
    scheduler.advance(2_000)  # the simulation runs on without the loop; its timers are void
    assert fired[-1] == ("c", 3.0) and not loop._ready


def test_a_positive_delay_too_small_for_a_float_still_moves_time() -> None:
    # 1e-18 s vanishes when added to the time; a timer asked for "later" must not fire now.
    loop, scheduler = bare_loop()
    scheduler.clock._advance_to(309_136_041)

    async def wait_tiny() -> int:
        before = scheduler.clock.monotonic_ns()
        await asyncio.sleep(1e-18)
        return scheduler.clock.monotonic_ns() - before

    assert loop.run_until_complete(wait_tiny()) == 1
    loop.close()


def test_a_timer_never_fires_at_the_instant_that_set_it() -> None:
    # aiokafka's auto-commit pattern: act once now > deadline, else wait max(0, deadline - now).
    # At now == deadline that waits 0 s; on a clock that stood still it would ask forever.
    loop, scheduler = bare_loop()

    async def wait_past(deadline: float) -> int:
        waits = 0
        while not loop.time() > deadline:
            await asyncio.wait([loop.create_future()], timeout=max(0.0, deadline - loop.time()))
            waits += 1
        return waits

    assert loop.run_until_complete(wait_past(2.0)) == 2  # 2 s, then 0 s (+1 ns)
    assert scheduler.clock.monotonic_ns() == 2_000_000_001
    loop.close()


def test_cluster_events_run_while_the_client_sleeps() -> None:
    sim, loop, _ = cluster_loop()
    delivered = sim.network.messages_delivered
    start_ns = sim.clock.monotonic_ns()
    loop.run_until_complete(asyncio.sleep(5))
    assert sim.clock.monotonic_ns() - start_ns == 5_000_000_000
    # Heartbeats every 200 ms between broker and controller: about 25 round trips.
    assert sim.network.messages_delivered - delivered >= 40
    loop.close()


def test_waiting_for_what_can_never_happen_is_an_error_not_a_hang() -> None:
    loop, _ = bare_loop()
    with pytest.raises(SimulationStalled):
        loop.run_until_complete(loop.create_future())
    loop.close()


def test_what_the_simulation_cannot_do_is_refused_by_name() -> None:
    loop, _ = bare_loop()
    with pytest.raises(UnsupportedInSimulation, match="run_in_executor"):
        loop.run_in_executor(None, print)
    with pytest.raises(UnsupportedInSimulation, match="call_soon_threadsafe"):
        loop.call_soon_threadsafe(print)
    with pytest.raises(UnsupportedInSimulation, match="create_server"):
        loop.run_until_complete(loop.create_server(asyncio.Protocol, "127.0.0.1", 1))
    with pytest.raises(socket.gaierror):
        loop.run_until_complete(loop.getaddrinfo("kafka.example", 9092))
    loop.close()


def test_a_connection_carries_frames_to_the_broker_and_answers_back() -> None:
    sim, loop, connector = cluster_loop()

    async def exchange() -> list[tuple[int, object]]:
        reader, writer = await asyncio.open_connection(broker_host(0), BROKER_PORT)
        frame = api_versions_frame(7) + api_versions_frame(8)
        writer.write(frame[:5])  # a frame split across writes is reassembled by its size prefix
        await asyncio.sleep(0.01)
        writer.write(frame[5:])
        answers = [await read_answer(reader), await read_answer(reader)]
        writer.close()
        return answers

    answers = run(loop, exchange())
    assert [correlation for correlation, _ in answers] == [7, 8]
    body = answers[0][1]
    assert body.error_code == ErrorCode.none and any(k.api_key == ApiKey.PRODUCE for k in body.api_keys)
    assert [(e.node_id, e.api_key, e.api_version) for e in connector.trace or []] == [(0, 18, 3), (0, 18, 3)]
    loop.close()


def test_a_crash_resets_the_connection_and_a_dead_broker_refuses_new_ones() -> None:
    sim, loop, _ = cluster_loop(brokers=3)

    async def scenario() -> tuple[type[BaseException], type[BaseException]]:
        reader, writer = await asyncio.open_connection(broker_host(1), BROKER_PORT)
        writer.write(api_versions_frame(1))
        await read_answer(reader)
        sim.kill(1)
        try:
            await reader.readexactly(4)
            raise AssertionError("read from a killed broker succeeded")
        except (ConnectionResetError, asyncio.IncompleteReadError) as error:
            lost = type(error)
        try:
            await asyncio.open_connection(broker_host(1), BROKER_PORT)
            raise AssertionError("connected to a killed broker")
        except ConnectionRefusedError as error:
            refused = type(error)
        return lost, refused

    assert run(loop, scenario()) == (ConnectionResetError, ConnectionRefusedError)
    loop.close()


def test_a_partition_stalls_connecting_until_it_heals_and_a_pause_holds_answers() -> None:
    sim, loop, _ = cluster_loop(brokers=3)

    async def scenario() -> tuple[float, float]:
        sim.isolate([[0], [1, 2, "client", "controller"]])
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.open_connection(broker_host(0), BROKER_PORT), 2.0)
        sim.heal()
        reader, writer = await asyncio.open_connection(broker_host(0), BROKER_PORT)
        sim.pause(0)
        asked = loop.time()
        writer.write(api_versions_frame(2))
        loop.call_later(3.0, sim.resume, 0)
        correlation, _ = await read_answer(reader)
        assert correlation == 2
        writer.close()
        return asked, loop.time()

    asked, answered = run(loop, scenario())  # type: ignore[misc]
    assert answered - asked >= 3.0  # held while paused, answered once resumed
    loop.close()

