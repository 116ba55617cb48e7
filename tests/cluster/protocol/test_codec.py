"""Request decoding and framing: good frames decode; every kind of bad frame is a clear
error naming what is wrong (the runtime closes that one connection)."""

from __future__ import annotations

import io
import struct

import kio.index
import pytest
from kio.serial import entity_writer

from cluster.protocol.codec import RequestError, UnsupportedVersionError, decode_request, unsupported_api_versions_response
from cluster.protocol.frames import FrameError, FrameSplitter
from cluster.protocol.guard import check_request_shape
from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS


def _request_frame(api_key: int, version: int, correlation_id: int, **body) -> bytes:
    schema = kio.index.load_request_schema(api_key, version)
    header = schema.__header_schema__(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="test")
    buffer = io.BytesIO()
    entity_writer(schema.__header_schema__)(buffer, header)
    entity_writer(schema)(buffer, schema(**body))
    return buffer.getvalue()


def test_decodes_an_api_versions_request() -> None:
    frame = _request_frame(18, 3, 41, client_software_name="lq", client_software_version="1")
    request = decode_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (18, 3, 41, "test")
    assert request.body.client_software_name == "lq"


def test_unknown_api_key_is_an_error_naming_the_key() -> None:
    with pytest.raises(RequestError, match="unknown API key 999"):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))


def test_unsupported_version_carries_the_correlation_id() -> None:
    with pytest.raises(UnsupportedVersionError, match="PRODUCE v2 is not supported") as caught:
        decode_request(struct.pack(">hhih", 0, 2, 77, -1))
    assert caught.value.correlation_id == 77


def test_truncated_request_is_an_error_naming_the_api() -> None:
    frame = _request_frame(18, 3, 1, client_software_name="lq", client_software_version="1")
    with pytest.raises(RequestError, match="malformed API_VERSIONS v3"):
        decode_request(frame[:-4])


def test_trailing_bytes_after_the_body_are_ignored_as_kafka_does() -> None:
    frame = _request_frame(18, 3, 1, client_software_name="lq", client_software_version="1")
    request = decode_request(frame + b"xx")
    assert (request.body.client_software_name, request.trailing_bytes, request.size_bytes) == ("lq", 2, len(frame) + 2)
    assert decode_request(frame).trailing_bytes == 0


# The "all topics" Metadata v13 request of librdkafka 2.16 (confluent-kafka 2.16.1), captured
# from AdminClient.list_topics() through a TCP proxy: header (key 3, v13, correlation id 3,
# client id "rdkafka", no tags), then 7 body bytes where the schema reads 4 (null topics, two
# bools, empty tagged fields). The broker closed the connection on the 3 left over.
LIBRDKAFKA_ALL_TOPICS_METADATA_V13 = bytes.fromhex("0003000d00000003000772646b61666b610000000000010000")


def test_librdkafka_all_topics_metadata_v13_request_decodes_to_null_topics() -> None:
    request = decode_request(LIBRDKAFKA_ALL_TOPICS_METADATA_V13)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (3, 13, 3, "rdkafka")
    assert request.body.topics is None  # null: every topic, as list_topics() asks
    assert request.trailing_bytes == 3


def test_a_body_cut_short_is_still_an_error_when_trailing_bytes_are_allowed() -> None:
    with pytest.raises(RequestError, match="malformed METADATA v13"):
        decode_request(LIBRDKAFKA_ALL_TOPICS_METADATA_V13[:20])


def test_unsupported_api_versions_answer_is_v0_with_error_35_and_the_table() -> None:
    frame = unsupported_api_versions_response(5)
    size, correlation_id, error_code, count = struct.unpack_from(">iihi", frame, 0)
    assert (size, correlation_id, error_code, count) == (len(frame) - 4, 5, 35, len(SUPPORTED_VERSIONS))
    assert struct.unpack_from(">hhh", frame, 14) == (ApiKey.PRODUCE, 3, 10)


def test_splitter_returns_whole_frames_across_arbitrary_chunking() -> None:
    frames = [_request_frame(18, 3, i, client_software_name="x" * i, client_software_version="1") for i in range(5)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    splitter = FrameSplitter()
    out: list[bytes] = []
    for i in range(0, len(stream), 7):
        out += splitter.feed(stream[i : i + 7])
    assert out == frames and splitter.buffered_bytes == 0


@pytest.mark.parametrize("size", [-1, 0, 9, 2**31 - 1])
def test_splitter_rejects_bad_size_prefixes(size: int) -> None:
    with pytest.raises(FrameError, match=f"frame size prefix {size}"):
        FrameSplitter(max_frame_bytes=1024).feed(struct.pack(">i", size) + b"\0" * 12)


def _metadata_frame_with_topic_count(encoded_count: bytes) -> bytes:
    # Metadata v12 request: header v2 (key, version, correlation id, client id, no tags),
    # then the topics compact array whose count we forge.
    return struct.pack(">hhih", 3, 12, 5, 1) + b"x" + b"\x00" + encoded_count + b"\x00\x00\x00"


@pytest.mark.parametrize("encoded_count", [b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x08", b"\x90\x4e"])
def test_absurd_array_counts_are_rejected_before_the_native_decoder(encoded_count: bytes) -> None:
    # kio's native reader would try to allocate the array up front and abort the process.
    with pytest.raises(RequestError, match="malformed METADATA v12 request: FrameShapeError"):
        decode_request(_metadata_frame_with_topic_count(encoded_count))


def test_shape_check_accepts_what_kio_writes() -> None:
    frame = _request_frame(3, 12, 9, topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    check_request_shape(frame, 3, 12)
    assert decode_request(frame).body.topics is None
