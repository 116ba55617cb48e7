"""ApiVersions advertises exactly what is served: every advertised API key and version
decodes (kio) and reaches a broker handler that answers it; an API key that is not
advertised never reaches a handler (the connection is refused with a clear error)."""

from __future__ import annotations

import dataclasses
import io
import uuid
from typing import Any

import kio.index
import pytest
from kio.serial import entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, PrimitiveTupleField, classify_field, get_field_tag, get_schema_field_type, is_optional

from cluster.protocol.codec import RequestError, decode_request
from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS
from cluster.broker.env import ClientInfo
from tests.cluster.broker.core_driver import CoreDriver, Pending

ADVERTISED = [(key, version) for key, r in sorted(SUPPORTED_VERSIONS.items()) for version in range(r.min_version, r.max_version + 1)]
# Every field at its smallest value, except where that value means "send no answer".
NON_ZERO = {(ApiKey.PRODUCE, "acks"): 1}
_ZERO_PRIMITIVE: dict[str, Any] = {"string": "", "bytes": b"", "records": None, "bool": False, "uuid": uuid.UUID(int=0)}


def _zero(cls: type, api_key: int) -> Any:
    values = {}
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None and field.default is not dataclasses.MISSING:
            continue
        match classify_field(field):
            case PrimitiveField():
                kafka_type = get_schema_field_type(field)
                value = _ZERO_PRIMITIVE.get(kafka_type, 0)
                if kafka_type.startswith("timedelta"):
                    value = __import__("datetime").timedelta(0)
                elif kafka_type == "datetime_i64":
                    value = __import__("datetime").datetime.fromtimestamp(0, __import__("datetime").timezone.utc)
                if is_optional(field) and kafka_type != "string":
                    value = None
                values[field.name] = NON_ZERO.get((api_key, field.name), value)
            case PrimitiveTupleField() | EntityTupleField():
                values[field.name] = ()
            case EntityField(entity_type):
                values[field.name] = None if is_optional(field) else _zero(entity_type, api_key)
    return cls(**values)


def _frame(api_key: int, version: int, correlation_id: int) -> bytes:
    schema = kio.index.load_request_schema(api_key, version)
    buffer = io.BytesIO()
    header = schema.__header_schema__(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="t")
    entity_writer(schema.__header_schema__)(buffer, header)
    entity_writer(schema)(buffer, _zero(schema, api_key))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def driver() -> CoreDriver:
    return CoreDriver()


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED, ids=[f"{k.name}-v{v}" for k, v in ADVERTISED])
def test_every_advertised_version_decodes_and_is_answered(driver, api_key, version) -> None:
    request = decode_request(_frame(api_key, version, 7))
    assert (request.api_key, request.api_version, request.trailing_bytes) == (api_key, version, 0)
    pending = Pending(api_key, version)
    driver.broker.handle(request, ClientInfo("t", "/127.0.0.1"), pending)
    driver.run_until(lambda: pending.done, 10_000, f"an answer to {api_key.name} v{version}")
    assert pending.response.chunks is not None, f"{api_key.name} v{version} closed the connection: {pending.response.close_reason}"
    pending.body  # the answer decodes as this version's response


@pytest.mark.parametrize("api_key", [k for k in range(100) if k not in {int(a) for a in SUPPORTED_VERSIONS}])
def test_an_api_key_not_advertised_never_reaches_a_handler(api_key) -> None:
    with pytest.raises(RequestError, match=r"is not served here|unknown API key"):
        decode_request(bytes.fromhex(f"{api_key:04x}000000000001ffff"))
