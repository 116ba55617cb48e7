"""One partition replica on this broker: its log, its role (leader, follower or neither) as
the metadata says, the high watermark, idempotent-producer state, the leader's view of its
followers, and what waits on the partition (long-poll fetches, acks=all produces).

Kafka's rules (reference/kafka-reliability.md §1.3):
- The leader stamps batches with its leader epoch; followers copy them unchanged.
- HWM = min log end offset over the leader and the maximal ISR (the ISR plus additions in
  flight to the controller); never advanced while the ISR is smaller than
  min.insync.replicas (Kafka 3.7+ strict min ISR); never moves back on the leader. A
  follower's HWM is min(the leader's, its own log end).
- A follower is caught up when it fetched from at least the leader's log end of its previous
  fetch; one not caught up for replica.lag.time.max.ms leaves the ISR. One whose log end has
  reached the HWM and the start of the leader's epoch rejoins it. ISR changes go through
  the controller (AlterPartition), one at a time.
- Consumers read below the HWM only (unless fetch.read.past.high.watermark, unsafe);
  read_committed consumers below the last stable offset (the first offset of the earliest
  undecided transaction, capped at the HWM), told which aborted transactions they read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from cluster.broker.fetch_sessions import FetchStamp
from cluster.broker.producer_state import ProducerStateTable
from cluster.metadata.image import PartitionState
from cluster.protocol.records import build_control_batch, read_control_marker
from cluster.storage.batch import BatchHeader, restamp, split_batches
from cluster.storage.log import PartitionLog, RecoveryReport
from cluster.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"
OFFLINE = "offline"  # its log directory failed (log_dir.py): KAFKA_STORAGE_ERROR until the broker restarts


def _report_state_recovery(tp: object, recovery: RecoveryReport) -> None:
    """Where the producer state came from on open, and which transaction files were rebuilt."""
    rebuilt = "".join(f"; {r}" for r in recovery.rebuilt if ".txnindex" in r or ".snapshot" in r)
    source = "no snapshot" if recovery.snapshot_offset is None else f"the snapshot at {recovery.snapshot_offset}"
    log.info("%s: producer state from %s, %d batches replayed%s", tp, source, recovery.state_batches, rebuilt)


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True)
class FollowerState:
    """The leader's view of one follower (Kafka's Replica)."""

    log_end_offset: int = -1  # unknown until it fetches in this epoch
    last_caught_up_ms: int = 0  # the leader's wall clock, as Kafka's lastCaughtUpTimeMs
    leader_end_at_last_fetch: int = -1
    last_fetch_ms: int = 0
    broker_epoch: int = -1
    log_start_offset: int = -1  # as its last fetch reported it (-1: unknown, holds the low watermark)
    # The fetch session whose fetches include this partition (None: sessionless). While the
    # partition does not change, the follower's session fetches skip it; every one of them
    # would have found it caught up (see caught_up_ms).
    stamp: FetchStamp | None = None

    def caught_up_ms(self, leader_end: int) -> int:
        """Kafka's lastCaughtUpTimeMs: a follower idle in a fetch session and at the leader's
        log end was caught up at the session's last fetch."""
        stamp = self.stamp
        if stamp is not None and stamp.active and self.log_end_offset >= leader_end:
            return max(self.last_caught_up_ms, stamp.last_fetch_ms)
        return self.last_caught_up_ms


@dataclass(slots=True)
class PendingAck:
    """An acks=all append waiting for the HWM to pass `required_offset`."""

    required_offset: int
    done: Callable[[ErrorCode], None]
    settled: bool = False


@dataclass(slots=True)
class ReplicationSettings:
    broker_id: int
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    read_past_high_watermark: bool = False
    truncate_to_high_watermark: bool = False
    # transaction.lso.ignore.open.transactions (unsafe): the LSO is the HWM.
    lso_ignores_open_transactions: bool = False


