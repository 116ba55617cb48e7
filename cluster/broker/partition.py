"""One partition replica on this broker: its log, leader epoch, high watermark, idempotent
producer state, and the long-poll fetches waiting for it to grow.

The high watermark is kept apart from the log end offset because replication (next issue)
will move it only when the ISR has the data; with this broker as the only replica every
append advances it to the log end at once. It never depends on fsync, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from cluster.broker.producer_state import ProducerStateTable
from cluster.storage.batch import BatchHeader, restamp
from cluster.storage.log import PartitionLog


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Partition:
    def __init__(self, tp: TopicPartition, log: PartitionLog, leader_epoch: int, broker_id: int) -> None:
        self.tp = tp
        self.log = log
        self.leader_epoch = leader_epoch
        self.leader_id = broker_id
        self.replicas = [broker_id]
        self.isr = [broker_id]
        self.producers = ProducerStateTable()
        self.high_watermark = log.log_end_offset
        # Callbacks of pending long-poll fetches, called after each append.
        self._append_listeners: set[Callable[[], None]] = set()
        self._rebuild_producer_state()
        if log.epochs.latest_epoch < leader_epoch:
            log.epochs.assign(leader_epoch, log.log_end_offset)

    def _rebuild_producer_state(self) -> None:
        self.producers.clear()
        for header in self.log.batch_headers(from_offset=self.log.log_start_offset):
            self.producers.record(header)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        # No transactions yet: nothing is open, so the LSO is the high watermark.
        return self.high_watermark

    def append_as_leader(self, batch: bytes | memoryview, now_ms: int) -> BatchHeader:
        """Restamp `batch` at the log end with the current epoch and append it."""
        stamped = restamp(batch, self.log.log_end_offset, self.leader_epoch)
        header = self.log.append(stamped, now_ms=now_ms)
        self.producers.record(header)
        self._advance_high_watermark()
        return header

    def append_internal(self, build: Callable[[int, int], bytes], now_ms: int) -> BatchHeader:
        """Append a batch the broker builds itself, given (base_offset, leader_epoch)."""
        batch = build(self.log.log_end_offset, self.leader_epoch)
        header = self.log.append(batch, now_ms=now_ms)
        self._advance_high_watermark()
        return header

    def _advance_high_watermark(self) -> None:
        # Sole replica: the ISR is this broker, so everything appended is committed.
        self.high_watermark = self.log.log_end_offset
        self.wake_fetchers()

    def wake_fetchers(self) -> None:
        """Let every pending long-poll fetch on this partition re-check (after an append,
        or when the partition goes away)."""
        for listener in list(self._append_listeners):
            listener()

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        self._append_listeners.add(listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        self._append_listeners.discard(listener)

    def read(self, fetch_offset: int, max_bytes: int) -> list[bytes | memoryview]:
        return self.log.read(fetch_offset, max_bytes, max_offset=self.high_watermark)

    def leader_epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """KIP-320: a client behind our epoch is fenced; one ahead of it knows of a leader
        change we have not seen yet. -1 means the client does not say."""
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return None
        return ErrorCode.fenced_leader_epoch if current_leader_epoch < self.leader_epoch else ErrorCode.unknown_leader_epoch
