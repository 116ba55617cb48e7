"""Metadata answers are reused while the broker's metadata image is unchanged
(topic_api.MetadataAnswers): a reused answer is the bytes a fresh one would be, for any
correlation id and version; a record applied, a replaced image, another request shape or the
registration flipping gives a fresh answer; an answer naming a missing topic is never reused
(asking for it starts its auto-creation)."""

from __future__ import annotations

import datetime
import uuid

import pytest

from kio.schema.errors import ErrorCode

from cluster.broker import topic_api
from cluster.metadata.image import MetadataImage
from cluster.protocol.codec import build, decode_response, encode_response, encode_response_body, frame_response, payload_class, response_class
from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import create_topic, metadata


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, object]]:
    """Every Metadata answer the broker builds afresh: (version, requested topics)."""
    calls: list[tuple[int, object]] = []
    build_answer = topic_api._metadata_answer

    def counting(broker, request, image, allow_auto_create):  # type: ignore[no-untyped-def]
        topics = request.body.topics
        calls.append((request.api_version, None if topics is None else tuple(t.name for t in topics)))
        return build_answer(broker, request, image, allow_auto_create)

    monkeypatch.setattr(topic_api, "_metadata_answer", counting)
    return calls


def test_an_unchanged_image_answers_from_the_memo_and_a_change_answers_anew(built: list[tuple[int, object]]) -> None:
    driver = CoreDriver()
    create_topic(driver, "orders", 2)
    built.clear()
    first = metadata(driver, ["orders"])
    for _ in range(5):
        assert metadata(driver, ["orders"]) == first
    assert built == [(12, ("orders",))]
    # Another version, topic list or auto-creation flag is another answer.
    metadata(driver, ["orders"], version=9)
    metadata(driver, None)
    metadata(driver, ["orders"], auto_create=False)
    assert len(built) == 4
    # A record applied (a new topic) moves the image on: every answer is built again.
    before = driver.broker.controller_client.image.next_offset
    create_topic(driver, "payments", 3)
    assert driver.broker.controller_client.image.next_offset > before
    listed = metadata(driver, None)
    assert {t.name for t in listed.topics} >= {"orders", "payments"}
    assert metadata(driver, ["orders"]) == first  # the same content, built again
    assert built[4:] == [(12, None), (12, ("orders",))]


def test_an_answer_naming_a_missing_topic_is_built_every_time(built: list[tuple[int, object]]) -> None:
    driver = CoreDriver()
    for _ in range(3):
        refused = metadata(driver, ["absent"], auto_create=False)
        assert refused.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert len(built) == 3
    # With auto-creation on, the first answer starts the creation and is retriable; once the
    # broker's image has the topic the answer shows it (nothing stale was kept).
    asked = metadata(driver, ["lazy"])
    assert asked.topics[0].error_code is ErrorCode.leader_not_available
    driver.run_until(lambda: metadata(driver, ["lazy"]).topics[0].error_code is ErrorCode.none, 5000, "lazy created")
    assert len(metadata(driver, ["lazy"]).topics[0].partitions) == 1


def test_a_replaced_image_is_another_image_even_at_the_same_offset() -> None:
    memo = topic_api.MetadataAnswers()
    old, new = MetadataImage(), MetadataImage()
    old.next_offset = new.next_offset = 7
    key = (12, True, True, None)
    memo.put(old, key, b"old answer")
    assert memo.get(old, key) == b"old answer"
    assert memo.get(new, key) is None
    old.next_offset = 8  # a record applied in place
    assert memo.get(old, key) is None


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_api.MetadataAnswers, "MAX_ENTRIES", 2)
    memo, image = topic_api.MetadataAnswers(), MetadataImage()
    for n in range(3):
        memo.put(image, (12, True, True, (f"t{n}",)), f"answer {n}".encode())
    assert [memo.get(image, (12, True, True, (f"t{n}",))) for n in range(3)] == [None, b"answer 1", b"answer 2"]


def _answer(version: int, leader: int) -> object:
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
def test_a_framed_body_is_the_plain_encoding_for_any_correlation_id(version: int) -> None:
    body = _answer(version, leader=2)
    encoded = encode_response_body(ApiKey.METADATA, version, body)
    for correlation_id in (0, 7, 2**31 - 1):
        frame = frame_response(ApiKey.METADATA, version, correlation_id, encoded)
        assert frame == encode_response(ApiKey.METADATA, version, correlation_id, body)
        assert decode_response(ApiKey.METADATA, version, frame[4:]) == (correlation_id, body)
