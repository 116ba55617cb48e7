"""Splitting a TCP byte stream into Kafka frames (int32 size prefix, then the request).

A size prefix that is negative, too small for a request header, or larger than
`max_frame_bytes` (Kafka's socket.request.max.bytes) is a protocol error: the caller closes
that connection instead of buffering an attacker-chosen amount of memory.
"""

from __future__ import annotations

import struct

SIZE_PREFIX = struct.Struct(">i")
# api_key (2) + api_version (2) + correlation_id (4) + client_id length (2)
MIN_REQUEST_BYTES = 10
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


class FrameError(Exception):
    """The byte stream cannot be split into frames; the connection must be closed."""


class FrameSplitter:
    """Accumulates received bytes and returns every complete frame (without its prefix)."""

    __slots__ = ("_buffer", "_max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < MIN_REQUEST_BYTES:
            raise ValueError(f"max_frame_bytes must be at least {MIN_REQUEST_BYTES}, got {max_frame_bytes}")
        self._buffer = bytearray()
        self._max_frame_bytes = max_frame_bytes

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        pos = 0
        available = len(buffer)
        while available - pos >= 4:
            (size,) = SIZE_PREFIX.unpack_from(buffer, pos)
            if size < MIN_REQUEST_BYTES:
                raise FrameError(f"frame size prefix {size} is smaller than a request header ({MIN_REQUEST_BYTES} bytes)")
            if size > self._max_frame_bytes:
                raise FrameError(f"frame size prefix {size} exceeds the limit of {self._max_frame_bytes} bytes")
            end = pos + 4 + size
            if end > available:
                break
            frames.append(bytes(buffer[pos + 4 : end]))
            pos = end
        if pos:
            del buffer[:pos]
        return frames
