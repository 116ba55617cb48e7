"""Fetch of `__cluster_metadata`-0 (long poll, woken by appends, by name and by topic id) and
ApiVersions, as brokers use them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo
from cluster.controller.core import CONTROLLER_VERSIONS
from cluster.metadata.records import METADATA_TOPIC, METADATA_TOPIC_ID, RegisterBrokerRecord
from cluster.protocol.codec import Request
from cluster.protocol.versions import ApiKey
from tests.cluster.controller.driver import ControllerDriver, fetched_records


@pytest.mark.parametrize("version", [12, 13, 15, 16])
def test_fetch_returns_records_from_the_offset(controller: ControllerDriver, version: int) -> None:
    controller.start_brokers([0, 1])
    body = controller.call(ApiKey.FETCH, version, controller.fetch_body(1, version=version))
    topic = body.responses[0]
    assert topic.topic == METADATA_TOPIC if version < 13 else topic.topic_id == METADATA_TOPIC_ID
    partition = topic.partitions[0]
    assert partition.high_watermark == controller.end_offset
    records = fetched_records(body)
    # Whole batches come back: the first batch may start before the offset asked for.
    assert [o for o, _ in records if o >= 1] == list(range(1, controller.end_offset))


def test_long_poll_waits_then_answers_empty(controller: ControllerDriver) -> None:
    controller.start_brokers([0])
    answer = controller.send(ApiKey.FETCH, 12, controller.fetch_body(controller.end_offset, max_wait_ms=400))
    controller.scheduler.advance(390)
    assert answer.response is None
    controller.scheduler.advance(20)
    assert answer.response is not None
    assert fetched_records(controller.result(ApiKey.FETCH, 12, answer)) == []


def test_long_poll_wakes_on_append(controller: ControllerDriver) -> None:
    controller.start_brokers([0])
    end = controller.end_offset
    answer = controller.send(ApiKey.FETCH, 13, controller.fetch_body(end, max_wait_ms=400, version=13))
    assert answer.response is None
    controller.register(1)  # a decision: appended, and the waiting fetch is answered at once
    assert answer.response is not None
    [(offset, record)] = fetched_records(controller.result(ApiKey.FETCH, 13, answer))
    assert offset == end and isinstance(record, RegisterBrokerRecord) and record.broker_id == 1


def test_fetch_beyond_the_end_is_out_of_range(controller: ControllerDriver) -> None:
    controller.start_brokers([0])
    body = controller.call(ApiKey.FETCH, 12, controller.fetch_body(controller.end_offset + 5))
    assert body.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


def test_fetch_of_another_topic_closes_the_connection(controller: ControllerDriver) -> None:
    body = controller.fetch_body(0)
    other = replace(body.topics[0], topic="orders")
    answer = controller.send(ApiKey.FETCH, 12, replace(body, topics=(other,)))
    assert answer.response is not None and answer.response.chunks is None and answer.response.close_connection


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_lists_exactly_what_the_controller_serves(controller: ControllerDriver, version: int) -> None:
    body = controller.request(ApiKey.API_VERSIONS, version, client_software_name="tester", client_software_version="1")
    assert body.error_code == ErrorCode.none
    served = {int(k.api_key): (k.min_version, k.max_version) for k in body.api_keys}
    assert served == {int(k): (r.min_version, r.max_version) for k, r in CONTROLLER_VERSIONS.items()}
    assert int(ApiKey.PRODUCE) not in served and int(ApiKey.BROKER_HEARTBEAT) in served


def test_a_request_the_controller_does_not_serve_closes_the_connection(controller: ControllerDriver) -> None:
    answers = []
    controller.controller.handle(Request(ApiKey.PRODUCE, 9, 1, "tester", None, 0), ClientInfo("tester", "/127.0.0.1"), answers.append)
    assert len(answers) == 1 and answers[0].close_connection and "does not serve" in answers[0].close_reason
