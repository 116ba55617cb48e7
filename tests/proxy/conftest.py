"""Fixtures for the proxy tests: a ProxyServer on a free port, real TCP servers, the client.

Everything is torn down when the test ends, also when it fails: the server's context closes
every listener and connection it made, and the test servers close theirs.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

from proxy import ProxyServer
from tests.proxy.tcp_servers import EchoServer, HangUpServer

SEED = 20261125


@pytest.fixture
def proxy_server() -> Iterator[ProxyServer]:
    with ProxyServer(port=0, seed=SEED) as server:
        yield server


@pytest.fixture
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def hang_up_server() -> Iterator[HangUpServer]:
    server = HangUpServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def toxiproxy(proxy_server: ProxyServer) -> Iterator[Toxiproxy]:
    """toxiproxy-python pointed at the test's server (its address is class-wide: restored after)."""
    saved = (APIConsumer.host, APIConsumer.port)
    client = Toxiproxy()
    client.update_api_consumer(proxy_server.host, proxy_server.port)
    try:
        yield client
    finally:
        APIConsumer.host, APIConsumer.port = saved
