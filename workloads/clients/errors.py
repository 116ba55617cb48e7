"""Kafka errors as Jepsen outcomes: definite (fail: did not happen) or indefinite (info).

The table follows the error mapping of Jepsen's Kafka client (reference/jepsen-kafka.md
§1.4), translated from Java exception classes to the librdkafka error codes that carry the
same meaning. Where Jepsen has no row, the rule is: an error that proves the request was
rejected before it could take effect is `fail`; anything that leaves the outcome open is
`info`. Unknown errors are `info`, because calling an indefinite outcome definite is how
a harness hides lost writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError


@dataclass(frozen=True)
class Outcome:
    type: str  # "fail" | "info"
    error: Any  # a label, or [label, message] when the message carries detail
    end_process: bool = False


# code -> (type, label, include the broker's message, end the process)
_TABLE: dict[int, tuple[str, str, bool, bool]] = {}


def _row(codes: list[str], type_: str, label: str, *, message: bool = False, end: bool = False) -> None:
    for name in codes:
        code = getattr(KafkaError, name, None)
        if code is not None:
            _TABLE[code] = (type_, label, message, end)


# Jepsen's rows.
_row(["TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
      "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"], "fail", "authorization", end=True)
_row(["_TRANSPORT"], "info", "disconnect", message=True)
_row(["_STATE"], "info", "illegal-transition", message=True)
_row(["INVALID_PRODUCER_EPOCH"], "fail", "invalid-producer-epoch", message=True)
_row(["TOPIC_EXCEPTION", "_INVALID_ARG"], "fail", "invalid-topic")
_row(["INVALID_REPLICATION_FACTOR"], "fail", "invalid-replication-factor")
_row(["NETWORK_EXCEPTION", "_ALL_BROKERS_DOWN", "_RESOLVE"], "info", "network", message=True)
_row(["NOT_CONTROLLER"], "fail", "not-controller")
# Not a definite failure: the leader may have appended before it lost leadership (KAFKA-13574).
_row(["NOT_LEADER_FOR_PARTITION"], "info", "not-leader-or-follower")
_row(["OUT_OF_ORDER_SEQUENCE_NUMBER"], "fail", "out-of-order-sequence", end=True)
_row(["PRODUCER_FENCED", "_FENCED", "TRANSACTION_COORDINATOR_FENCED"], "fail", "producer-fenced", end=True)
_row(["UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"], "fail", "unknown-topic-or-partition")
_row(["UNKNOWN"], "info", "unknown-server-exception", message=True)
_row(["_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE"], "info", "kafka-timeout")
_row(["BROKER_NOT_AVAILABLE"], "fail", "broker-not-available")
# librdkafka's fatal error: the client (and any transaction) is unusable from here on.
_row(["_FATAL"], "fail", "txn-in-error-state", message=True, end=True)
# Rows Jepsen's Java client never surfaces (the Java client retries them into a timeout),
# classified by whether the broker can have applied the request.
_row(["NOT_ENOUGH_REPLICAS", "LEADER_NOT_AVAILABLE", "INVALID_REQUIRED_ACKS", "MSG_SIZE_TOO_LARGE",
      "INVALID_RECORD", "INVALID_MSG", "CORRUPT_MESSAGE", "RECORD_LIST_TOO_LARGE", "_MSG_SIZE_TOO_LARGE",
      "_QUEUE_FULL", "_PURGE_QUEUE", "POLICY_VIOLATION", "UNSUPPORTED_VERSION", "_UNSUPPORTED_FEATURE"],
     "fail", "rejected", message=True)
_row(["NOT_ENOUGH_REPLICAS_AFTER_APPEND", "KAFKA_STORAGE_ERROR", "_PURGE_INFLIGHT", "DUPLICATE_SEQUENCE_NUMBER"],
     "info", "maybe-applied", message=True)
# Group and commit errors: the coordinator refused the request, so nothing was committed.
_row(["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS", "NOT_COORDINATOR",
      "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "FENCED_INSTANCE_ID", "_NO_OFFSET",
      "INVALID_COMMIT_OFFSET_SIZE", "OFFSET_METADATA_TOO_LARGE", "_ASSIGNMENT_LOST", "UNSTABLE_OFFSET_COMMIT"],
     "fail", "commit-rejected", message=True)


def classify(error: KafkaError) -> Outcome:
    """The Jepsen outcome of a librdkafka error."""
    code = error.code()
    row = _TABLE.get(code)
    if row is None:
        return Outcome("info", [error.name(), error.str()], end_process=error.fatal())
    type_, label, with_message, end = row
    return Outcome(type_, [label, error.str()] if with_message else label, end_process=end or error.fatal())


def describe(exc: BaseException) -> Outcome:
    """The outcome of any exception a client call raised: Kafka errors by the table, anything
    else is indefinite (we cannot know how far the call got)."""
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], KafkaError):
        return classify(args[0])
    return Outcome("info", ["exception", f"{type(exc).__name__}: {exc}"])
