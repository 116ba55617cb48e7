"""A small HTTP/1.1 server on asyncio streams, enough for a JSON API on loopback.

Requests: a request line, headers, and a body by Content-Length or chunked encoding;
connections are kept alive unless the client asks otherwise. No TLS, no pipelining
guarantees beyond answering requests in order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Awaitable, Callable

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
IDLE_TIMEOUT_S = 60.0  # Toxiproxy's API server's idle timeout


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


class BadRequest(Exception):
    pass


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler) -> None:
    try:
        while True:
            try:
                request = await asyncio.wait_for(_read_request(reader, writer), IDLE_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError):
                return
            except BadRequest as error:
                await _write(writer, Response(400, f"400 Bad Request: {error}".encode(), "text/plain; charset=utf-8"), False)
                return
            if request is None:
                return
            response = await handler(request)
            keep_alive = _keep_alive(request)
            await _write(writer, response, keep_alive, head_only=request.method == "HEAD")
            if not keep_alive:
                return
    except (ConnectionError, OSError):
        return
    except asyncio.CancelledError:
        # The server is closing. Ending normally matters: asyncio's stream callback calls
        # exception() on this task, which raises (and is logged) for a cancelled one.
        return
    finally:
        writer.close()


async def _read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial.strip():
            return None
        raise BadRequest("incomplete request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest("request head too large") from None
    if len(head) > MAX_HEADER_BYTES:
        raise BadRequest("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    method, target, version = parts
    headers: dict[str, str] = {"_version": version}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest("malformed header line")
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":  # curl asks before bodies over 1 KB
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if length < 0 or length > MAX_BODY_BYTES:
            raise BadRequest("bad Content-Length")
        body = await reader.readexactly(length)
    return Request(method, target, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            raise BadRequest("body too large")
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _keep_alive(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.headers.get("_version") == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"


async def _write(writer: asyncio.StreamWriter, response: Response, keep_alive: bool, head_only: bool = False) -> None:
    reason = HTTPStatus(response.status).phrase
    lines = [f"HTTP/1.1 {response.status} {reason}", f"Date: {formatdate(usegmt=True)}"]
    if response.content_type is not None:
        lines.append(f"Content-Type: {response.content_type}")
    lines.extend(f"{name}: {value}" for name, value in response.headers.items())
    if response.status not in (204, 304):
        lines.append(f"Content-Length: {len(response.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if response.status not in (204, 304) and not head_only:
        writer.write(response.body)
    await writer.drain()
