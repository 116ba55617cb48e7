"""A length check of a whole request before kio's native decoder sees it.

kio 0.6.5's native reader sizes arrays from their count prefix before reading them: a frame
claiming an array of 2**31 elements makes it try to allocate tens of gigabytes, and the
Rust allocator aborts the whole process (measured: "memory allocation of 48233990904 bytes
failed", then SIGABRT). One hostile or corrupt frame must cost one connection, not the
broker, so every request is first walked here, following its schema: each array count,
string and bytes length and tagged-field size must fit in the bytes that remain. The walk
only skips over values; it builds nothing.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache

import kio.index
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field, get_field_tag, get_schema_field_type, is_optional

# (buffer, position, end) -> position after the value
Skip = Callable[[bytes, int, int], int]

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class FrameShapeError(ValueError):
    """A length prefix in the request points past the end of the frame."""


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:
        return buf[pos], pos + 1
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise FrameShapeError(f"varint runs past the end of the frame at byte {pos}")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise FrameShapeError(f"varint longer than 10 bytes at byte {pos}")


def _overrun(what: str, size: int, pos: int, end: int) -> FrameShapeError:
    return FrameShapeError(f"{what} of {size} at byte {pos} exceeds the {end - pos} bytes left")


def _need(pos: int, size: int, end: int, what: str) -> int:
    if size < 0 or pos + size > end:
        raise _overrun(what, size, pos, end)
    return pos + size


def _fixed(size: int) -> Skip:
    return lambda buf, pos, end: _need(pos, size, end, "field")


def _legacy_string(buf: bytes, pos: int, end: int) -> int:
    _need(pos, 2, end, "string length")
    (length,) = _INT16.unpack_from(buf, pos)
    return pos + 2 if length == -1 else _need(pos + 2, length, end, "string")


def _legacy_bytes(buf: bytes, pos: int, end: int) -> int:
    _need(pos, 4, end, "bytes length")
    (length,) = _INT32.unpack_from(buf, pos)
    return pos + 4 if length == -1 else _need(pos + 4, length, end, "bytes")


def _compact_bytes(buf: bytes, pos: int, end: int) -> int:
    length, pos = _uvarint(buf, pos, end)
    return pos if length == 0 else _need(pos, length - 1, end, "bytes")


def _primitive(kafka_type: str, flexible: bool, field_name: str) -> Skip:
    if kafka_type in _FIXED_SIZES:
        return _fixed(_FIXED_SIZES[kafka_type])
    if kafka_type == "string":
        return _compact_bytes if flexible else _legacy_string
    if kafka_type in ("bytes", "records"):
        return _compact_bytes if flexible else _legacy_bytes
    raise TypeError(f"no length rule for kafka type {kafka_type!r} of field {field_name}")


def _array(element: Skip, flexible: bool, min_element_bytes: int) -> Skip:
    element_bytes = max(min_element_bytes, 1)

    def skip(buf: bytes, pos: int, end: int) -> int:
        if flexible:
            raw, pos = _uvarint(buf, pos, end)
            count = raw - 1
        else:
            _need(pos, 4, end, "array length")
            (count,) = _INT32.unpack_from(buf, pos)
            pos += 4
            if count < -1:
                raise FrameShapeError(f"array length {count} at byte {pos - 4}")
        if count <= 0:
            return pos
        # Every element takes at least one byte, so no honest count exceeds what is left.
        if pos + count * element_bytes > end:
            raise _overrun("array of elements", count, pos, end)
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return skip


def _nullable_entity(inner: Skip) -> Skip:
    def skip(buf: bytes, pos: int, end: int) -> int:
        _need(pos, 1, end, "nullable entity marker")
        return pos + 1 if buf[pos] == 0xFF else inner(buf, pos + 1, end)

    return skip


@cache
def _entity(cls: type, is_request_header: bool = False) -> Skip:
    flexible = cls.__flexible__
    # Runs of fixed-size fields are merged into one byte count: the walk then costs one step
    # per variable-length field only.
    steps: list[int | Skip] = []
    tagged: dict[int, Skip] = {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = _field(field, flexible, optional=False)
            continue
        fixed = None if field.name == "client_id" else _fixed_size(field)
        if fixed is not None:
            if steps and isinstance(steps[-1], int):
                steps[-1] += fixed
            else:
                steps.append(fixed)
        elif is_request_header and field.name == "client_id":
            steps.append(_legacy_string)  # always the legacy encoding, even in header v2
        else:
            steps.append(_field(field, flexible, optional=is_optional(field)))

    def skip_entity(buf: bytes, pos: int, end: int) -> int:
        for step in steps:
            if step.__class__ is int:
                pos += step  # type: ignore[operator]
                if pos > end:
                    raise _overrun("fixed fields", step, pos - step, end)  # type: ignore[operator]
            else:
                pos = step(buf, pos, end)  # type: ignore[operator]
        if not flexible:
            return pos
        count, pos = _uvarint(buf, pos, end)
        if pos + count * 2 > end:
            raise _overrun("tagged fields", count, pos, end)
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            stop = pos + size
            if stop > end:
                raise _overrun("tagged field", size, pos, end)
            if tag in tagged:
                tagged[tag](buf, pos, stop)
            pos = stop
        return pos

    return skip_entity


def _fixed_size(field: dataclasses.Field) -> int | None:  # type: ignore[type-arg]
    if isinstance(classify_field(field), PrimitiveField):
        return _FIXED_SIZES.get(get_schema_field_type(field))
    return None


def _field(field: dataclasses.Field, flexible: bool, optional: bool) -> Skip:  # type: ignore[type-arg]
    match classify_field(field):
        case PrimitiveField():
            return _primitive(get_schema_field_type(field), flexible, field.name)
        case PrimitiveTupleField():
            kafka_type = get_schema_field_type(field)
            return _array(_primitive(kafka_type, flexible, field.name), flexible, _FIXED_SIZES.get(kafka_type, 1))
        case EntityField(entity_type):
            inner = _entity(entity_type)
            return _nullable_entity(inner) if optional else inner
        case EntityTupleField(entity_type):
            return _array(_entity(entity_type), flexible, 1)
    raise TypeError(f"cannot classify field {field.name}")


@cache
def _request_checker(api_key: int, api_version: int) -> Skip:
    schema = kio.index.load_request_schema(api_key, api_version)
    check_header = _entity(schema.__header_schema__, is_request_header=True)
    check_body = _entity(schema)

    def check(buf: bytes, pos: int, end: int) -> int:
        return check_body(buf, check_header(buf, pos, end), end)

    return check


def check_request_shape(frame: bytes, api_key: int, api_version: int) -> None:
    """Raise FrameShapeError if a length prefix in `frame` overruns it."""
    _request_checker(api_key, api_version)(frame, 0, len(frame))
