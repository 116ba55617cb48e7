"""What each toxic does to real TCP traffic: a client, the proxy, and an echo server on 127.0.0.1.

Timing assertions are lower bounds only (a toxic must delay at least this much); a busy
machine can only make things slower. Socket timeouts are generous (tests/proxy/helpers.py).
"""

from __future__ import annotations

import random
import socket
import time

import pytest

from proxy.toxics import slice_bounds
from tests.proxy.helpers import add_toxic, call, connect, create_proxy, recv_exactly, recv_until_closed, round_trip_s

# asyncio's timers may fire up to a clock tick early; a millisecond covers it.
TIMER_SLACK_S = 0.001


@pytest.fixture
def echo(proxy_server, echo_server) -> str:
    """An echo proxy's listen address."""
    return create_proxy(proxy_server, "echo", echo_server.address)


def test_latency_adds_to_each_round_trip(proxy_server, echo):
    with connect(echo) as sock:
        baseline_s = min(round_trip_s(sock) for _ in range(5))
        add_toxic(proxy_server, "echo", "latency", latency=100)
        delayed = [round_trip_s(sock) for _ in range(5)]
    assert min(delayed) >= 0.100 - TIMER_SLACK_S, (baseline_s, delayed)


def test_latency_both_ways_adds_up(proxy_server, echo):
    add_toxic(proxy_server, "echo", "latency", stream="upstream", latency=60)
    add_toxic(proxy_server, "echo", "latency", stream="downstream", latency=40)
    with connect(echo) as sock:
        assert min(round_trip_s(sock) for _ in range(3)) >= 0.100 - TIMER_SLACK_S


def test_jitter_stays_within_its_bounds(proxy_server, echo):
    add_toxic(proxy_server, "echo", "latency", latency=100, jitter=50)
    with connect(echo) as sock:
        trips = [round_trip_s(sock) for _ in range(8)]
    assert min(trips) >= 0.050 - TIMER_SLACK_S, trips


def test_latency_holds_data_while_pipelining(proxy_server, echo):
    """Chunks wait out their latency side by side (Toxiproxy buffers 1024), not one after another."""
    add_toxic(proxy_server, "echo", "latency", stream="upstream", latency=300)
    with connect(echo) as sock:
        started = time.monotonic()
        for index in range(5):
            sock.sendall(b"%d" % index)
            time.sleep(0.01)
        assert recv_exactly(sock, 5) == b"01234"
        assert time.monotonic() - started >= 0.300 - TIMER_SLACK_S


def test_removing_latency_releases_waiting_data(proxy_server, echo):
    """A toxic removed from a live connection hands on what it holds at once (here: 10 minutes early)."""
    add_toxic(proxy_server, "echo", "latency", latency=600_000)
    with connect(echo) as sock:
        sock.sendall(b"held")
        time.sleep(0.2)
        assert call(proxy_server, "DELETE", "/proxies/echo/toxics/latency_downstream").status == 204
        assert recv_exactly(sock, 4) == b"held"  # within the socket timeout, far below the latency
        round_trip_s(sock)


def test_updating_latency_applies_to_the_live_connection(proxy_server, echo):
    add_toxic(proxy_server, "echo", "latency", latency=600_000)
    with connect(echo) as sock:
        sock.sendall(b"a")
        time.sleep(0.2)
        reply = call(proxy_server, "POST", "/proxies/echo/toxics/latency_downstream", {"attributes": {"latency": 150}})
        assert reply.status == 200
        assert recv_exactly(sock, 1) == b"a"  # the held chunk leaves when its toxic restarts
        assert round_trip_s(sock) >= 0.150 - TIMER_SLACK_S


def test_bandwidth_limits_throughput(proxy_server, echo):
    rate_kb_s = 200
    payload = bytes(range(256)) * 1000  # 256,000 bytes: 1.28 s at 200 KB/s
    add_toxic(proxy_server, "echo", "bandwidth", stream="upstream", rate=rate_kb_s)
    with connect(echo) as sock:
        elapsed_s = round_trip_s(sock, payload)
    # KB is 1000 bytes, as in Toxiproxy. The first 100-ms piece leaves after 100 ms: no free burst.
    assert elapsed_s >= len(payload) / (rate_kb_s * 1000) * 0.95, elapsed_s


