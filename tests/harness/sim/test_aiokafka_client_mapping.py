"""The simulated client's tables: librdkafka settings as aiokafka parameters (mapped, honoured
by behaviour, or refused by name) and aiokafka errors as Jepsen outcomes."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import errors as E

from harness.testcmd import effective_client_config
from workloads import queue
from workloads.clients.aiokafka_config import UnsupportedClientSetting, aiokafka_settings
from workloads.clients.aiokafka_errors import classify, classify_send


def test_the_queue_workloads_defaults_map_to_aiokafka_parameters() -> None:
    config = effective_client_config(queue.default_client_config({}), {})
    settings = aiokafka_settings(config, {})
    assert settings.producer == {"acks": "all", "enable_idempotence": True, "linger_ms": 0, "request_timeout_ms": 3000}
    consumer = dict(settings.consumer)
    assert [c.__name__ for c in consumer.pop("partition_assignment_strategy")] == \
        ["RangePartitionAssignor", "RoundRobinPartitionAssignor"]  # librdkafka's default
    assert consumer == {"auto_offset_reset": "earliest", "enable_auto_commit": False, "group_id": "jepsen-group",
                        "heartbeat_interval_ms": 300, "isolation_level": "read_committed", "request_timeout_ms": 10000,
                        "session_timeout_ms": 6000}
    assert settings.send_timeout_s == 10.0
    assert settings.notes["reconnect.backoff.max.ms"].startswith("not applied")
    assert "one produce request per partition" in settings.notes["max.in.flight.requests.per.connection"]


def test_jepsens_non_idempotent_producer_maps_too() -> None:
    overrides = {"enable.idempotence": "false", "acks": "1"}
    settings = aiokafka_settings(effective_client_config(queue.default_client_config({}), overrides), overrides)
    assert settings.producer["acks"] == 1 and settings.producer["enable_idempotence"] is False


@pytest.mark.parametrize("key, value, says", [
    ("reconnect.backoff.max.ms", "50", "has no equivalent"),
    ("retries", "5", "no retry count"),
    ("acks", "2", "acks all, -1, 0 or 1"),
    ("compression.type", "zstd", "none or gzip"),
    ("partition.assignment.strategy", "cooperative-sticky", "range and roundrobin"),
    ("transactional.id", "x", "only the transactional workloads' producers have one"),
    ("queue.buffering.max.kbytes", "10", "not known to the simulated client"),
    ("session.timeout.ms", "soon", "not an integer"),
])
def test_settings_that_cannot_be_honoured_are_refused_by_name(key: str, value: str, says: str) -> None:
    config = {**queue.default_client_config({}), key: value}
    with pytest.raises(UnsupportedClientSetting, match=says) as raised:
        aiokafka_settings(config, {key: value})
    assert key in str(raised.value)


@pytest.mark.parametrize("exc, type_, label", [
    (E.NotLeaderForPartitionError(), "info", "not-leader-or-follower"),
    (E.KafkaTimeoutError(), "info", "kafka-timeout"),
    (asyncio.TimeoutError(), "info", "kafka-timeout"),
    (E.KafkaConnectionError("reset"), "info", "disconnect"),
    (E.UnknownTopicOrPartitionError(), "fail", "unknown-topic-or-partition"),
    (E.NotEnoughReplicasError(), "fail", "rejected"),
    (E.CommitFailedError("gone"), "fail", "commit-rejected"),
    (E.OutOfOrderSequenceNumber(), "fail", "out-of-order-sequence"),
    (E.NotEnoughReplicasAfterAppendError(), "info", "maybe-applied"),
    (ValueError("odd"), "info", "ValueError"),
])
def test_errors_follow_jepsens_table(exc: BaseException, type_: str, label: str) -> None:
    outcome = classify(exc)
    assert outcome.type == type_
    assert (outcome.error[0] if isinstance(outcome.error, list) else outcome.error) == label
    assert outcome.end_process == isinstance(exc, E.OutOfOrderSequenceNumber)


def test_a_send_failed_with_a_retriable_error_may_have_been_appended_by_an_earlier_attempt() -> None:
    for exc in (E.LeaderNotAvailableError(), E.NotEnoughReplicasError(), E.UnknownTopicOrPartitionError()):
        outcome = classify_send(exc)
        assert outcome.type == "info" and outcome.error[0] == "maybe-applied", exc
    assert classify_send(E.MessageSizeTooLargeError()).type == "fail"  # refused on every attempt
    assert classify_send(E.OutOfOrderSequenceNumber()).end_process
