"""Idempotent-producer state of one partition: per producer id, its epoch and the last five
appended batches (Kafka's NUM_BATCHES_TO_RETAIN, matching max.in.flight <= 5).

`check` decides what a sequenced batch is before it is appended; `record` notes a batch
after it is appended (also when rebuilding from the log's batch headers on startup, so
de-duplication survives restarts).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from cluster.storage.batch import BatchHeader, NO_SEQUENCE

BATCHES_TO_RETAIN = 5
_SEQUENCE_MODULUS = 2**31


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_epoch: int
    # The max timestamp of its last appended batch (DescribeProducers' lastTimestamp).
    last_timestamp_ms: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


@dataclass(frozen=True, slots=True)
class Append:
    """The batch is new and in sequence: append it."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: answer with its original offsets."""

    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Reject:
    error: ErrorCode
    message: str


SequenceVerdict = Append | Duplicate | Reject


class ProducerStateTable:
    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def entries(self) -> list[tuple[int, ProducerEntry]]:
        """Every producer this partition knows, by producer id."""
        return sorted(self._entries.items())

    def check(self, header: BatchHeader) -> SequenceVerdict:
        if not header.has_producer_id or header.base_sequence == NO_SEQUENCE:
            return Append()
        entry = self._entries.get(header.producer_id)
        first, last = header.base_sequence, header.last_sequence
        if entry is None:
            if first != 0:
                return Reject(
                    ErrorCode.unknown_producer_id,
                    f"producer {header.producer_id} is unknown to this partition and its first batch starts at sequence {first}, not 0",
                )
            return Append()
        if header.producer_epoch < entry.producer_epoch:
            return Reject(
                ErrorCode.invalid_producer_epoch,
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than the current {entry.producer_epoch}",
            )
        if header.producer_epoch > entry.producer_epoch:
            if first != 0:
                return Reject(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {header.producer_id} new epoch {header.producer_epoch} must start at sequence 0, not {first}",
                )
            return Append()
        for batch in entry.batches:
            if batch.first_sequence == first and batch.last_sequence == last:
                return Duplicate(batch.base_offset, batch.last_offset)
        expected = (entry.last_sequence + 1) % _SEQUENCE_MODULUS
        if first != expected:
            return Reject(
                ErrorCode.out_of_order_sequence_number,
                f"producer {header.producer_id} epoch {header.producer_epoch}: sequence {first} received, {expected} expected",
            )
        return Append()

    def record(self, header: BatchHeader) -> None:
        """Note an appended batch (header carries its final base offset)."""
        if not header.has_producer_id:
            return
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            entry = ProducerEntry(header.producer_epoch)
            self._entries[header.producer_id] = entry
        elif header.producer_epoch < entry.producer_epoch:
            return
        entry.last_timestamp_ms = header.max_timestamp_ms
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset))

    def clear(self) -> None:
        self._entries.clear()
