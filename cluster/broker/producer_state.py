"""Idempotent-producer state of one partition: per producer id, its epoch and the last five
appended batches (Kafka's NUM_BATCHES_TO_RETAIN, matching max.in.flight <= 5).

`check` decides what a sequenced batch is before it is appended; `record` notes a batch
after it is appended (also when rebuilding from the log's batch headers on startup, so
de-duplication survives restarts).

Transactions (KIP-98): a producer's first transactional batch opens its ongoing transaction
at that batch's offset; a control batch (the coordinator's commit or abort marker) ends it.
The last stable offset is the first offset of the earliest transaction not yet decided, where
a transaction counts as undecided until its marker is below the high watermark (as Kafka's
unreplicated transactions). An abort marker returns the aborted transaction, which the log
keeps in its segment's aborted-transaction index for read_committed fetches.

KIP-890 part 1's verification guard (Kafka's VerificationGuard): before the leader asks the
coordinator whether a batch that would open its producer's transaction here belongs to the
ongoing transaction, `start_verification` hands out the producer's guard (a fresh one unless
a verification since its last transactional write holds one). Any transactional batch of the
producer written here, data or marker, on the leader or replayed on a follower, drops it. A
batch that opens a transaction is appended only with the producer's current guard
(`check_verified`), so a verification answered before the transaction's abort marker was
written but arriving after it cannot open a transaction the coordinator has already ended
(the answer was true when given, stale when used). Guards are in memory only, as Kafka's.

The table is the ReplayedState of its partition's log (cluster/storage/producer_snapshot.py):
the log replays every appended batch into it, on the leader and on followers alike, so a new
leader serves read_committed as the old one did; it snapshots the table at each segment roll
and at a clean close, and on open restores the newest good snapshot and replays only the
batches after it.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from cluster.protocol.records import read_control_marker
from cluster.storage.batch import BatchHeader, NO_SEQUENCE
from cluster.storage.disk import Bytes
from cluster.storage.txn_index import AbortedTxn, ControlMarker

BATCHES_TO_RETAIN = 5
_SEQUENCE_MODULUS = 2**31
# Snapshot payload: counts, then per producer its entry and retained batches, then the
# undecided transactions.
_COUNT = struct.Struct(">I")
_PRODUCER = struct.Struct(">qhqiqB")  # id, epoch, last timestamp, coordinator epoch, txn first offset, batches
_BATCH = struct.Struct(">iiqq")  # first sequence, last sequence, base offset, last offset
_UNDECIDED = struct.Struct(">qqq")  # producer id, first offset, marker offset


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
    # The epoch of the coordinator that wrote this producer's last marker (-1: none yet): a
    # marker from an older coordinator is fenced.
    coordinator_epoch: int = -1
    # First offset of its ongoing transaction on this partition, -1 when none is open.
    current_txn_first_offset: int = -1

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


@dataclass(frozen=True, slots=True, eq=False)
class VerificationGuard:
    """One verification of a producer's first transactional batch on a partition; compared
    by identity, so a guard dropped by a write is never matched again (a new verification
    gets a new one even if the producer and epoch are the same: the ABA case of a
    transaction aborted and the next one started before a stale answer arrives). `serial`
    only names it in logs."""

    serial: int


@dataclass(frozen=True, slots=True)
class _Unreplicated:
    """A transaction ended by a marker not yet below the high watermark (Kafka's
    unreplicatedTxns): it still holds the last stable offset back."""

    producer_id: int
    first_offset: int
    marker_offset: int


class ProducerStateTable:
    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        # The transactions that hold the LSO back (Kafka's ongoingTxns and unreplicatedTxns):
        # open ones, producer id -> first offset, inserted (so ordered) by first offset; and
        # ended ones in marker order, until the high watermark passes their marker.
        self._open: dict[int, int] = {}
        self._unreplicated: deque[_Unreplicated] = deque()
        # KIP-890 part 1: the guard of each producer with a verification started and no
        # transactional write here since (Kafka's verificationStates).
        self._guards: dict[int, VerificationGuard] = {}
        self._guard_serial = 0

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
        if (entry is not None and not header.is_transactional and entry.current_txn_first_offset >= 0
                and header.producer_epoch >= entry.producer_epoch):
            # Kafka's ProducerAppendInfo: a producer with an open transaction writes
            # transactional batches only, until the marker ends it.
            return Reject(
                ErrorCode.invalid_txn_state,
                f"producer {header.producer_id} has an ongoing transaction from offset {entry.current_txn_first_offset}: "
                f"a non-transactional batch is refused",
            )
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

    def start_verification(self, producer_id: int) -> VerificationGuard:
        """The guard an append of this producer's transaction-opening batch must present once
        the coordinator has verified it: the one a verification since the producer's last
        transactional write here holds, else a new one."""
        guard = self._guards.get(producer_id)
        if guard is None:
            self._guard_serial += 1
            guard = self._guards[producer_id] = VerificationGuard(self._guard_serial)
        return guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        """The producer's current guard, None when no verification is pending."""
        return self._guards.get(producer_id)

    def has_ongoing_txn(self, producer_id: int) -> bool:
        entry = self._entries.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def check_verified(self, header: BatchHeader, guard: VerificationGuard | None) -> Reject | None:
        """Kafka's check at append (UnifiedLog's batchMissingRequiredVerification), for a
        client's batch when verification is on: a transactional data batch either continues
        its producer's ongoing transaction here or presents the producer's current guard.
        Otherwise its transaction ended (a marker dropped the guard) or it was never
        verified: INVALID_TXN_STATE, which the producer takes as an abortable error."""
        if not header.is_transactional or header.is_control:
            return None
        return self.check_verified_producer(header.producer_id, header.producer_epoch, guard)

    def check_verified_producer(self, producer_id: int, producer_epoch: int,
                                guard: VerificationGuard | None) -> Reject | None:
        """check_verified for a transactional data batch of this producer not built yet (a
        broker-built batch, TxnOffsetCommit's offsets)."""
        if self.has_ongoing_txn(producer_id):
            return None
        current = self._guards.get(producer_id)
        if guard is not None and guard is current:
            return None
        why = ("its verification was not started" if guard is None
               else f"its verification (guard {guard.serial}) was overtaken by a transactional write or marker"
                    f" (current guard: {'none' if current is None else current.serial})")
        return Reject(ErrorCode.invalid_txn_state,
                      f"producer {producer_id} epoch {producer_epoch}: the batch is not part of an ongoing "
                      f"transaction on this partition; {why}")

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Reject | None:
        """May a marker of this producer, sent by a coordinator in `coordinator_epoch`, be
        appended? Kafka's appendEndTxnMarker checks: the producer epoch is not older than the
        partition's, the coordinator epoch not older than the last marker's."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.producer_epoch:
            return Reject(ErrorCode.invalid_producer_epoch,
                          f"marker for producer {producer_id} epoch {producer_epoch} is older than the current {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            return Reject(ErrorCode.transaction_coordinator_fenced,
                          f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                          f"older than the last marker's {entry.coordinator_epoch}")
        return None

    def replay(self, header: BatchHeader, control_batch: Bytes | None) -> AbortedTxn | None:
        """ReplayedState: apply a batch the log stored (a control batch with its bytes)."""
        marker = read_control_marker(control_batch) if control_batch is not None and header.is_control else None
        return self.record(header, marker)

    def record(self, header: BatchHeader, marker: ControlMarker | None = None) -> AbortedTxn | None:
        """Note an appended batch (header carries its final base offset). A control batch
        comes with its decoded marker; returns the transaction an abort marker aborted."""
        if not header.has_producer_id:
            return None
        if header.is_transactional and self._guards:
            # As Kafka's updateProducers: a transactional write (data: the transaction is
            # open here now; marker: it ended) ends any verification in flight for it.
            self._guards.pop(header.producer_id, None)
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            # A new epoch starts a new sequence space; the coordinator epoch carries over.
            coordinator_epoch = entry.coordinator_epoch if entry is not None else -1
            ongoing = entry.current_txn_first_offset if entry is not None else -1
            entry = ProducerEntry(header.producer_epoch, coordinator_epoch=coordinator_epoch, current_txn_first_offset=ongoing)
            self._entries[header.producer_id] = entry
        elif header.producer_epoch < entry.producer_epoch:
            return None
        entry.last_timestamp_ms = header.max_timestamp_ms
        if header.is_control:
            return None if marker is None else self._end_txn(header, entry, marker)
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = header.base_offset
            self._open[header.producer_id] = header.base_offset
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset, header.last_offset))
        return None

    def _end_txn(self, header: BatchHeader, entry: ProducerEntry, marker: ControlMarker) -> AbortedTxn | None:
        marker_offset = header.base_offset
        # As Kafka: a marker with no transaction open here completes an empty one at itself.
        first = entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else marker_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        opened_at = self._open.pop(header.producer_id, None)
        if opened_at is not None:
            self._unreplicated.append(_Unreplicated(header.producer_id, opened_at, marker_offset))
        if marker.committed:
            return None
        # Kafka's lastStableOffset(completedTxn): the first offset of the earliest other open
        # transaction, else just past the marker. Every transaction aborted later starts at
        # or past it, which lets a lookup stop at this entry.
        earliest_open = next(iter(self._open.values()), marker_offset + 1)
        return AbortedTxn(header.producer_id, first, marker_offset, min(marker_offset + 1, earliest_open))

    def on_high_watermark(self, high_watermark: int) -> None:
        """A marker below the HWM is replicated: its transaction no longer holds the LSO
        back (Kafka's onHighWatermarkUpdated). Called as the HWM moves, so that the list
        stays short where nothing asks for the LSO (followers, internal topics)."""
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0].marker_offset < high_watermark:
            unreplicated.popleft()

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the earliest undecided transaction, capped at the HWM."""
        if not self._open and not self._unreplicated:
            return high_watermark  # the common case, asked at every fetch
        self.on_high_watermark(high_watermark)
        earliest_open = next(iter(self._open.values()), high_watermark)
        return min([high_watermark, earliest_open, *(u.first_offset for u in self._unreplicated)])

    def clear(self) -> None:
        self._entries.clear()
        self._open.clear()
        self._unreplicated.clear()
        # A rebuilt table (restore, truncation) may have lost the write a guard waits for:
        # pending verifications start over (the producer retries or aborts).
        self._guards.clear()

    def snapshot(self) -> bytes:
        """ReplayedState: every producer (with its retained batches) and the undecided
        transactions, encoded."""
        out = [_COUNT.pack(len(self._entries))]
        for producer_id, entry in sorted(self._entries.items()):
            out.append(_PRODUCER.pack(producer_id, entry.producer_epoch, entry.last_timestamp_ms, entry.coordinator_epoch,
                                      entry.current_txn_first_offset, len(entry.batches)))
            out.extend(_BATCH.pack(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset) for b in entry.batches)
        # Open and unreplicated transactions together, by first offset (-1: no marker yet).
        undecided = sorted([(first, producer_id, -1) for producer_id, first in self._open.items()]
                           + [(u.first_offset, u.producer_id, u.marker_offset) for u in self._unreplicated])
        out.append(_COUNT.pack(len(undecided)))
        out.extend(_UNDECIDED.pack(producer_id, first, marker) for first, producer_id, marker in undecided)
        return b"".join(out)

    def restore(self, payload: bytes) -> None:
        """ReplayedState: replace the table with a snapshot's; ValueError if it is malformed
        (the table is then left empty)."""
        self.clear()
        try:
            self._restore(memoryview(payload))
        except (struct.error, ValueError) as error:
            self.clear()
            raise ValueError(f"producer-state snapshot is malformed: {error}") from None

    def _restore(self, data: memoryview) -> None:
        at = 0

        def take(layout: struct.Struct) -> tuple[int, ...]:
            nonlocal at
            values = layout.unpack_from(data, at)
            at += layout.size
            return values

        (producers,) = take(_COUNT)
        for _ in range(producers):
            producer_id, epoch, last_timestamp_ms, coordinator_epoch, txn_first_offset, batch_count = take(_PRODUCER)
            if batch_count > BATCHES_TO_RETAIN or producer_id in self._entries:
                raise ValueError(f"producer {producer_id}: {batch_count} batches, or listed twice")
            entry = ProducerEntry(epoch, last_timestamp_ms, coordinator_epoch=coordinator_epoch, current_txn_first_offset=txn_first_offset)
            for _ in range(batch_count):
                entry.batches.append(BatchMetadata(*take(_BATCH)))
            self._entries[producer_id] = entry
        (undecided,) = take(_COUNT)
        unreplicated = []
        for _ in range(undecided):
            producer_id, first, marker = take(_UNDECIDED)
            if marker < 0:
                if producer_id in self._open:
                    raise ValueError(f"producer {producer_id} has two open transactions")
                self._open[producer_id] = first  # listed by first offset: the order they opened in
            else:
                unreplicated.append(_Unreplicated(producer_id, first, marker))
        self._unreplicated.extend(sorted(unreplicated, key=lambda u: u.marker_offset))
        if at != len(data):
            raise ValueError(f"{len(data) - at} bytes left over")
