"""Request decoding and cold-path response encoding on kio.

Readers and writers are cached per (api key, version): looking the schema up on every call
costs about three times the decode itself. Every decode failure becomes a `RequestError`
whose message names the API, version and what was wrong, so the runtime can log it and
close only the offending connection.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from dataclasses import dataclass
from functools import cache
from collections.abc import Mapping
from typing import Any

import kio.index
from kio.index import EntityType
from kio.serial import entity_reader, entity_writer
from kio.schema.errors import ErrorCode

from cluster.protocol.guard import check_request_shape
from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS, api_name, is_supported

_PEEK = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class RequestError(Exception):
    """A request that cannot be served; the connection that sent it is closed."""


class UnsupportedVersionError(RequestError):
    def __init__(self, message: str, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity of (api_key, api_version)
    size_bytes: int
    trailing_bytes: int = 0  # bytes in the frame after the body, ignored (see decode_request)


@cache
def _readers(api_key: int, api_version: int) -> tuple[Any, Any]:
    schema = kio.index.load_request_schema(api_key, api_version)
    return entity_reader(schema.__header_schema__), entity_reader(schema)


@cache
def _writers(api_key: int, api_version: int) -> tuple[type, Any, Any]:
    schema = kio.index.load_response_schema(api_key, api_version)
    header = schema.__header_schema__
    return header, entity_writer(header), entity_writer(schema)


def response_header_is_flexible(api_key: int, api_version: int) -> bool:
    """Response header v1 (with a tagged-field byte) or v0; ApiVersions is always v0."""
    return _writers(api_key, api_version)[0].__flexible__


def peek_header(frame: bytes) -> tuple[int, int, int]:
    if len(frame) < _PEEK.size:
        raise RequestError(f"request of {len(frame)} bytes is shorter than its header")
    return _PEEK.unpack_from(frame, 0)


def decode_request(frame: bytes, supported: Mapping[ApiKey, Any] | None = None) -> Request:
    """Decode one request frame; `supported` is the version table of the node serving it
    (the broker's by default; the controller serves a different set of APIs)."""
    api_key, api_version, correlation_id = peek_header(frame)
    table = SUPPORTED_VERSIONS if supported is None else supported
    if not _in_table(table, api_key, api_version):
        try:
            ApiKey(api_key)
        except ValueError:
            raise RequestError(f"unknown API key {api_key} (correlation id {correlation_id})") from None
        if ApiKey(api_key) not in table:
            raise RequestError(f"{api_name(api_key)} is not served here (correlation id {correlation_id})")
        offered = table[ApiKey(api_key)]
        raise UnsupportedVersionError(
            f"{api_name(api_key)} v{api_version} is not supported (offered v{offered.min_version}-v{offered.max_version})",
            api_key,
            api_version,
            correlation_id,
        )
    read_header, read_body = _readers(api_key, api_version)
    try:
        # kio's native reader would abort the process on an absurd array count: check first.
        check_request_shape(frame, api_key, api_version)
        header, header_size = read_header(frame, 0)
        body, body_size = read_body(frame, header_size)
    except Exception as error:  # noqa: BLE001 - any decoder failure is the client's bad frame
        raise RequestError(f"malformed {api_name(api_key)} v{api_version} request: {type(error).__name__}: {error}") from None
    # Bytes after the body are ignored, as Kafka's broker ignores them (it parses the body
    # from the frame and never checks what remains). librdkafka 2.16 relies on it: its
    # "all topics" Metadata v13 request has 3 bytes after the body as the schema reads it
    # (captured: body 00 00 00 00 01 00 00 where null topics, two bools and an empty
    # tagged-field count take 4), and refusing them closed every AdminClient.list_topics()
    # connection.
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame), len(frame) - header_size - body_size)


def _in_table(table: Mapping[ApiKey, Any], api_key: int, api_version: int) -> bool:
    if table is SUPPORTED_VERSIONS:
        return is_supported(api_key, api_version)
    try:
        entry = table.get(ApiKey(api_key))
    except ValueError:
        return False
    return entry is not None and entry.min_version <= api_version <= entry.max_version


@cache
def _request_writers(api_key: int, api_version: int) -> tuple[type, Any, Any]:
    schema = kio.index.load_request_schema(api_key, api_version)
    header = schema.__header_schema__
    return header, entity_writer(header), entity_writer(schema)


