"""A transactional id's state, as Kafka's TransactionMetadata keeps it, and the transitions
Kafka's coordinator allows between its states."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum

from cluster.broker.partition import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka bumps to a new producer id once the epoch reaches Short.MAX_VALUE - 1, so that one
# more bump (the fencing of a zombie) still fits in an int16.
MAX_PRODUCER_EPOCH = 32767 - 1


class TxnState(IntEnum):
    """Kafka's TransactionState, with its ids (they are what __transaction_state stores)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions report."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


# Which states each state may be entered from (Kafka's TransactionState.validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransition(ValueError):
    """A transition Kafka's coordinator would refuse as an IllegalStateException."""


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id as __transaction_state records it (Kafka's TransactionLogValue
    plus the key). Immutable: a transition builds the next value, which is written to the
    log and only then installed."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    # The id and epoch before the last bump: a producer retrying InitProducerId after a lost
    # answer (KIP-360) presents them and gets the current ones back.
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    start_ms: int = -1  # when the ongoing transaction began; -1 when none
    update_ms: int = -1  # the last transition
    # Kafka's hasFailedEpochFence, kept in memory only (never written): writing a fencing
    # abort failed, and this value already carries the bumped epoch, which no client was
    # told. The producer that opened the transaction stays fenced, and the next fence
    # (InitProducerId's retry, the timeout) reuses the epoch instead of bumping it again.
    failed_epoch_fence: bool = False

    def transition(self, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: {self.state.kafka_name} -> {state.kafka_name} is not allowed")
        return dataclasses.replace(self, state=state, update_ms=now_ms, **changes)  # type: ignore[arg-type]

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH
