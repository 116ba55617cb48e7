"""The replica fetcher's hand-written Fetch v15 request encoder agrees with kio byte for byte
(whole frames, header included), and the broker's decoder reads back what it was given."""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import EntityType
from kio.serial import entity_writer

from cluster.protocol.codec import EncodedBody, build, decode_request, encode_request, payload_class, request_class
from cluster.protocol.fetch_request import VERSION, encode_replica_fetch
from cluster.protocol.versions import ApiKey

INT8 = st.integers(0, 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
rows = st.tuples(INT32, INT32, INT64, INT32, INT64, INT32)
topics = st.lists(st.tuples(st.uuids(), st.lists(rows, max_size=4)), max_size=4)
forgotten = st.lists(st.tuples(st.uuids(), st.lists(INT32, max_size=4)), max_size=3)
# (-1, -1) is a consumer's ReplicaState: kio leaves the tagged field out, so must we; with
# either half set it is written.
replica = st.one_of(st.sampled_from([(-1, -1), (-1, 0), (0, -1), (2, 41)]), st.tuples(INT32, INT64))


def _req(name: str) -> type:
    return payload_class(ApiKey.FETCH, VERSION, name, EntityType.request)


def _kio_body(replica_id, replica_epoch, fixed, topics, forgotten, rack_id):
    max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = fixed
    return build(request_class(ApiKey.FETCH, VERSION), cluster_id=None,
                 replica_state=_req("ReplicaState")(replica_id=replica_id, replica_epoch=replica_epoch),
                 max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, max_bytes=max_bytes,
                 isolation_level=isolation_level, session_id=session_id, session_epoch=session_epoch,
                 topics=tuple(_req("FetchTopic")(topic_id=topic_id, partitions=tuple(
                     _req("FetchPartition")(partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=le,
                                            log_start_offset=s, partition_max_bytes=m) for p, e, o, le, s, m in parts))
                              for topic_id, parts in topics),
                 forgotten_topics_data=tuple(_req("ForgottenTopic")(topic_id=topic_id, partitions=tuple(parts))
                                             for topic_id, parts in forgotten),
                 rack_id=rack_id)


def _hand_body(replica_id, replica_epoch, fixed, topics, forgotten, rack_id) -> EncodedBody:
    max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = fixed
    return encode_replica_fetch(replica_id=replica_id, replica_epoch=replica_epoch, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                max_bytes=max_bytes, isolation_level=isolation_level, session_id=session_id,
                                session_epoch=session_epoch, topics=topics, forgotten=forgotten, rack_id=rack_id)


@settings(max_examples=150, deadline=None)
@given(correlation_id=st.integers(0, 2**31 - 1), client_id=st.one_of(st.none(), st.text(max_size=20)), replica=replica,
       fixed=st.tuples(st.integers(0, 2**31 - 1), INT32, INT32, INT8, INT32, INT32), topics=topics, forgotten=forgotten,
       rack_id=st.text(max_size=10))
def test_replica_fetch_request_frames_match_kio(correlation_id, client_id, replica, fixed, topics, forgotten, rack_id) -> None:
    args = (replica[0], replica[1], fixed, topics, forgotten, rack_id)
    frame = encode_request(ApiKey.FETCH, VERSION, correlation_id, client_id, _hand_body(*args))
    assert frame == encode_request(ApiKey.FETCH, VERSION, correlation_id, client_id, _kio_body(*args))


def test_the_broker_decodes_what_a_follower_sends() -> None:
    topic_a, topic_b = uuid.UUID(int=7), uuid.UUID(int=8)
    body = encode_replica_fetch(replica_id=2, replica_epoch=41, max_wait_ms=500, min_bytes=1, max_bytes=10_485_760, isolation_level=0,
                                session_id=99, session_epoch=3, topics=[(topic_a, [(0, 5, 1234, 4, 0, 1_048_576), (3, 5, 77, -1, 10, 1024)])],
                                forgotten=[(topic_b, [1, 2])])
    frame = encode_request(ApiKey.FETCH, VERSION, 17, "broker-2", body)
    request = decode_request(frame[4:])
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (ApiKey.FETCH, VERSION, 17, "broker-2")
    decoded = request.body
    assert (decoded.replica_state.replica_id, decoded.replica_state.replica_epoch) == (2, 41)
    assert (decoded.session_id, decoded.session_epoch, decoded.max_wait) == (99, 3, datetime.timedelta(milliseconds=500))
    (topic,) = decoded.topics
    assert topic.topic_id == topic_a
    assert [(p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes)
            for p in topic.partitions] == [(0, 5, 1234, 4, 0, 1_048_576), (3, 5, 77, -1, 10, 1024)]
    assert [(t.topic_id, list(t.partitions)) for t in decoded.forgotten_topics_data] == [(topic_b, [1, 2])]


@pytest.mark.parametrize("version", [11, 15])  # request header v1 (not flexible) and v2
def test_an_encoded_body_is_framed_as_kio_frames_the_entity(version: int) -> None:
    body = build(request_class(ApiKey.FETCH, version), replica_id=-1, max_wait=datetime.timedelta(milliseconds=5), min_bytes=1,
                 topics=(), forgotten_topics_data=(), rack_id="r")
    buffer = io.BytesIO()
    entity_writer(request_class(ApiKey.FETCH, version))(buffer, body)
    for client_id in (None, "", "broker-1"):
        assert (encode_request(ApiKey.FETCH, version, 5, client_id, EncodedBody(buffer.getvalue()))
                == encode_request(ApiKey.FETCH, version, 5, client_id, body))
