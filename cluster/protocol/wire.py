"""Primitive Kafka wire encodings (big-endian ints, varints, strings, arrays), for the
hand-written hot-path encoders and the record-batch builder."""

from __future__ import annotations

import struct
import uuid

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"unsigned varint cannot encode {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zig-zag signed varint (record fields), 64-bit range."""
    return uvarint((value << 1) ^ (value >> 63))


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at `pos`; returns (value, next position)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    if flexible:
        return uvarint(len(data) + 1) + data
    return INT16.pack(len(data)) + data


def nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else INT16.pack(-1)
    return string(value, flexible)


def bytes_length(size_bytes: int | None, flexible: bool) -> bytes:
    """The length prefix of a (nullable) bytes field; None means null."""
    if size_bytes is None:
        return b"\x00" if flexible else INT32.pack(-1)
    return uvarint(size_bytes + 1) if flexible else INT32.pack(size_bytes)


def array_length(count: int | None, flexible: bool) -> bytes:
    if count is None:
        return b"\x00" if flexible else INT32.pack(-1)
    return uvarint(count + 1) if flexible else INT32.pack(count)


def uuid_bytes(value: uuid.UUID) -> bytes:
    return value.bytes


def tagged_fields(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field section: count, then (tag, size, value) in ascending tag order."""
    out = bytearray(uvarint(len(fields)))
    for tag, value in sorted(fields):
        out += uvarint(tag)
        out += uvarint(len(value))
        out += value
    return bytes(out)