def test_bandwidth_zero_holds_data_until_removed(proxy_server, echo, echo_server):
    add_toxic(proxy_server, "echo", "bandwidth", stream="upstream", rate=0)
    with connect(echo) as sock:
        sock.sendall(b"wait")
        time.sleep(0.5)
        assert echo_server.received_bytes == 0
        call(proxy_server, "DELETE", "/proxies/echo/toxics/bandwidth_upstream")
        assert recv_exactly(sock, 4) == b"wait"


def test_slow_close_delays_the_close(proxy_server, hang_up_server):
    listen = create_proxy(proxy_server, "hangup", hang_up_server.address)
    add_toxic(proxy_server, "hangup", "slow_close", delay=500)
    started = time.monotonic()
    with connect(listen) as sock:
        assert recv_until_closed(sock) == (b"", "eof")
    assert time.monotonic() - started >= 0.500 - TIMER_SLACK_S


def test_timeout_drops_data_then_closes(proxy_server, echo, echo_server):
    add_toxic(proxy_server, "echo", "timeout", stream="upstream", timeout=400)
    started = time.monotonic()
    with connect(echo) as sock:
        sock.sendall(b"into the void")
        data, _ = recv_until_closed(sock)
    assert data == b""
    assert time.monotonic() - started >= 0.400 - TIMER_SLACK_S
    assert echo_server.received_bytes == 0


def test_timeout_zero_holds_the_connection_until_removed(proxy_server, echo, echo_server):
    add_toxic(proxy_server, "echo", "timeout", stream="upstream", timeout=0)
    with connect(echo) as sock:
        sock.sendall(b"dropped")
        sock.settimeout(1.0)
        with pytest.raises(socket.timeout):  # still open, and silent
            sock.recv(1)
        sock.settimeout(20)
        assert echo_server.received_bytes == 0
        # Removing it closes the connections it applied to (their streams have lost bytes).
        assert call(proxy_server, "DELETE", "/proxies/echo/toxics/timeout_upstream").status == 204
        assert recv_until_closed(sock)[0] == b""
    with connect(echo) as fresh:
        round_trip_s(fresh)


def test_reset_peer_resets_the_connection(proxy_server, echo):
    add_toxic(proxy_server, "echo", "reset_peer", stream="upstream", timeout=0)
    with connect(echo) as sock:
        sock.sendall(b"hello")
        assert recv_until_closed(sock) == (b"", "reset")


def test_reset_peer_waits_its_timeout(proxy_server, echo):
    add_toxic(proxy_server, "echo", "reset_peer", stream="upstream", timeout=300)
    with connect(echo) as sock:
        started = time.monotonic()
        sock.sendall(b"hello")
        assert recv_until_closed(sock) == (b"", "reset")
        assert time.monotonic() - started >= 0.300 - TIMER_SLACK_S


def test_limit_data_closes_after_its_bytes(proxy_server, echo):
    add_toxic(proxy_server, "echo", "limit_data", bytes=10)
    with connect(echo) as sock:
        sock.sendall(b"0123456789abcdefghij")
        assert recv_until_closed(sock) == (b"0123456789", "eof")


def test_limit_data_counts_across_chunks(proxy_server, echo):
    add_toxic(proxy_server, "echo", "limit_data", bytes=7)
    with connect(echo) as sock:
        assert round_trip_s(sock, b"1234") >= 0
        sock.sendall(b"5678")
        assert recv_until_closed(sock) == (b"567", "eof")


