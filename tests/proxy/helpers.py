"""Plain HTTP calls to the API (urllib, as Toxiproxy's docs describe them) and socket helpers."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from proxy import ProxyServer

# Generous: the machine is shared; a test fails on a missing byte, never on a slow one.
SOCKET_TIMEOUT_S = 20.0


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    request_id: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


def call(server: ProxyServer, method: str, path: str, body: Any = None, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> Reply:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(server.url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT_S) as response:
            return Reply(response.status, response.headers.get("Content-Type", ""), response.read(),
                         response.headers.get("X-Toxiproxy-Request-Id", ""))
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.headers.get("Content-Type", ""), error.read(), error.headers.get("X-Toxiproxy-Request-Id", ""))


def create_proxy(server: ProxyServer, name: str, upstream: str, **fields: Any) -> str:
    """Create a proxy on a free loopback port; its listen address."""
    reply = call(server, "POST", "/proxies", {"name": name, "listen": "127.0.0.1:0", "upstream": upstream, **fields})
    assert reply.status == 201, reply
    return reply.json()["listen"]


def add_toxic(server: ProxyServer, proxy: str, toxic_type: str, stream: str = "downstream", toxicity: float = 1.0,
              **attributes: int) -> dict[str, Any]:
    reply = call(server, "POST", f"/proxies/{proxy}/toxics",
                 {"type": toxic_type, "stream": stream, "toxicity": toxicity, "attributes": attributes})
    assert reply.status == 200, reply
    return reply.json()


def connect(listen: str) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError(f"connection closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def round_trip_s(sock: socket.socket, payload: bytes = b"ping") -> float:
    """Send `payload` through an echo proxy and wait for all of it back; the seconds it took."""
    started = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - started


def recv_until_closed(sock: socket.socket) -> tuple[bytes, str]:
    """Everything until the peer closes: (data, 'eof' or 'reset')."""
    data = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(data), "reset"
        if not chunk:
            return bytes(data), "eof"
        data += chunk
