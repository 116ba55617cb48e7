"""aiokafka errors as Jepsen outcomes: definite (fail: did not happen) or indefinite (info).

The simulated run's counterpart of `errors.py` (librdkafka codes): the same labels and the
same rule, row by row. Jepsen's rows come first; where Jepsen has no row, an error that
proves the request was rejected before it could take effect is `fail`, anything that leaves
the outcome open is `info`, and an error not in the table is `info` (calling an indefinite
outcome definite is how a harness hides lost writes).

aiokafka raises exception classes rather than codes; an exception is looked up by its class
and then its base classes, so a subclass aiokafka adds later falls under its parent's row.
"""

from __future__ import annotations

import asyncio

from aiokafka import errors as E

from workloads.clients.errors import Outcome

# class -> (type, label, include the message, end the process)
_TABLE: dict[type, tuple[str, str, bool, bool]] = {}


def _row(classes: list[type], type_: str, label: str, *, message: bool = False, end: bool = False) -> None:
    for cls in classes:
        _TABLE[cls] = (type_, label, message, end)


# Jepsen's rows (the Java client's exceptions; aiokafka keeps the Kafka names).
_row([E.TopicAuthorizationFailedError, E.GroupAuthorizationFailedError, E.ClusterAuthorizationFailedError,
      E.TransactionalIdAuthorizationFailed], "fail", "authorization", end=True)
_row([E.KafkaConnectionError], "info", "disconnect", message=True)
_row([E.IllegalStateError], "info", "illegal-transition", message=True)
_row([E.InvalidProducerEpoch], "fail", "invalid-producer-epoch", message=True)
_row([E.InvalidTopicError], "fail", "invalid-topic")
_row([E.InvalidReplicationFactorError], "fail", "invalid-replication-factor")
_row([E.NodeNotReadyError, E.NoBrokersAvailable, E.KafkaUnavailableError, E.StaleMetadata],
     "info", "network", message=True)
_row([E.NotControllerError], "fail", "not-controller")
# Not a definite failure: the leader may have appended before it lost leadership (KAFKA-13574).
_row([E.NotLeaderForPartitionError], "info", "not-leader-or-follower")
_row([E.OutOfOrderSequenceNumber], "fail", "out-of-order-sequence", end=True)
_row([E.ProducerFenced, E.TransactionCoordinatorFenced], "fail", "producer-fenced", end=True)
_row([E.UnknownTopicOrPartitionError], "fail", "unknown-topic-or-partition")
_row([E.UnknownError], "info", "unknown-server-exception", message=True)
_row([E.KafkaTimeoutError, E.RequestTimedOutError, asyncio.TimeoutError], "info", "kafka-timeout")
_row([E.BrokerNotAvailableError], "fail", "broker-not-available")
# Rows Jepsen's Java client never surfaces, by whether the broker can have applied the request.
_row([E.NotEnoughReplicasError, E.LeaderNotAvailableError, E.InvalidRequiredAcksError, E.MessageSizeTooLargeError,
      E.CorruptRecordException, E.RecordListTooLargeError, E.RecordTooLargeError, E.PolicyViolationError,
      E.UnsupportedVersionError, E.UnsupportedCodecError], "fail", "rejected", message=True)
_row([E.NotEnoughReplicasAfterAppendError, E.KafkaStorageError, E.DuplicateSequenceNumber], "info", "maybe-applied",
     message=True)
# Group and commit errors: the coordinator refused the request, so nothing was committed.
_row([E.CommitFailedError, E.IllegalGenerationError, E.UnknownMemberIdError, E.RebalanceInProgressError,
      E.NotCoordinatorForGroupError, E.GroupCoordinatorNotAvailableError, E.GroupLoadInProgressError,
      E.InvalidCommitOffsetSizeError, E.OffsetMetadataTooLargeError], "fail", "commit-rejected", message=True)


def classify(exc: BaseException) -> Outcome:
    """The Jepsen outcome of an exception an aiokafka call raised (or our own send deadline,
    asyncio.TimeoutError): by its class, else its nearest listed base class, else info."""
    for cls in type(exc).__mro__:
        row = _TABLE.get(cls)
        if row is not None:
            type_, label, with_message, end = row
            return Outcome(type_, [label, str(exc)] if with_message else label, end_process=end)
    return Outcome("info", [type(exc).__name__, str(exc)])


def classify_send(exc: BaseException) -> Outcome:
    """The outcome of a failed send. aiokafka retries a batch after a retriable error and, when
    the batch expires, fails it with the error of its last attempt: an earlier attempt whose
    answer a fault cut off (a request timeout, a partition) may have been appended. A
    retriable error is therefore indefinite here, whatever the table says of the request that
    raised it (a seeded --sim run read back a send failed with LEADER_NOT_AVAILABLE after a
    partition healed: G1a on the safe cluster). librdkafka reports such a message with its
    own timeout error, which the confluent table calls indefinite already."""
    outcome = classify(exc)
    if outcome.type == "fail" and getattr(exc, "retriable", False):
        label = outcome.error[0] if isinstance(outcome.error, list) else outcome.error
        return Outcome("info", ["maybe-applied", f"{label}: {exc}"], end_process=outcome.end_process)
    return outcome