def test_slicer_splits_writes(proxy_server, echo):
    payload = bytes(range(200))
    average, variation, delay_us = 20, 5, 50_000
    add_toxic(proxy_server, "echo", "slicer", average_size=average, size_variation=variation, delay=delay_us)
    with connect(echo) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        received, reads = bytearray(), 0
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            assert chunk, "closed early"
            received += chunk
            reads += 1
        elapsed_s = time.monotonic() - started
    assert bytes(received) == payload
    assert reads >= 2
    # Pieces are at most average + variation bytes, with the delay after each.
    fewest_pieces = -(-len(payload) // (average + variation))
    assert elapsed_s >= (fewest_pieces - 1) * delay_us / 1e6 - TIMER_SLACK_S


def test_slice_bounds_cover_the_chunk_in_small_pieces():
    rng = random.Random(5)
    for length in (0, 1, 7, 100, 1000, 4096):
        pieces = slice_bounds(length, 16, 6, rng)
        assert pieces[0][0] == 0 and pieces[-1][1] == length
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert all(0 < end - start <= 16 + 6 for start, end in pieces) or length == 0
    # Degenerate settings Toxiproxy would crash on still give valid pieces.
    assert slice_bounds(10, 0, 0, rng) == [(i, i + 1) for i in range(10)]
    wide = slice_bounds(50, 1, 40, rng)
    assert wide[-1][1] == 50 and all(end > start for start, end in wide)


def test_toxicity_zero_never_applies_and_one_always_does(proxy_server, echo):
    add_toxic(proxy_server, "echo", "limit_data", toxicity=0.0, bytes=0)
    for _ in range(20):
        with connect(echo) as sock:
            round_trip_s(sock, b"intact")
    call(proxy_server, "POST", "/proxies/echo/toxics/limit_data_downstream", {"toxicity": 1.0})
    for _ in range(5):
        with connect(echo) as sock:
            sock.sendall(b"cut")
            assert recv_until_closed(sock) == (b"", "eof")


def test_toxicity_half_applies_to_some_connections(proxy_server, echo):
    add_toxic(proxy_server, "echo", "limit_data", toxicity=0.5, bytes=0)
    outcomes = []
    for _ in range(30):
        with connect(echo) as sock:
            sock.sendall(b"x")
            outcomes.append(recv_until_closed_or_first_byte(sock))
    # 2 * 0.5**30: the chance of all 30 drawing alike.
    assert set(outcomes) == {"echoed", "cut"}, outcomes


def recv_until_closed_or_first_byte(sock: socket.socket) -> str:
    return "echoed" if sock.recv(1) else "cut"


def toxicity_pattern(seed: int, upstream: str, connections: int = 20) -> list[str]:
    from proxy import ProxyServer

    with ProxyServer(port=0, seed=seed) as server:
        listen = create_proxy(server, "echo", upstream)
        add_toxic(server, "echo", "limit_data", toxicity=0.5, bytes=0)
        pattern = []
        for _ in range(connections):  # one after another, so the draws come in the same order
            with connect(listen) as sock:
                sock.sendall(b"x")
                pattern.append(recv_until_closed_or_first_byte(sock))
        return pattern


def test_toxicity_draws_reproduce_from_the_seed(echo_server):
    first, again, other = (toxicity_pattern(seed, echo_server.address) for seed in (7, 7, 8))
    assert first == again
    assert first != other  # equal by chance with probability 2**-20


def test_toxics_apply_to_new_and_existing_connections_only_in_their_direction(proxy_server, echo, echo_server):
    with connect(echo) as old:
        add_toxic(proxy_server, "echo", "timeout", stream="downstream", timeout=0)
        with connect(echo) as new:
            for sock in (old, new):
                sock.sendall(b"up")
                sock.settimeout(0.5)
                with pytest.raises(socket.timeout):
                    sock.recv(1)
    # Upstream was untouched: the server received both requests.
    assert echo_server.received_bytes == 4


def test_disabled_proxy_refuses_and_deleted_proxy_closes(proxy_server, echo):
    with connect(echo) as sock:
        round_trip_s(sock)
        assert call(proxy_server, "DELETE", "/proxies/echo").status == 204
        assert recv_until_closed(sock)[0] == b""
    with pytest.raises(ConnectionRefusedError):
        connect(echo)


def test_unreachable_upstream_closes_the_client(proxy_server, hang_up_server):
    # A port nothing listens on: bind one, note it, close it.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    listen = create_proxy(proxy_server, "dead", dead)
    with connect(listen) as sock:
        assert recv_until_closed(sock)[0] == b""


def test_server_stop_closes_listeners_and_connections(echo_server):
    from proxy import ProxyServer

    with ProxyServer(port=0, seed=1) as server:
        listen = create_proxy(server, "echo", echo_server.address)
        sock = connect(listen)
        round_trip_s(sock)
    with sock:
        assert recv_until_closed(sock)[0] == b""
    with pytest.raises(ConnectionRefusedError):
        connect(listen)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((server.host, server.port), timeout=5)


def test_chain_changes_under_load_lose_no_byte(proxy_server, echo):
    """Toxics that must not alter the stream (latency, bandwidth, slicer, noop, slow_close) are added,
    updated and removed at random on both directions of busy connections, which come and go
    meanwhile; every byte comes back in order, and every API call answers."""
    import threading

    rng = random.Random(11)
    kinds = {"latency": {"latency": 5, "jitter": 3}, "bandwidth": {"rate": 5000}, "slicer": {"average_size": 300,
             "size_variation": 100, "delay": 100}, "noop": {}, "slow_close": {"delay": 10}}
    failures: list[str] = []
    stop = threading.Event()

    def stream(seed: int) -> None:
        data_rng = random.Random(seed)
        try:
            while not stop.is_set():
                # Connections also come and go while the chains change.
                with connect(echo) as sock:
                    for _ in range(data_rng.randrange(1, 10)):
                        payload = data_rng.randbytes(data_rng.randrange(1, 20_000))
                        sock.sendall(payload)
                        if recv_exactly(sock, len(payload)) != payload:
                            failures.append(f"stream {seed}: bytes differ")
                            return
        except Exception as error:  # reported by the assertion below
            failures.append(f"stream {seed}: {error!r}")

    threads = [threading.Thread(target=stream, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    present: set[str] = set()
    try:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            kind, stream_name = rng.choice(sorted(kinds)), rng.choice(["upstream", "downstream"])
            name = f"{kind}_{stream_name}"
            if name in present and rng.random() < 0.5:
                assert call(proxy_server, "DELETE", f"/proxies/echo/toxics/{name}").status == 204
                present.discard(name)
            elif name in present:
                assert call(proxy_server, "POST", f"/proxies/echo/toxics/{name}", {"toxicity": rng.random()}).status == 200
            else:
                add_toxic(proxy_server, "echo", kind, stream=stream_name, toxicity=rng.random(), **kinds[kind])
                present.add(name)
            time.sleep(rng.uniform(0, 0.05))
    finally:
        stop.set()
        call(proxy_server, "POST", "/reset")
        for thread in threads:
            thread.join(60)
    assert failures == []
    assert not any(thread.is_alive() for thread in threads)


def test_stopping_the_server_releases_every_socket_and_thread(echo_server):
    """50 live connections, some mid-toxic: after stop, the process has the sockets and threads it had before."""
    import os
    import threading

    from proxy import ProxyServer

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    fds_before, threads_before = open_fds(), threading.active_count()
    clients = []
    with ProxyServer(port=0, seed=3) as server:
        listen = create_proxy(server, "echo", echo_server.address)
        add_toxic(server, "echo", "latency", stream="upstream", toxicity=0.5, latency=600_000)
        for _ in range(50):
            sock = connect(listen)
            sock.sendall(b"x")
            clients.append(sock)
        time.sleep(0.5)
    for sock in clients:
        assert recv_until_closed(sock)[1] in ("eof", "reset")  # the proxy closed its side
        sock.close()
    deadline = time.monotonic() + 20
    while (open_fds(), threading.active_count()) != (fds_before, threads_before) and time.monotonic() < deadline:
        time.sleep(0.1)  # the echo server's threads notice their clients closing
    assert (open_fds(), threading.active_count()) == (fds_before, threads_before)