@cache
def _response_readers(api_key: int, api_version: int) -> tuple[Any, Any]:
    schema = kio.index.load_response_schema(api_key, api_version)
    return entity_reader(schema.__header_schema__), entity_reader(schema)


@cache
def request_class(api_key: int, api_version: int) -> type:
    return kio.index.load_request_schema(api_key, api_version)


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A request body already in wire bytes, from a hand-written hot-path encoder
    (cluster/protocol/fetch_request.py); `encode_request` frames it as it frames a kio body."""

    data: bytes


_HEADER_V1 = struct.Struct(">hhih")


def _encoded_request(header_cls: type, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                     body: EncodedBody) -> bytes:
    # Request header v1 or v2 (the only ones kio has) by hand: kio's writer for it costs more
    # than the body's encoder.
    name = None if client_id is None else client_id.encode()
    head = _HEADER_V1.pack(api_key, api_version, correlation_id, -1 if name is None else len(name)) + (name or b"")
    if header_cls.__flexible__:
        head += b"\0"  # no tagged fields
    return _SIZE.pack(len(head) + len(body.data)) + head + body.data


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A whole request frame (size prefix, header, body), for node-to-node traffic. `body` is
    a kio request entity or an `EncodedBody`."""
    header_cls, write_header, write_body = _request_writers(api_key, api_version)
    if isinstance(body, EncodedBody):
        return _encoded_request(header_cls, api_key, api_version, correlation_id, client_id, body)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_cls(request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id))
    write_body(buffer, body)
    out = buffer.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buffer.getvalue()


def decode_response(api_key: int, api_version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity) from a response frame without its size prefix.
    Raises ValueError naming the API when the payload does not decode."""
    read_header, read_body = _response_readers(api_key, api_version)
    try:
        header, used = read_header(payload, 0)
        body, _ = read_body(payload, used)
    except Exception as error:  # noqa: BLE001 - a peer's bad answer, reported to the caller
        raise ValueError(f"malformed {api_name(api_key)} v{api_version} response: {type(error).__name__}: {error}") from None
    return header.correlation_id, body


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame (size prefix, header, body) encoded by kio."""
    header_cls, write_header, write_body = _writers(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_cls(correlation_id=correlation_id))
    write_body(buffer, body)
    out = buffer.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buffer.getvalue()


def encode_response_body(api_key: int, api_version: int, body: Any) -> bytes:
    """A response body alone, for an answer sent many times (frame it with frame_response)."""
    _, _, write_body = _writers(api_key, api_version)
    out = io.BytesIO()
    write_body(out, body)
    return out.getvalue()


def frame_response(api_key: int, api_version: int, correlation_id: int, encoded_body: bytes) -> bytes:
    """A whole response frame around a body encoded by encode_response_body: byte for byte
    what encode_response gives for that body."""
    header_cls, write_header, _ = _writers(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_cls(correlation_id=correlation_id))
    buffer.write(encoded_body)
    out_view = buffer.getbuffer()
    _SIZE.pack_into(out_view, 0, len(out_view) - 4)
    del out_view
    return buffer.getvalue()


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """The v0-format ApiVersions answer Kafka sends for a version it does not know.

    It carries error 35 and the full version table so the client can pick a version it and
    we both speak (librdkafka retries with v0).
    """
    schema = kio.index.load_response_schema(ApiKey.API_VERSIONS, 0)
    keys = payload_class(ApiKey.API_VERSIONS, 0, "ApiVersion")
    body = schema(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(keys(api_key=int(k), min_version=r.min_version, max_version=r.max_version) for k, r in sorted(SUPPORTED_VERSIONS.items())),
    )
    return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


@cache
def response_class(api_key: int, api_version: int) -> type:
    return kio.index.load_response_schema(api_key, api_version)


@cache
def payload_class(api_key: int, api_version: int, name: str, entity_type: EntityType = EntityType.response) -> type:
    """A nested entity class (e.g. "PartitionData") of one version's request or response."""
    module = kio.index.load_payload_module(api_key, api_version, entity_type)
    return getattr(module, name)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **values: Any) -> Any:
    """Construct `cls`, dropping the values for fields this version does not have.

    One handler then serves every version of an API; fields that only newer versions carry
    are passed always and silently omitted for older ones.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)
