"""Toxiproxy's HTTP API with plain HTTP requests, as its README documents them.

Status codes, JSON fields and error bodies are Toxiproxy's (api.go): 201 for a created
proxy, 200 for a created toxic, 204 for deletions and reset, `{"error": ..., "status": ...}`
for errors.
"""

from __future__ import annotations

import json
import socket

import pytest

from proxy.api import VERSION
from tests.proxy.helpers import add_toxic, call, connect, create_proxy, recv_until_closed, round_trip_s


def test_version(proxy_server):
    reply = call(proxy_server, "GET", "/version")
    assert len(reply.request_id) == 20
    assert reply.status == 200
    assert reply.content_type == "application/json;charset=utf-8"
    assert reply.json() == {"version": VERSION}


def test_create_list_show_and_delete_a_proxy(proxy_server, echo_server):
    reply = call(proxy_server, "POST", "/proxies", {"name": "echo", "listen": "127.0.0.1:0", "upstream": echo_server.address})
    assert reply.status == 201
    assert reply.content_type == "application/json"
    created = reply.json()
    assert list(created) == ["name", "listen", "upstream", "enabled", "toxics"]
    assert created["name"] == "echo" and created["upstream"] == echo_server.address
    assert created["enabled"] is True and created["toxics"] == []
    host, port = created["listen"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0  # port 0 is replaced by the port picked

    assert call(proxy_server, "GET", "/proxies").json() == {"echo": created}
    assert call(proxy_server, "GET", "/proxies/echo").json() == created
    with connect(created["listen"]) as sock:
        round_trip_s(sock, b"through the proxy")

    assert call(proxy_server, "DELETE", "/proxies/echo").status == 204
    assert call(proxy_server, "GET", "/proxies").json() == {}
    with pytest.raises(ConnectionRefusedError):
        connect(created["listen"])


def test_proxy_errors(proxy_server, echo_server):
    create_proxy(proxy_server, "echo", echo_server.address)

    duplicate = call(proxy_server, "POST", "/proxies", {"name": "echo", "listen": "127.0.0.1:0", "upstream": echo_server.address})
    assert (duplicate.status, duplicate.json()) == (409, {"error": "proxy already exists", "status": 409})
    assert duplicate.content_type == "text/plain; charset=utf-8"  # Go's http.Error
    assert duplicate.body.endswith(b"}\n")

    for path in ("/proxies/nope", "/proxies/nope/toxics", "/proxies/nope/toxics/latency_downstream"):
        missing = call(proxy_server, "GET", path)
        assert (missing.status, missing.json()) == (404, {"error": "proxy not found", "status": 404})
    assert call(proxy_server, "DELETE", "/proxies/nope").status == 404
    assert call(proxy_server, "POST", "/proxies/nope", {"enabled": False}).status == 404

    no_name = call(proxy_server, "POST", "/proxies", {"upstream": echo_server.address})
    assert (no_name.status, no_name.json()) == (400, {"error": "missing required field: name", "status": 400})
    no_upstream = call(proxy_server, "POST", "/proxies", {"name": "x"})
    assert (no_upstream.status, no_upstream.json()) == (400, {"error": "missing required field: upstream", "status": 400})
    empty = call(proxy_server, "POST", "/proxies", raw=b"")
    assert (empty.status, empty.json()["error"]) == (400, "bad request body: EOF")
    garbage = call(proxy_server, "POST", "/proxies", raw=b"{not json")
    assert garbage.status == 400 and garbage.json()["error"].startswith("bad request body: ")
    wrong_type = call(proxy_server, "POST", "/proxies", {"name": "x", "upstream": echo_server.address, "enabled": "yes"})
    assert wrong_type.status == 400 and wrong_type.json()["error"].startswith("bad request body: ")

    # A listen address that cannot be bound is Toxiproxy's 500 (an error without a status of its own).
    taken = call(proxy_server, "GET", "/proxies/echo").json()["listen"]
    busy = call(proxy_server, "POST", "/proxies", {"name": "busy", "listen": taken, "upstream": echo_server.address})
    assert busy.status == 500
    assert busy.json()["error"] == f"listen tcp {taken}: bind: address already in use"  # Go's words
    bad_listen = call(proxy_server, "POST", "/proxies", {"name": "bad", "listen": "local373", "upstream": echo_server.address})
    assert (bad_listen.status, bad_listen.json()["error"]) == (500, "listen tcp: address local373: missing port in address")
    assert "busy" not in call(proxy_server, "GET", "/proxies").json()


def test_routing_errors(proxy_server):
    unknown = call(proxy_server, "GET", "/nowhere")
    assert (unknown.status, unknown.body) == (404, b"404 page not found\n")
    assert call(proxy_server, "PUT", "/proxies").status == 405
    assert call(proxy_server, "GET", "/reset").status == 405
    browser = call(proxy_server, "GET", "/proxies", headers={"User-Agent": "Mozilla/5.0"})
    assert (browser.status, browser.body) == (403, b"User agent not allowed\n")


def test_disable_drops_connections_and_enable_listens_again(proxy_server, echo_server):
    listen = create_proxy(proxy_server, "echo", echo_server.address)
    sock = connect(listen)
    round_trip_s(sock)

    disabled = call(proxy_server, "POST", "/proxies/echo", {"enabled": False})
    assert disabled.status == 200 and disabled.json()["enabled"] is False
    assert disabled.json()["listen"] == listen
    _, how = recv_until_closed(sock)
    assert how in ("eof", "reset")
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        connect(listen)

    enabled = call(proxy_server, "PATCH", "/proxies/echo", {"enabled": True})
    assert enabled.status == 200 and enabled.json()["enabled"] is True
    with connect(listen) as again:
        round_trip_s(again)


def test_changing_upstream_restarts_the_proxy(proxy_server, echo_server, hang_up_server):
    listen = create_proxy(proxy_server, "p", hang_up_server.address)
    with connect(listen) as sock:
        assert recv_until_closed(sock)[0] == b""
    updated = call(proxy_server, "POST", "/proxies/p", {"upstream": echo_server.address})
    assert updated.status == 200 and updated.json()["upstream"] == echo_server.address
    assert updated.json()["listen"] == listen  # same listen string: it does not differ
    with connect(listen) as sock:
        round_trip_s(sock)


def test_created_disabled(proxy_server, echo_server):
    reply = call(proxy_server, "POST", "/proxies", {"name": "off", "listen": "127.0.0.1:0", "upstream": echo_server.address,
                                                    "enabled": False})
    assert reply.status == 201 and reply.json()["enabled"] is False
    assert reply.json()["listen"] == "127.0.0.1:0"  # not resolved until it listens


def test_toxic_crud(proxy_server, echo_server):
    create_proxy(proxy_server, "echo", echo_server.address)
    created = call(proxy_server, "POST", "/proxies/echo/toxics", {"type": "latency", "attributes": {"latency": 50}})
    assert created.status == 200
    # Defaults: downstream, toxicity 1, name <type>_<stream>; attributes not given are 0.
    assert created.json() == {"attributes": {"latency": 50, "jitter": 0}, "name": "latency_downstream", "type": "latency",
                              "stream": "downstream", "toxicity": 1}
    assert list(created.json()) == ["attributes", "name", "type", "stream", "toxicity"]
    upstream = add_toxic(proxy_server, "echo", "bandwidth", stream="upstream", toxicity=0.5, rate=100)
    assert upstream["name"] == "bandwidth_upstream" and upstream["toxicity"] == 0.5

    # Upstream toxics are listed first, then downstream ones, each in chain order.
    assert [t["name"] for t in call(proxy_server, "GET", "/proxies/echo/toxics").json()] == ["bandwidth_upstream", "latency_downstream"]
    assert call(proxy_server, "GET", "/proxies/echo").json()["toxics"][1] == created.json()
    assert call(proxy_server, "GET", "/proxies/echo/toxics/latency_downstream").json() == created.json()

    # An update changes only the fields it names.
    updated = call(proxy_server, "POST", "/proxies/echo/toxics/latency_downstream", {"attributes": {"jitter": 10}})
    assert updated.status == 200
    assert updated.json()["attributes"] == {"latency": 50, "jitter": 10} and updated.json()["toxicity"] == 1
    patched = call(proxy_server, "PATCH", "/proxies/echo/toxics/latency_downstream", {"toxicity": 0.25})
    assert patched.json()["attributes"] == {"latency": 50, "jitter": 10} and patched.json()["toxicity"] == 0.25

    assert call(proxy_server, "DELETE", "/proxies/echo/toxics/latency_downstream").status == 204
    assert [t["name"] for t in call(proxy_server, "GET", "/proxies/echo/toxics").json()] == ["bandwidth_upstream"]
    gone = call(proxy_server, "GET", "/proxies/echo/toxics/latency_downstream")
    assert (gone.status, gone.json()) == (404, {"error": "toxic not found", "status": 404})
    assert call(proxy_server, "DELETE", "/proxies/echo/toxics/latency_downstream").status == 404
    assert call(proxy_server, "POST", "/proxies/echo/toxics/latency_downstream", {"toxicity": 1}).status == 404


def test_toxic_errors(proxy_server, echo_server):
    create_proxy(proxy_server, "echo", echo_server.address)
    add_toxic(proxy_server, "echo", "latency", latency=1)

    def create(body):
        reply = call(proxy_server, "POST", "/proxies/echo/toxics", body)
        return reply.status, reply.json()

    assert create({"type": "latency"}) == (409, {"error": "toxic already exists", "status": 409})
    assert create({"type": "earthquake"}) == (400, {"error": "invalid toxic type", "status": 400})
    assert create({"type": "latency", "stream": "sideways"}) == (
        400, {"error": "stream was invalid, can be either upstream or downstream", "status": 400})
    status, body = create({"type": "latency", "name": "x", "attributes": {"latency": "slow"}})
    assert status == 400 and body["error"].startswith("bad request body: ")
    status, body = create({"type": "latency", "name": "x", "attributes": {"latency": 1.5}})
    assert status == 400 and body["error"].startswith("bad request body: ")
    status, body = create({"type": "latency", "name": "x", "toxicity": "always"})
    assert status == 400 and body["error"].startswith("bad request body: ")
    assert call(proxy_server, "POST", "/proxies/echo/toxics", raw=b"").json()["error"] == "bad request body: EOF"
    # The stream is matched without regard to case and kept as written, as Toxiproxy does.
    status, body = create({"type": "noop", "stream": "UpStream"})
    assert status == 200 and body["name"] == "noop_UpStream" and body["stream"] == "UpStream"
    bad_update = call(proxy_server, "POST", "/proxies/echo/toxics/latency_downstream", {"attributes": {"jitter": "x"}})
    assert bad_update.status == 400
    assert [t["name"] for t in call(proxy_server, "GET", "/proxies/echo/toxics").json()] == ["noop_UpStream", "latency_downstream"]


def test_populate_creates_keeps_and_replaces(proxy_server, echo_server, hang_up_server):
    first = call(proxy_server, "POST", "/populate", [
        {"name": "a", "listen": "127.0.0.1:0", "upstream": echo_server.address},
        {"name": "b", "listen": "127.0.0.1:0", "upstream": echo_server.address, "enabled": False},
    ])
    assert first.status == 201
    proxies = first.json()["proxies"]
    assert [p["name"] for p in proxies] == ["a", "b"] and [p["enabled"] for p in proxies] == [True, False]
    listen_a = proxies[0]["listen"]
    add_toxic(proxy_server, "a", "latency", latency=1)

    # Same listen and upstream: kept as it is, toxics included.
    again = call(proxy_server, "POST", "/populate", [{"name": "a", "listen": listen_a, "upstream": echo_server.address}])
    assert again.status == 201 and again.json()["proxies"][0]["toxics"][0]["name"] == "latency_downstream"
    # Another upstream: replaced by a new proxy without toxics.
    replaced = call(proxy_server, "POST", "/populate", [{"name": "a", "listen": listen_a, "upstream": hang_up_server.address}])
    assert replaced.status == 201
    assert replaced.json()["proxies"][0]["upstream"] == hang_up_server.address
    assert replaced.json()["proxies"][0]["toxics"] == []
    assert call(proxy_server, "POST", "/populate", []).json() == {"proxies": None}  # Go's nil slice

    invalid = call(proxy_server, "POST", "/populate", [{"name": "c", "listen": "127.0.0.1:0"}])
    assert invalid.status == 400
    assert invalid.json() == {"error": "missing required field: upstream at proxy 1", "status": 400, "proxies": None}
    assert "c" not in call(proxy_server, "GET", "/proxies").json()
    not_a_list = call(proxy_server, "POST", "/populate", {"name": "c"})
    assert not_a_list.status == 400 and not_a_list.json()["error"].startswith("bad request body: ")


def test_reset_enables_every_proxy_and_removes_every_toxic(proxy_server, echo_server):
    listen = create_proxy(proxy_server, "echo", echo_server.address)
    add_toxic(proxy_server, "echo", "timeout", stream="upstream", timeout=0)
    add_toxic(proxy_server, "echo", "latency", latency=10)
    assert call(proxy_server, "POST", "/proxies/echo", {"enabled": False}).status == 200

    assert call(proxy_server, "POST", "/reset").status == 204
    state = call(proxy_server, "GET", "/proxies/echo").json()
    assert state["enabled"] is True and state["toxics"] == []
    with connect(listen) as sock:
        round_trip_s(sock)


def test_keep_alive_connection_serves_several_requests(proxy_server):
    with socket.create_connection((proxy_server.host, proxy_server.port), timeout=20) as sock:
        for _ in range(3):
            sock.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            header, _, body = head.partition(b"\r\n\r\n")
            length = int([line.split(b":")[1] for line in header.split(b"\r\n") if line.lower().startswith(b"content-length")][0])
            while len(body) < length:
                body += sock.recv(4096)
            assert header.startswith(b"HTTP/1.1 200 OK") and json.loads(body) == {"version": VERSION}


def test_a_host_name_listens_on_one_address(proxy_server, echo_server):
    reply = call(proxy_server, "POST", "/proxies", {"name": "named", "listen": "localhost:0", "upstream": echo_server.address})
    assert reply.status == 201
    host, port = reply.json()["listen"].rsplit(":", 1)
    assert host in ("127.0.0.1", "[::1]") and int(port) > 0
    with connect(reply.json()["listen"]) as sock:
        round_trip_s(sock)


def test_expect_100_continue(proxy_server, echo_server):
    """curl sends `Expect: 100-continue` before bodies over 1 KB and waits for the go-ahead."""
    body = json.dumps([{"name": f"p{i}", "listen": "127.0.0.1:0", "upstream": echo_server.address, "enabled": False}
                       for i in range(20)]).encode()
    assert len(body) > 1024
    with socket.create_connection((proxy_server.host, proxy_server.port), timeout=20) as sock:
        sock.sendall(b"POST /populate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = b""
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = interim.split(b"\r\n\r\n", 1)[1]
        while b"201 Created" not in answer:
            answer += sock.recv(4096)
    assert len(call(proxy_server, "GET", "/proxies").json()) == 20


def test_populate_stops_at_the_first_proxy_it_cannot_start(proxy_server, echo_server):
    """As Toxiproxy: what came before stays, the error is answered with what was done."""
    reply = call(proxy_server, "POST", "/populate", [
        {"name": "one", "listen": "127.0.0.1:0", "upstream": echo_server.address},
        {"name": "two", "listen": "local373", "upstream": echo_server.address},
        {"name": "three", "listen": "127.0.0.1:0", "upstream": echo_server.address},
    ])
    assert reply.status == 500
    body = reply.json()
    assert body["error"] == "listen tcp: address local373: missing port in address" and body["status"] == 500
    assert [p["name"] for p in body["proxies"]] == ["one"]
    assert sorted(call(proxy_server, "GET", "/proxies").json()) == ["one"]
