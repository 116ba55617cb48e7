"""The transaction coordinator's state machine (Kafka's TransactionCoordinator and
TransactionStateManager), sans-I/O.

Every transition is built from the current metadata, written to the transactional id's
`__transaction_state` partition and committed there (acks=all) before it is installed in
memory, acted on or answered; while it is in flight the id answers CONCURRENT_TRANSACTIONS.
The coordinator of a partition is its leader; its coordinator epoch is the partition's
leader epoch. A new leader loads the partition and resumes the transactions it finds
prepared (PrepareCommit/PrepareAbort) by sending their markers, so a failover finishes what
the old coordinator started.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from cluster.broker.env import Clock, Scheduler
from cluster.broker.partition import TopicPartition
from cluster.broker.txn.markers import MarkerJob
from cluster.broker.txn.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnMetadata, TxnState
from cluster.broker.txn.parking import ParkedRequests
from cluster.broker.txn.state_log import TxnTombstone, partition_for_transactional_id, tombstone_batch, txn_batch

log = logging.getLogger(__name__)
# How soon a failed CompleteCommit/CompleteAbort write is tried again (Kafka's coordinator
# retries it while it is still the coordinator, or the id would stay prepared for good).
COMPLETE_RETRY_BACKOFF_MS = 500

InitDone = Callable[[ErrorCode, int, int], None]
ErrorDone = Callable[[ErrorCode], None]


class StateLog(Protocol):
    def append(self, index: int, coordinator_epoch: int, build: Callable[[int, int], bytes], done: ErrorDone) -> None:
        """Append to __transaction_state-`index` as its leader in `coordinator_epoch` and call
        `done` once the ISR has it (NOT_LEADER_OR_FOLLOWER if the leadership moved on)."""


class ProducerIds(Protocol):
    def allocate(self, done: Callable[[int | None, str | None], None]) -> None: ...


class Markers(Protocol):
    def send(self, job: MarkerJob, still_wanted: Callable[[], bool], done: Callable[[bool], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class TxnSettings:
    max_timeout_ms: int
    id_expiration_ms: int
    # Our own transaction.add.partitions.wait.max.ms: how long an AddPartitionsToTxn or
    # AddOffsetsToTxn waits for the previous transaction to complete (see parking.py); 0: off.
    add_partitions_wait_max_ms: int = 0


def log_append_error(error: ErrorCode) -> ErrorCode:
    """What a client is told when writing a transition failed (Kafka's
    TransactionStateManager.appendTransactionToLog mapping)."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                 ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return error


