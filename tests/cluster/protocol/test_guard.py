"""The request shape check accepts every well-formed request kio writes, for every API
version offered, and turns mutated ones into RequestError instead of letting kio's native
decoder abort the process."""

from __future__ import annotations

import io
import random

import kio.index
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from cluster.protocol.codec import RequestError, decode_request
from cluster.protocol.guard import check_request_shape
from cluster.protocol.versions import SUPPORTED_VERSIONS
from tests.cluster.protocol.kio_limits import readable_durations

st.register_type_strategy(Records, st.binary(max_size=200))
OFFERED = [(int(key), version) for key, r in SUPPORTED_VERSIONS.items() for version in range(r.min_version, r.max_version + 1)]
FORGED_LENGTHS = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\xff\xff"]


def _frame(api_key: int, version: int, entity) -> bytes:
    schema = kio.index.load_request_schema(api_key, version)
    buffer = io.BytesIO()
    header = schema.__header_schema__(request_api_key=api_key, request_api_version=version, correlation_id=1, client_id="fuzz")
    entity_writer(schema.__header_schema__)(buffer, header)
    entity_writer(schema)(buffer, entity)
    return buffer.getvalue()


@pytest.mark.parametrize("api_key, version", OFFERED)
def test_valid_requests_pass_and_mutations_never_crash(api_key: int, version: int) -> None:
    schema = kio.index.load_request_schema(api_key, version)
    rng = random.Random(api_key * 100 + version)

    @settings(max_examples=4, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.from_type(schema))
    def check(entity) -> None:
        assume(readable_durations(entity))
        frame = _frame(api_key, version, entity)
        check_request_shape(frame, api_key, version)
        assert decode_request(frame).body == entity
        for _ in range(30):
            mutated = bytearray(frame)
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            if rng.random() < 0.5:
                at = rng.randrange(8, len(mutated) + 1) if len(mutated) > 8 else len(mutated)
                mutated[at:at] = rng.choice(FORGED_LENGTHS)
            try:
                decode_request(bytes(mutated))
            except RequestError:
                pass

    check()
