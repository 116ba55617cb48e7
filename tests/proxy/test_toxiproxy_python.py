"""Toxiproxy's own Python client (toxiproxy-python 0.1.1 from PyPI) drives the proxy unchanged.

The client has no call for updating a toxic; tests/proxy/test_http_api.py covers that over
plain HTTP.
"""

from __future__ import annotations

import time

import pytest
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from proxy.api import VERSION
from tests.proxy.helpers import connect, recv_until_closed, round_trip_s

LATENCY_MS = 100


def test_server_calls(toxiproxy):
    assert toxiproxy.running() is True
    assert toxiproxy.version() == f'{{"version": "{VERSION}"}}\n'.encode()
    assert toxiproxy.proxies() == {}


def test_proxy_lifecycle_and_toxics(toxiproxy, echo_server):
    proxy = toxiproxy.create(upstream=echo_server.address, name="echo")
    assert (proxy.name, proxy.upstream, proxy.enabled) == ("echo", echo_server.address, True)
    assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")
    assert set(toxiproxy.proxies()) == {"echo"}
    assert toxiproxy.get_proxy("echo").listen == proxy.listen
    assert toxiproxy.get_proxy("nope") is None
    with pytest.raises(ProxyExists):
        toxiproxy.create(upstream=echo_server.address, name="echo")

    with connect(proxy.listen) as sock:
        round_trip_s(sock)  # a connection opened before the toxic: it applies to it too
        proxy.add_toxic(type="latency", attributes={"latency": LATENCY_MS})
        toxics = proxy.toxics()
        assert list(toxics) == ["latency_downstream"]
        toxic = toxics["latency_downstream"]
        assert (toxic.type, toxic.stream, toxic.toxicity, toxic.attributes) == (
            "latency", "downstream", 1, {"latency": LATENCY_MS, "jitter": 0})
        assert round_trip_s(sock) >= LATENCY_MS / 1000 - 0.002
        with pytest.raises(ProxyExists):  # 409: the client names every 409 ProxyExists
            proxy.add_toxic(type="latency", attributes={"latency": 1})
        with pytest.raises(InvalidToxic):
            proxy.add_toxic(type="earthquake")
        assert proxy.destroy_toxic("latency_downstream") is True
        assert proxy.toxics() == {}
        with pytest.raises(NotFound):
            proxy.destroy_toxic("latency_downstream")

    with proxy.down():
        assert toxiproxy.get_proxy("echo").enabled is False
        with pytest.raises(ConnectionRefusedError):
            connect(proxy.listen)
    assert toxiproxy.get_proxy("echo").enabled is True
    with connect(proxy.listen) as sock:
        round_trip_s(sock)

    assert toxiproxy.destroy(proxy) is True
    assert toxiproxy.proxies() == {}
    with pytest.raises(NotFound):
        proxy.destroy()


def test_populate_reset_and_destroy_all(toxiproxy, echo_server):
    created = toxiproxy.populate([
        {"name": "one", "upstream": echo_server.address, "listen": "127.0.0.1:0"},
        {"name": "two", "upstream": echo_server.address, "listen": "127.0.0.1:0"},
    ])
    assert sorted(p.name for p in created) == ["one", "two"]
    one = toxiproxy.get_proxy("one")
    one.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    one.disable()
    assert toxiproxy.get_proxy("one").enabled is False

    assert toxiproxy.reset() is True
    one = toxiproxy.get_proxy("one")
    assert one.enabled is True and one.toxics() == {}
    with connect(one.listen) as sock:
        round_trip_s(sock)

    toxiproxy.destroy_all()
    assert toxiproxy.proxies() == {}


def test_timeout_toxic_through_the_client(toxiproxy, echo_server):
    """The client's usual chaos step: a timeout toxic holds traffic, and removing it lets new connections work."""
    proxy = toxiproxy.create(upstream=echo_server.address, name="echo")
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 300})
    started = time.monotonic()
    with connect(proxy.listen) as sock:
        sock.sendall(b"lost")
        data, _ = recv_until_closed(sock)
    assert data == b"" and time.monotonic() - started >= 0.3
    assert echo_server.received_bytes == 0
    proxy.destroy_toxic("timeout_upstream")
    with connect(proxy.listen) as sock:
        round_trip_s(sock)
