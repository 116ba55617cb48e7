"""The asyncio connection against a real broker process: pipelined requests are answered in
order; malformed input closes only the offending connection, with the reason in the log;
an unknown ApiVersions version gets Kafka's v0 error answer."""

from __future__ import annotations

import io
import socket
import struct

import kio.index
import pytest
from kio.serial import entity_reader, entity_writer

from cluster.launcher import LocalCluster
from cluster.protocol.client import WireClient
from tests.cluster.conftest import TEST_BROKER_CONFIG


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # One broker for the whole module: every test also checks that it is still alive.
    with LocalCluster(base_dir=tmp_path_factory.mktemp("connections"), config=TEST_BROKER_CONFIG) as shared:
        yield shared
from cluster.protocol.versions import ApiKey


def _frame(api_key: int, version: int, correlation_id: int, **body) -> bytes:
    schema = kio.index.load_request_schema(api_key, version)
    buffer = io.BytesIO()
    entity_writer(schema.__header_schema__)(buffer, schema.__header_schema__(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="raw"))
    entity_writer(schema)(buffer, schema(**body))
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def _sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _truncated(frame: bytes, drop: int) -> bytes:
    """The frame minus its last `drop` bytes, with a size prefix matching what is left."""
    payload = frame[4:-drop]
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _connect(cluster) -> socket.socket:
    broker = cluster.brokers[0]
    return socket.create_connection((broker.host, broker.port), timeout=5)


def _still_serves(cluster) -> None:
    with WireClient(cluster.brokers[0].host, cluster.brokers[0].port) as client:
        assert client.request(ApiKey.API_VERSIONS, 3, client_software_name="x", client_software_version="1").error_code.value == 0


def test_pipelined_requests_are_answered_in_order(cluster) -> None:
    with _connect(cluster) as sock:
        frames = b"".join(_frame(18, 3, i, client_software_name="p", client_software_version="1") for i in range(1, 51))
        sock.sendall(frames)
        correlation_ids = [struct.unpack_from(">i", _read_frame(sock), 0)[0] for _ in range(50)]
    assert correlation_ids == list(range(1, 51))


def test_unknown_api_versions_version_gets_a_v0_error_answer(cluster) -> None:
    with _connect(cluster) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 18, 99, 7, -1))
        answer = _read_frame(sock)
        schema = kio.index.load_response_schema(18, 0)
        body, _ = entity_reader(schema)(answer, 4)
        assert struct.unpack_from(">i", answer, 0)[0] == 7
        assert body.error_code.value == 35 and any(k.api_key == 0 for k in body.api_keys)
        # The connection stays usable, as in Kafka.
        sock.sendall(_frame(18, 3, 8, client_software_name="p", client_software_version="1"))
        assert struct.unpack_from(">i", _read_frame(sock), 0)[0] == 8


@pytest.mark.parametrize(
    "garbage, reason",
    [
        (struct.pack(">i", -5), "frame size prefix -5"),
        (struct.pack(">i", 2**31 - 1) + b"\0" * 16, "exceeds the limit"),
        (struct.pack(">ihhih", 10, 999, 0, 1, -1), "unknown API key 999"),
        (struct.pack(">ihhih", 10, 0, 1, 1, -1), "PRODUCE v1 is not supported"),
        (_truncated(_frame(18, 3, 1, client_software_name="truncated", client_software_version="1"), 3), "malformed API_VERSIONS v3"),
        (struct.pack(">i", 14) + struct.pack(">hhih", 3, 12, 1, -1) + b"\xff\xff\xff\xff", "malformed METADATA v12"),
        # An array count of 2**31: kio's native decoder alone would abort the broker process.
        (_sized(struct.pack(">hhih", 3, 12, 1, 1) + b"x\x00\xff\xff\xff\xff\x07\x00\x00\x00"), "FrameShapeError"),
    ],
)
def test_malformed_input_closes_only_that_connection(cluster, garbage, reason) -> None:
    bystander = WireClient(cluster.brokers[0].host, cluster.brokers[0].port)
    try:
        with _connect(cluster) as sock:
            sock.sendall(garbage)
            assert _closed_by_peer(sock)
        assert bystander.request(ApiKey.API_VERSIONS, 3, client_software_name="b", client_software_version="1").error_code.value == 0
        _still_serves(cluster)
        assert cluster.is_alive(0)
        with open(cluster.brokers[0].log_path) as log:
            assert reason in log.read()
    finally:
        bystander.close()
