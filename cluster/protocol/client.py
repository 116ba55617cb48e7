"""A minimal blocking Kafka-protocol client on kio, for the launcher's readiness probe and
`logquake cluster status`. Not a general client: one request at a time, no retries."""

from __future__ import annotations

import io
import socket
import struct
from functools import cache
from typing import Any

import kio.index
from kio.serial import entity_reader, entity_writer

from cluster.protocol.codec import build

_SIZE = struct.Struct(">i")


@cache
def _codecs(api_key: int, api_version: int) -> tuple[type, type, Any, Any, Any, Any]:
    request = kio.index.load_request_schema(api_key, api_version)
    response = kio.index.load_response_schema(api_key, api_version)
    return (
        request,
        request.__header_schema__,
        entity_writer(request.__header_schema__),
        entity_writer(request),
        entity_reader(response.__header_schema__),
        entity_reader(response),
    )


class ProtocolClientError(Exception):
    """The peer closed the connection or answered with something unreadable."""


class WireClient:
    def __init__(self, host: str, port: int, *, timeout_s: float = 5.0, client_id: str = "logquake-wire") -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._client_id = client_id
        self._next_correlation_id = 1

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def request(self, api_key: int, api_version: int, **fields: Any) -> Any:
        """Send one request built from `fields` (extra fields for other versions dropped)."""
        schema, header_schema, write_header, write_body, read_header, read_body = _codecs(api_key, api_version)
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        buffer = io.BytesIO()
        buffer.write(b"\0\0\0\0")
        write_header(buffer, header_schema(request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=self._client_id))
        write_body(buffer, build(schema, **fields))
        frame = bytearray(buffer.getvalue())
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        self._sock.sendall(frame)
        (size,) = _SIZE.unpack(self._read_exactly(4))
        payload = self._read_exactly(size)
        header, used = read_header(payload, 0)
        if header.correlation_id != correlation_id:
            raise ProtocolClientError(f"correlation id {header.correlation_id} in answer to request {correlation_id}")
        body, _ = read_body(payload, used)
        return body

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(size - len(chunks))
            if not chunk:
                raise ProtocolClientError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)