class Partition:
    def __init__(self, tp: TopicPartition, log: PartitionLog, settings: ReplicationSettings, high_watermark: int = 0) -> None:
        self.tp = tp
        self.log = log
        self.settings = settings
        self.broker_id = settings.broker_id
        self.state: PartitionState | None = None
        self.role = NONE
        self.leader_epoch = -1
        self.leader_id = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        # The log keeps the producer state: it replays every batch it stores into it, and on
        # open restores it from its newest snapshot (see cluster/storage/log.py).
        if isinstance(log.state, ProducerStateTable):
            self.producers = log.state
        else:
            self.producers = ProducerStateTable()
            log.attach_state(self.producers)
            _report_state_recovery(tp, log.recovery)
        # A restarted replica knows only its last checkpointed HWM to be committed (a crash
        # may have lost some of the log since: never past the log end); it learns the rest
        # from its leader, or as leader from its followers' fetches.
        self.high_watermark = max(min(high_watermark, log.log_end_offset), log.log_start_offset)
        self.producers.on_high_watermark(self.high_watermark)
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: tuple[int, ...] | None = None  # proposed to the controller, not yet answered
        self.awaiting_metadata = False  # a follower told by its leader that our epoch is stale
        self.epoch_start_offset = 0  # where our leader epoch begins (the log end when elected)
        # Insertion-ordered (a dict, not a set of callables hashed by address): pending fetches
        # are woken in the order they parked, the same in every run of a simulation's seed.
        self._append_listeners: dict[Callable[[], None], None] = {}
        self._pending_acks: list[PendingAck] = []
        self._pending_deletes: list[PendingAck] = []  # DeleteRecords waiting for the low watermark
        # Whether a replica's broker is alive (registered, unfenced): a dead one does not hold
        # the low watermark back, as Kafka's lowWatermarkIfLeader skips brokers not alive.
        self.replica_alive: Callable[[int], bool] = lambda replica: True
        # Called with (tp, producer id, producer epoch, committed) for each transaction marker a
        # follower replicates (the leader's marker handler calls the broker itself).
        self.marker_listener: Callable[[TopicPartition, int, int, bool], None] | None = None

    def rebuild_producer_state(self) -> None:
        """Producer state and open transactions, from the log's newest snapshot and the
        batches after it (the aborted-transaction indexes live with the segments)."""
        self.log.reload_state()

    # ---- offsets ---------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        stable = self.producers.last_stable_offset(self.high_watermark)
        # The unsafe switch still lets the producer state drop decided transactions above.
        return self.high_watermark if self.settings.lso_ignores_open_transactions else stable

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [fetch_offset, upper_bound_offset)."""
        return self.log.aborted_transactions(fetch_offset, upper_bound_offset)

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    # ---- roles -----------------------------------------------------------------------

    def apply_state(self, state: PartitionState, now_ms: int) -> str | None:
        """Act on the partition's state in the metadata; returns the new role if it changed
        role or epoch ("leader"/"follower"), else None."""
        newer_epoch = state.leader_epoch > self.leader_epoch
        old = self.state
        self.state = state
        self.replicas = state.replicas
        if state.leader == self.broker_id:
            if self.role != LEADER or newer_epoch:
                self._become_leader(state, now_ms)
                return LEADER
            if old is None or state.partition_epoch > old.partition_epoch:
                # A newer committed state replaces any proposal still out (Kafka does the same):
                # the controller answers that proposal with a stale-version error, if at all.
                self.pending_isr = None
                self._set_isr(state.isr)
            return None
        if self.role != FOLLOWER or newer_epoch:
            self._become_follower(state)
            return FOLLOWER
        return None

    def _become_leader(self, state: PartitionState, now_ms: int) -> None:
        self.role = LEADER
        self.leader_epoch = state.leader_epoch
        self.leader_id = self.broker_id
        self.awaiting_metadata = False
        self.pending_isr = None
        self.epoch_start_offset = self.log.log_end_offset
        if state.leader_epoch > self.log.epochs.latest_epoch:
            self.log.epochs.assign(state.leader_epoch, self.log.log_end_offset)
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in state.replicas if r != self.broker_id}
        self._set_isr(state.isr)
        log.info("%s: leader in epoch %d (log end %d, HWM %d, ISR %s)", self.tp, self.leader_epoch, self.log_end_offset,
                 self.high_watermark, list(self.isr))
        self.maybe_advance_high_watermark()
        self.wake_fetchers()  # fetch sessions holding this partition must look at it again

    def _become_follower(self, state: PartitionState) -> None:
        was_leader = self.role == LEADER
        self.role = FOLLOWER
        self.leader_epoch = state.leader_epoch
        self.leader_id = state.leader
        self.isr = state.isr
        self.followers = {}
        self.pending_isr = None
        self.awaiting_metadata = False
        self._fail_pending_acks(ErrorCode.not_leader_or_follower)
        if self.settings.truncate_to_high_watermark and self.log_end_offset > self.high_watermark:
            # Unsafe, pre-KIP-101: whatever lies past our HWM is presumed uncommitted.
            dropped = self.log_end_offset - self.high_watermark
            self.truncate(self.high_watermark)
            log.warning("%s: truncated to the high watermark %d on becoming follower (%d records dropped; "
                        "replica.truncate.to.high.watermark)", self.tp, self.high_watermark, dropped)
        log.info("%s: follower of %d in epoch %d (log end %d, HWM %d)%s", self.tp, state.leader, self.leader_epoch,
                 self.log_end_offset, self.high_watermark, " (was leader)" if was_leader else "")
        self.wake_fetchers()

    def _set_isr(self, isr: tuple[int, ...]) -> None:
        self.isr = tuple(isr)
        if self.pending_isr is not None and set(self.pending_isr) == set(isr):
            self.pending_isr = None
        self.maybe_advance_high_watermark()
        self._check_pending_acks()

    def stop(self) -> None:
        """The partition is leaving this broker (or the broker is shutting down)."""
        self.role = NONE
        self._fail_pending_acks(ErrorCode.not_leader_or_follower)
        self.wake_fetchers()

    def take_offline(self) -> None:
        """Its log directory failed: as Kafka's markPartitionOffline, every request for it
        gets KAFKA_STORAGE_ERROR, waiting ones included, until the broker restarts."""
        self.role = OFFLINE
        self._fail_pending_acks(ErrorCode.kafka_storage_error)
        self.wake_fetchers()

    # ---- the leader ------------------------------------------------------------------

    def append_as_leader(self, batch: bytes | memoryview, now_ms: int) -> BatchHeader:
        """Restamp `batch` at the log end with the current epoch and append it."""
        stamped = restamp(batch, self.log.log_end_offset, self.leader_epoch)
        header = self.log.append(stamped, now_ms=now_ms)  # the log records it in self.producers
        self.maybe_advance_high_watermark()
        self.wake_fetchers()
        return header

    def append_marker(self, *, committed: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      now_ms: int) -> BatchHeader:
        """Append a transaction marker (control batch) as leader; it ends the producer's
        transaction here. The caller checked it with producers.check_marker."""
        batch = build_control_batch(committed=committed, producer_id=producer_id, producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch, base_offset=self.log.log_end_offset, timestamp_ms=now_ms,
                                    partition_leader_epoch=self.leader_epoch)
        header = self.log.append(batch, now_ms=now_ms)  # the log records it in self.producers
        self.maybe_advance_high_watermark()
        self.wake_fetchers()
        return header

    def append_internal(self, build: Callable[[int, int], bytes], now_ms: int) -> BatchHeader:
        """Append a batch the broker builds itself, given (base_offset, leader_epoch)."""
        batch = build(self.log.log_end_offset, self.leader_epoch)
        # The log records it in self.producers: transactional batches the broker writes
        # (TxnOffsetCommit's) open the producer's transaction here as they do on followers.
        header = self.log.append(batch, now_ms=now_ms)
        self.maybe_advance_high_watermark()
        self.wake_fetchers()
        return header

    def isr_below_min(self) -> bool:
        return len(self.isr) < min(self.settings.min_insync_replicas, max(1, len(self.replicas)))

    def maybe_advance_high_watermark(self) -> None:
        if self.role != LEADER:
            return
        if self.isr_below_min():
            return  # strict min ISR: nothing commits while the ISR is too small
        ends = [self.log_end_offset]
        for replica in self.maximal_isr:
            if replica == self.broker_id:
                continue
            follower = self.followers.get(replica)
            if follower is None or follower.log_end_offset < 0:
                return  # an ISR member we have not heard from in this epoch
            ends.append(follower.log_end_offset)
        new = min(ends)
        if new > self.high_watermark:
            self.high_watermark = new
            self.producers.on_high_watermark(new)
            self._check_pending_acks()
            self.wake_fetchers()

    def wait_for_commit(self, required_offset: int, done: Callable[[ErrorCode], None]) -> PendingAck:
        """Call `done` once the HWM reaches `required_offset` (acks=all), or with the error
        that ends the wait (leadership lost)."""
        pending = PendingAck(required_offset, done)
        self._pending_acks.append(pending)
        self._check_pending_acks()
        return pending

    def cancel_wait(self, pending: PendingAck, error: ErrorCode) -> None:
        if not pending.settled:
            pending.settled = True
            if pending in self._pending_acks:
                self._pending_acks.remove(pending)
            pending.done(error)

    def _check_pending_acks(self) -> None:
        if not self._pending_acks:
            return
        remaining = []
        for pending in self._pending_acks:
            if pending.settled:
                continue
            if self.role == LEADER and self.high_watermark >= pending.required_offset:
                pending.settled = True
                # Kafka's checkEnoughReplicasReachOffset: committed, but the ISR it committed
                # with is below min ISR.
                pending.done(ErrorCode.not_enough_replicas_after_append if self.isr_below_min() else ErrorCode.none)
            else:
                remaining.append(pending)
        self._pending_acks = remaining

    @property
    def low_watermark(self) -> int:
        """The smallest log start offset over this leader and its live followers (Kafka's
        lowWatermarkIfLeader): DeleteRecords is done once it reaches the offset asked for."""
        low = self.log_start_offset
        for replica, follower in self.followers.items():
            if self.replica_alive(replica):
                low = min(low, follower.log_start_offset)
        return low

    def wait_for_low_watermark(self, required_offset: int, done: Callable[[ErrorCode], None]) -> PendingAck:
        """Call `done` once the low watermark reaches `required_offset` (Kafka's
        DelayedDeleteRecords), or with the error that ends the wait (leadership lost)."""
        pending = PendingAck(required_offset, done)
        self._pending_deletes.append(pending)
        self._check_pending_deletes()
        return pending

    def cancel_delete_wait(self, pending: PendingAck, error: ErrorCode) -> None:
        if not pending.settled:
            pending.settled = True
            if pending in self._pending_deletes:
                self._pending_deletes.remove(pending)
            pending.done(error)

    def _check_pending_deletes(self) -> None:
        if not self._pending_deletes:
            return
        low = self.low_watermark if self.role == LEADER else -1
        remaining = []
        for pending in self._pending_deletes:
            if pending.settled:
                continue
            if self.role == LEADER and low >= pending.required_offset:
                pending.settled = True
                pending.done(ErrorCode.none)
            else:
                remaining.append(pending)
        self._pending_deletes = remaining

    def _fail_pending_acks(self, error: ErrorCode) -> None:
        deletes, self._pending_deletes = self._pending_deletes, []
        for entry in deletes:
            if not entry.settled:
                entry.settled = True
                entry.done(error)
        pending, self._pending_acks = self._pending_acks, []
        for entry in pending:
            if not entry.settled:
                entry.settled = True
                entry.done(error)

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """KIP-320/595: the (epoch, end offset) a follower must truncate to, if its log
        diverges from ours at `fetch_offset`."""
        if last_fetched_epoch < 0:
            return None
        latest = self.log.epochs.latest_epoch
        if latest < 0:
            return None  # no history to compare with: the fetch offset alone decides
        if last_fetched_epoch > latest:
            # The follower wrote in an epoch we never had: it must come back to our latest.
            return latest, self.log_end_offset
        epoch, end = self.log.epochs.end_offset_for(last_fetched_epoch, self.log_end_offset)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def on_follower_fetch(self, replica: int, fetch_offset: int, broker_epoch: int, now_ms: int, log_start_offset: int = -1,
                          stamp: FetchStamp | None = None) -> None:
        """A follower fetched from `fetch_offset`: that is its log end offset; its log start
        offset is the one its request reports. `stamp` is its fetch session's, if any."""
        follower = self.followers.get(replica)
        if follower is None:
            return
        leader_end = self.log_end_offset
        last_fetch_ms = follower.last_fetch_ms
        if stamp is not None and follower.stamp is stamp and stamp.active:
            # The session's fetches since this partition was last looked at skipped it: the
            # one before this fetch is its last fetch (nothing changed in between).
            last_fetch_ms = max(last_fetch_ms, stamp.previous_fetch_ms)
        # Kafka keeps the latest caught-up time it has seen (max), so after the leader's wall
        # clock steps back a follower's caught-up time stays in the "future" until the clock
        # passes it again: a follower that stops fetching then stays in the ISR that much
        # longer. After a forward step, the next ISR check may find caught-up followers
        # lagging: both are what clock faults do to a Kafka leader.
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.leader_end_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, last_fetch_ms)
        follower.leader_end_at_last_fetch = leader_end
        follower.last_fetch_ms = now_ms
        follower.broker_epoch = broker_epoch
        follower.stamp = stamp
        new_end = min(fetch_offset, leader_end)
        if new_end == follower.log_end_offset and log_start_offset == follower.log_start_offset:
            return  # nothing the HWM or the low watermark depends on moved
        follower.log_end_offset = new_end
        follower.log_start_offset = log_start_offset
        self.maybe_advance_high_watermark()
        self._check_pending_deletes()

    def follower_idle_until_change(self, replica: int, stamp: FetchStamp) -> None:
        """This partition is about to change while `replica`'s fetch session skips it: every
        session fetch so far found it as it was at its last look, so if it was caught up
        then, it was caught up at the session's last fetch."""
        follower = self.followers.get(replica)
        if follower is not None and follower.stamp is stamp and stamp.active and follower.log_end_offset >= follower.leader_end_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, stamp.last_fetch_ms)

    def expandable_followers(self, now_ms: int) -> list[int]:
        """Followers outside the ISR that may rejoin: log end at or past the HWM and the start
        of our epoch (KAFKA-7128), and caught up within replica.lag.time.max.ms. Kafka only
        expands on a follower's fetch, so a follower it adds has just caught up; the last
        rule keeps one whose last fetch is long gone (a cut link) from being added and
        then shrunk away again at once."""
        start = self.epoch_start_offset
        lag_ms = self.settings.replica_lag_time_max_ms
        out = []
        for replica, follower in sorted(self.followers.items()):
            if replica in self.maximal_isr:
                continue
            if follower.log_end_offset < 0 or now_ms - follower.caught_up_ms(self.log_end_offset) > lag_ms:
                continue
            if follower.log_end_offset >= self.high_watermark and follower.log_end_offset >= start:
                out.append(replica)
        return out

    def lagging_followers(self, now_ms: int) -> list[int]:
        """ISR members not caught up for replica.lag.time.max.ms, measured on the leader's wall
        clock as Kafka's getOutOfSyncReplicas does (time.milliseconds()): a leader whose clock
        jumps forward finds its followers lagging, as a Kafka leader does."""
        lag_ms = self.settings.replica_lag_time_max_ms
        end = self.log_end_offset
        return [r for r in self.isr if r != self.broker_id and r in self.followers and now_ms - self.followers[r].caught_up_ms(end) > lag_ms]

    # ---- the follower ----------------------------------------------------------------

    def append_as_follower(self, records: bytes | memoryview, now_ms: int) -> int:
        """Append the leader's batches unchanged (offsets and epochs kept); returns how many
        batches were appended."""
        count = 0
        for header, batch in split_batches(records):
            if header.base_offset < self.log_end_offset:
                continue  # already have it (a retried fetch)
            appended = self.log.append(batch, now_ms=now_ms)  # the log records it in self.producers
            marker = read_control_marker(batch) if appended.is_control else None
            if marker is not None and self.marker_listener is not None:
                self.marker_listener(self.tp, appended.producer_id, appended.producer_epoch, marker.committed)
            count += 1
        if count:
            self.wake_fetchers()
        return count

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        new = min(leader_high_watermark, self.log_end_offset)
        if new > self.high_watermark:
            self.high_watermark = new
            self.producers.on_high_watermark(new)
            self.wake_fetchers()
        elif new < self.high_watermark and self.role == FOLLOWER:
            # Our log was truncated below what we thought committed (unsafe switches or an
            # unclean election): our HWM follows the log down.
            self.high_watermark = new

    def truncate(self, offset: int) -> None:
        """Truncate the log to the last batch boundary at or below `offset`."""
        target = self.log.batch_boundary_at_or_below(max(offset, self.log_start_offset))
        if target < self.log_end_offset:
            self.log.truncate_to(target)  # which rolls the producer state back with it
        if self.high_watermark > self.log_end_offset:
            self.high_watermark = self.log_end_offset

    # ---- waiting readers -------------------------------------------------------------

    def wake_fetchers(self) -> None:
        """Let every pending long-poll fetch on this partition re-check (after an append, an
        HWM change, or when the partition changes role or goes away)."""
        for listener in list(self._append_listeners):
            listener()

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        self._append_listeners[listener] = None

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        self._append_listeners.pop(listener, None)

    def consumer_read_end(self, read_committed: bool = False) -> int:
        """Where a consumer's reads stop: the HWM, or the LSO for read_committed."""
        if read_committed:
            return self.last_stable_offset
        return self.log_end_offset if self.settings.read_past_high_watermark else self.high_watermark

    def read(self, fetch_offset: int, max_bytes: int, read_committed: bool = False) -> list[bytes | memoryview]:
        """What a consumer may read: below the HWM, or below the LSO for read_committed."""
        return self.log.read(fetch_offset, max_bytes, max_offset=self.consumer_read_end(read_committed))

    def read_for_replica(self, fetch_offset: int, max_bytes: int) -> list[bytes | memoryview]:
        return self.log.read(fetch_offset, max_bytes)

    def leader_epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """KIP-320: a client behind our epoch is fenced; one ahead of it knows of a leader
        change we have not seen yet. -1 means the client does not say."""
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return None
        return ErrorCode.fenced_leader_epoch if current_leader_epoch < self.leader_epoch else ErrorCode.unknown_leader_epoch

    def leader_error(self, current_leader_epoch: int = -1) -> ErrorCode | None:
        """Why this replica cannot serve a leader-only request, or None."""
        if self.role != LEADER:
            return ErrorCode.kafka_storage_error if self.role == OFFLINE else ErrorCode.not_leader_or_follower
        return self.leader_epoch_error(current_leader_epoch)