class TransactionCoordinator:
    def __init__(self, settings: TxnSettings, clock: Clock, scheduler: Scheduler, state_log: StateLog, producer_ids: ProducerIds,
                 markers: Markers, num_partitions: Callable[[], int]) -> None:
        self.settings = settings
        self._clock = clock
        self._scheduler = scheduler
        self._log = state_log
        self._producer_ids = producer_ids
        self._markers = markers
        self._num_partitions = num_partitions
        self.txns: dict[str, TxnMetadata] = {}
        # Transactional ids with a transition being written (Kafka's pendingState).
        self._pending: dict[str, TxnState] = {}
        # Ids whose fencing abort is being written (pending PrepareEpochFence), with the
        # bumped epoch: the fenced producer is refused from the start, as in Kafka, where the
        # bump is in memory before the append.
        self._fence_epochs: dict[str, int] = {}
        self.parked = ParkedRequests(scheduler, settings.add_partitions_wait_max_ms)
        # __transaction_state partitions loaded and coordinated (index -> coordinator epoch),
        # and those being loaded.
        self._epochs: dict[int, int] = {}
        self._loading: dict[int, int] = {}

    # ---- ownership -----------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self._num_partitions())

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        index = self.partition_for(transactional_id)
        if index in self._loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none if index in self._epochs else ErrorCode.not_coordinator

    def _current(self, transactional_id: str, epoch: int) -> bool:
        """This broker still coordinates the id in coordinator epoch `epoch`."""
        return self._epochs.get(self.partition_for(transactional_id)) == epoch

    def pending_state(self, transactional_id: str) -> TxnState | None:
        """The state the id's transition in flight leads to (Kafka's pendingState):
        PrepareEpochFence while a fencing abort is written."""
        return self._pending.get(transactional_id)

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self._epochs.get(self.partition_for(transactional_id), -1)

    # ---- loading -------------------------------------------------------------------------

    def begin_loading(self, index: int, epoch: int) -> None:
        self.unload(index)
        self._loading[index] = epoch

    def load(self, index: int, epoch: int, records: Iterable[TxnMetadata | TxnTombstone]) -> None:
        if self._loading.get(index) != epoch:
            return
        for record in records:
            if isinstance(record, TxnTombstone):
                self.txns.pop(record.transactional_id, None)
            else:
                self.txns[record.transactional_id] = record

    def finish_loading(self, index: int, epoch: int) -> None:
        """Coordinate the loaded ids; resume the transactions the previous coordinator
        prepared (their markers may be missing anywhere)."""
        if self._loading.get(index) != epoch:
            return
        del self._loading[index]
        self._epochs[index] = epoch
        mine = [t for t in self.txns.values() if self.partition_for(t.transactional_id) == index]
        resumed = 0
        for txn in mine:
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                resumed += 1
                self._send_markers(txn, epoch)
        log.info("__transaction_state-%d: coordinating %d transactional ids (epoch %d), resuming %d prepared transactions", index, len(mine),
                 epoch, resumed)

    def unload(self, index: int) -> None:
        self._loading.pop(index, None)
        self._epochs.pop(index, None)
        for transactional_id in [t for t in self.txns if self.partition_for(t) == index]:
            del self.txns[transactional_id]
            self._pending.pop(transactional_id, None)
            self._fence_epochs.pop(transactional_id, None)
            self.parked.drop(transactional_id, ErrorCode.not_coordinator)

    @property
    def coordinated_partitions(self) -> dict[int, int]:
        return dict(self._epochs)

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    # ---- writing transitions -------------------------------------------------------------

    def _write(self, new: TxnMetadata, done: ErrorDone, pending: TxnState | None = None) -> None:
        """Write `new` and install it once committed; `done` gets the client's error.
        `pending` is the id's pending state meanwhile (`new.state` unless told)."""
        transactional_id = new.transactional_id
        index = self.partition_for(transactional_id)
        epoch = self._epochs[index]
        self._pending[transactional_id] = new.state if pending is None else pending
        now_ms = self._clock.wall_ms()

        def written(error: ErrorCode) -> None:
            if not self._current(transactional_id, epoch):
                done(ErrorCode.not_coordinator)  # unloaded meanwhile: the new coordinator loads the record, if it stuck
                return
            self._pending.pop(transactional_id, None)
            self._fence_epochs.pop(transactional_id, None)
            if error is not ErrorCode.none:
                log.info("%s: writing %s failed: %s", transactional_id, new.state.kafka_name, error.name)
                done(log_append_error(error))
                return
            self.txns[transactional_id] = new
            done(ErrorCode.none)

        self._log.append(index, epoch, lambda base, leader_epoch: txn_batch(new, now_ms, base, leader_epoch), written)

    # ---- InitProducerId ------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int, done: InitDone) -> None:
        """InitProducerId with a transactional id: a new producer id on first use, else an
        epoch bump that fences the previous producer (aborting its open transaction first:
        CONCURRENT_TRANSACTIONS meanwhile). With `producer_id`/`producer_epoch` (KIP-360) an
        existing producer bumps its own epoch, and a retry of a bump that was written gets
        the same answer."""
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            done(ErrorCode.invalid_transaction_timeout, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        error = self.coordinator_error(transactional_id)
        if error is not ErrorCode.none:
            done(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        if transactional_id in self._pending:
            done(ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        txn = self.txns.get(transactional_id)
        if txn is None:
            self._first_init(transactional_id, timeout_ms, done)
            return
        expected = (producer_id, producer_epoch) if producer_id != NO_PRODUCER_ID else None
        if expected is not None and not (txn.producer_epoch == NO_PRODUCER_EPOCH or producer_id in (txn.producer_id, txn.last_producer_id)):
            done(ErrorCode.producer_fenced, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            done(ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        if txn.state is TxnState.ONGOING:
            # Fence the current producer and abort its transaction under the bumped epoch;
            # the client retries and gets the next epoch once the abort completed.
            self._fence_and_abort(txn, lambda error: done(ErrorCode.concurrent_transactions if error is ErrorCode.none else error,
                                                          NO_PRODUCER_ID, NO_PRODUCER_EPOCH))
            return
        if txn.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            done(ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        now_ms = self._clock.wall_ms()
        if expected is not None and producer_id == txn.last_producer_id and producer_id != txn.producer_id:
            # A retry after the id was rotated (the answer was lost): the same answer again.
            if producer_epoch == txn.last_producer_epoch:
                done(ErrorCode.none, txn.producer_id, txn.producer_epoch)
            else:
                done(ErrorCode.producer_fenced, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        if txn.epoch_exhausted and (expected is None or producer_epoch == txn.producer_epoch):
            self._rotate_producer_id(txn, timeout_ms, expected is not None, done)
            return
        if expected is None:
            epoch, last_epoch = txn.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or producer_epoch == txn.producer_epoch:
            epoch, last_epoch = txn.producer_epoch + 1, txn.producer_epoch
        elif producer_epoch == txn.last_producer_epoch:
            done(ErrorCode.none, txn.producer_id, txn.producer_epoch)  # a retry of the bump already written
            return
        else:
            done(ErrorCode.producer_fenced, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
            return
        new = txn.transition(TxnState.EMPTY, now_ms, producer_epoch=epoch, last_producer_id=txn.producer_id, last_producer_epoch=last_epoch,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        self._write(new, lambda error: done(error, new.producer_id, new.producer_epoch) if error is ErrorCode.none
                    else done(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))

    def _first_init(self, transactional_id: str, timeout_ms: int, done: InitDone) -> None:
        self._pending[transactional_id] = TxnState.EMPTY  # others wait for the id (CONCURRENT_TRANSACTIONS)
        index = self.partition_for(transactional_id)
        epoch = self._epochs[index]

        def allocated(producer_id: int | None, reason: str | None) -> None:
            if not self._current(transactional_id, epoch):
                done(ErrorCode.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            self._pending.pop(transactional_id, None)
            if producer_id is None:
                log.info("%s: no producer id from the controller (%s)", transactional_id, reason)
                done(ErrorCode.coordinator_not_available, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            new = TxnMetadata(transactional_id, producer_id, 0, timeout_ms, TxnState.EMPTY, update_ms=self._clock.wall_ms())
            self._write(new, lambda error: done(error, producer_id, 0) if error is ErrorCode.none
                        else done(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))

        self._producer_ids.allocate(allocated)

    def _rotate_producer_id(self, txn: TxnMetadata, timeout_ms: int, record_last_epoch: bool, done: InitDone) -> None:
        """The epoch is exhausted: a new producer id at epoch 0 (Kafka's prepareProducerIdRotation)."""
        transactional_id = txn.transactional_id
        epoch = self.coordinator_epoch(transactional_id)
        self._pending[transactional_id] = TxnState.EMPTY

        def allocated(producer_id: int | None, reason: str | None) -> None:
            if not self._current(transactional_id, epoch):
                done(ErrorCode.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            self._pending.pop(transactional_id, None)
            if producer_id is None:
                done(ErrorCode.coordinator_not_available, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
                return
            new = txn.transition(TxnState.EMPTY, self._clock.wall_ms(), producer_id=producer_id, producer_epoch=0,
                                 last_producer_id=txn.producer_id,
                                 last_producer_epoch=txn.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                                 timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
            self._write(new, lambda error: done(error, new.producer_id, 0) if error is ErrorCode.none
                        else done(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))

        self._producer_ids.allocate(allocated)

    # ---- AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self.coordinator_error(transactional_id)
        if error is not ErrorCode.none:
            return error, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if self._fence_epochs.get(transactional_id, txn.producer_epoch) != producer_epoch:
            return ErrorCode.producer_fenced, None
        if transactional_id in self._pending:
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, txn

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition],
                       done: ErrorDone) -> None:
        error, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is ErrorCode.concurrent_transactions or (txn is not None and txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)):
            # The previous transaction is still completing (Kafka: CONCURRENT_TRANSACTIONS);
            # parked, the request runs again once it has completed.
            if not (self._completing(transactional_id) and self.parked.park(
                    transactional_id, lambda answer: self.add_partitions(transactional_id, producer_id, producer_epoch, partitions, answer),
                    done)):
                done(ErrorCode.concurrent_transactions)
            return
        if txn is None:
            done(error)
            return
        if txn.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            done(ErrorCode.invalid_txn_state)
            return
        added = frozenset(partitions)
        ongoing = txn.state is TxnState.ONGOING
        if ongoing and added <= txn.partitions:
            done(ErrorCode.none)
            return
        now_ms = self._clock.wall_ms()
        new = txn.transition(TxnState.ONGOING, now_ms, partitions=(txn.partitions | added) if ongoing else added,
                             start_ms=txn.start_ms if ongoing else now_ms)
        self._write(new, done)

    def _completing(self, transactional_id: str) -> bool:
        """The id's transaction is prepared and only its markers or its Complete* record
        remain to be written."""
        txn = self.txns.get(transactional_id)
        return (txn is not None and txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
                and self._pending.get(transactional_id) in (None, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1's verify-only AddPartitionsToTxn, from a partition leader about to
        append a producer's first transactional batch: none for each partition in the
        producer's ongoing transaction, INVALID_TXN_STATE for one that is not (a late or
        zombie write that must not start a hanging transaction). Writes nothing."""
        wanted = list(partitions)
        error, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is ErrorCode.concurrent_transactions and txn is None:
            txn = self.txns.get(transactional_id)  # a transition in flight: judge by the installed state
            error = ErrorCode.none
        if txn is None:
            return {tp: error for tp in wanted}
        ongoing = txn.state is TxnState.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in txn.partitions else ErrorCode.invalid_txn_state for tp in wanted}

    # ---- EndTxn ----------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool, done: ErrorDone) -> None:
        """EndTxn: PrepareCommit/PrepareAbort written and answered, then the markers, then
        CompleteCommit/CompleteAbort written. A retry of a completed end gets success."""
        error, txn = self._check_producer(transactional_id, producer_id, producer_epoch)
        if txn is None:
            done(error)
            return
        state = txn.state
        if state is TxnState.ONGOING:
            self._prepare_end(txn, committed, done)
        elif state is TxnState.COMPLETE_COMMIT:
            done(ErrorCode.none if committed else ErrorCode.invalid_txn_state)
        elif state is TxnState.COMPLETE_ABORT:
            done(ErrorCode.invalid_txn_state if committed else ErrorCode.none)
        elif state is TxnState.PREPARE_COMMIT:
            done(ErrorCode.concurrent_transactions if committed else ErrorCode.invalid_txn_state)
        elif state is TxnState.PREPARE_ABORT:
            done(ErrorCode.invalid_txn_state if committed else ErrorCode.concurrent_transactions)
        else:
            done(ErrorCode.invalid_txn_state)  # Empty: nothing to end; Dead, PrepareEpochFence

    def _prepare_end(self, txn: TxnMetadata, committed: bool, done: ErrorDone) -> None:
        new = txn.transition(TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT, self._clock.wall_ms())
        epoch = self.coordinator_epoch(txn.transactional_id)

        def prepared(error: ErrorCode) -> None:
            done(error)
            if error is ErrorCode.none:
                self._send_markers(new, epoch)

        self._write(new, prepared)

    def _fence_and_abort(self, txn: TxnMetadata, done: ErrorDone) -> None:
        """Fence the producer of an ongoing transaction and abort it under the bumped epoch,
        as Kafka's PrepareEpochFence does (InitProducerId over an open transaction, the
        timeout): PrepareEpochFence is the id's pending state while the abort is written,
        never a record of its own. The record is PrepareAbort with the bumped epoch and no
        last epoch (so a KIP-360 bump from the fenced epoch is refused later); a coordinator
        that loads it finishes the abort like any prepared one. If the write fails, the bump
        stays in memory unanswered (Kafka's hasFailedEpochFence): the old producer remains
        fenced and the next fence reuses the epoch."""
        transactional_id = txn.transactional_id
        now_ms = self._clock.wall_ms()
        bumped = txn.producer_epoch if txn.failed_epoch_fence else txn.producer_epoch + 1
        fence = txn.transition(TxnState.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH)
        abort = fence.transition(TxnState.PREPARE_ABORT, now_ms, failed_epoch_fence=False)
        coordinator_epoch = self.coordinator_epoch(transactional_id)
        log.info("%s: fencing producer %d epoch %d: aborting its ongoing transaction with epoch %d", transactional_id, txn.producer_id,
                 txn.producer_epoch, bumped)
        self._fence_epochs[transactional_id] = bumped

        def written(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                done(error)
                self._send_markers(abort, coordinator_epoch)
                return
            if self._current(transactional_id, coordinator_epoch) and self.txns.get(transactional_id) == txn:
                self.txns[transactional_id] = dataclasses.replace(fence, state=txn.state, failed_epoch_fence=True)
            done(error)

        self._write(abort, written, pending=TxnState.PREPARE_EPOCH_FENCE)

    def _send_markers(self, txn: TxnMetadata, epoch: int) -> None:
        transactional_id = txn.transactional_id
        committed = txn.state is TxnState.PREPARE_COMMIT
        job = MarkerJob(transactional_id, txn.producer_id, txn.producer_epoch, committed, epoch, txn.partitions)

        def still_wanted() -> bool:
            return self._current(transactional_id, epoch) and self.txns.get(transactional_id) == txn

        def markers_written(complete: bool) -> None:
            if not complete or not still_wanted():
                log.info("%s: markers not completed here (fenced or no longer coordinator)", transactional_id)
                return
            write_complete()

        def write_complete() -> None:
            if not still_wanted() or transactional_id in self._pending:
                return
            final = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
            new = txn.transition(final, self._clock.wall_ms(), partitions=frozenset(), start_ms=-1)

            def written(error: ErrorCode) -> None:
                if error is not ErrorCode.none:
                    log.info("%s: writing %s failed (%s); trying again", transactional_id, final.kafka_name, error.name)
                    self._scheduler.call_later(COMPLETE_RETRY_BACKOFF_MS, write_complete)
                    return
                self.parked.release(transactional_id)

            self._write(new, written)

        self._markers.send(job, still_wanted, markers_written)

    # ---- timers ----------------------------------------------------------------------------

    def abort_timed_out(self) -> list[str]:
        """Abort (with an epoch bump) every ongoing transaction older than its timeout, as
        Kafka's abortTimedOutTransactions does; the ids aborted."""
        now_ms = self._clock.wall_ms()
        expired = [t for t in self.txns.values() if t.state is TxnState.ONGOING and t.transactional_id not in self._pending
                   and self.coordinator_error(t.transactional_id) is ErrorCode.none and t.start_ms + t.timeout_ms < now_ms]
        for txn in expired:
            log.info("%s: transaction open since %d timed out after %d ms", txn.transactional_id, txn.start_ms, txn.timeout_ms)
            self._fence_and_abort(txn, lambda error, t=txn.transactional_id: log.info("%s: timeout abort: %s", t, error.name)
                                  if error is not ErrorCode.none else None)
        return [t.transactional_id for t in expired]

    def expire_ids(self) -> list[str]:
        """Forget transactional ids idle for transactional.id.expiration.ms (a tombstone in
        the log, then gone)."""
        now_ms = self._clock.wall_ms()
        idle = [t for t in self.txns.values() if t.state.is_complete and t.transactional_id not in self._pending
                and self.coordinator_error(t.transactional_id) is ErrorCode.none and t.update_ms + self.settings.id_expiration_ms < now_ms]
        for txn in idle:
            transactional_id = txn.transactional_id
            index = self.partition_for(transactional_id)
            epoch = self._epochs[index]
            self._pending[transactional_id] = TxnState.DEAD

            def written(error: ErrorCode, transactional_id: str = transactional_id, epoch: int = epoch) -> None:
                if not self._current(transactional_id, epoch):
                    return
                self._pending.pop(transactional_id, None)
                if error is ErrorCode.none:
                    self.txns.pop(transactional_id, None)
                    log.info("%s: expired", transactional_id)

            self._log.append(index, epoch, lambda base, leader_epoch, t=transactional_id: tombstone_batch(t, now_ms, base, leader_epoch), written)
        return [t.transactional_id for t in idle]
