"""encode_response_cached: the frame of a Metadata answer whose body was encoded lately reuses
that body's bytes. Frames equal encode_response's byte for byte, whatever the correlation id
and header version; an answer that differs in any field is encoded anew; the cache stays
bounded, its oldest entry going first."""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest

from kio.schema.errors import ErrorCode

from cluster.protocol import codec
from cluster.protocol.codec import build, decode_response, encode_response, encode_response_cached, payload_class, response_class
from cluster.protocol.versions import ApiKey


def metadata(version: int, leader: int) -> object:
    broker = payload_class(ApiKey.METADATA, version, "MetadataResponseBroker")
    topic = payload_class(ApiKey.METADATA, version, "MetadataResponseTopic")
    partition = payload_class(ApiKey.METADATA, version, "MetadataResponsePartition")
    parts = (build(partition, error_code=ErrorCode.none, partition_index=0, leader_id=leader, leader_epoch=3, replica_nodes=(0, 1, 2),
                   isr_nodes=(0, 1, 2), offline_replicas=()),)
    return build(response_class(ApiKey.METADATA, version), throttle_time=datetime.timedelta(0),
                 brokers=tuple(build(broker, node_id=n, host=f"127.0.0.{n + 1}", port=9092, rack=None) for n in range(3)),
                 cluster_id="c", controller_id=0,
                 topics=(build(topic, error_code=ErrorCode.none, name="t", topic_id=uuid.UUID(int=1), is_internal=False, partitions=parts,
                               topic_authorized_operations=-(2**31)),),
                 cluster_authorized_operations=-(2**31), error_code=ErrorCode.none)


@pytest.mark.parametrize("version", [1, 9, 12])  # header v0 and flexible v1
def test_cached_frames_equal_fresh_ones_for_any_correlation_id_and_change_with_the_answer(version: int) -> None:
    codec._BODY_CACHE.clear()
    first, moved = metadata(version, leader=0), metadata(version, leader=1)
    for correlation_id in (7, 8, 2**31 - 1):
        frame = encode_response_cached(ApiKey.METADATA, version, correlation_id, first)
        assert frame == encode_response(ApiKey.METADATA, version, correlation_id, first)
        assert decode_response(ApiKey.METADATA, version, frame[4:]) == (correlation_id, first)
    assert len(codec._BODY_CACHE) == 1
    frame = encode_response_cached(ApiKey.METADATA, version, 9, moved)  # the leader moved: not the cached bytes
    assert decode_response(ApiKey.METADATA, version, frame[4:])[1].topics[0].partitions[0].leader_id == 1
    assert len(codec._BODY_CACHE) == 2


def test_the_cache_is_bounded_and_drops_its_oldest_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    codec._BODY_CACHE.clear()
    monkeypatch.setattr(codec, "BODY_CACHE_ENTRIES", 2)
    bodies = [metadata(12, leader) for leader in (0, 1, 2)]
    for body in bodies:
        encode_response_cached(ApiKey.METADATA, 12, 1, body)
    assert [key[2] for key in codec._BODY_CACHE] == bodies[1:]


def test_an_answer_that_cannot_be_hashed_is_encoded_plainly() -> None:
    codec._BODY_CACHE.clear()
    body = metadata(12, leader=0)
    unhashable = dataclasses.replace(body, brokers=list(body.brokers))
    frame = encode_response_cached(ApiKey.METADATA, 12, 5, unhashable)
    assert frame == encode_response(ApiKey.METADATA, 12, 5, body) and not codec._BODY_CACHE
