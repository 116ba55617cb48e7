"""Every partition replica on this broker: logs opened, created and deleted as the metadata
says, each partition made leader or follower, one fetcher per leader, and the leader's ISR
maintenance (shrink after replica.lag.time.max.ms, expand once caught up) proposed to the
controller one change at a time per partition."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from cluster.broker.controller_client import AlterPartitionResult, ControllerClient
from cluster.broker.env import Clock, Outbound, Scheduler, TimerHandle
from cluster.broker.log_dir import is_disk_failure
from cluster.broker.partition import FOLLOWER, LEADER, Partition, ReplicationSettings, TopicPartition
from cluster.broker.replica_fetcher import ReplicaFetcher
from cluster.broker.wakeups import DeferredWakeups
from cluster.config import BrokerConfig
from cluster.metadata.image import MetadataDelta, MetadataImage, PartitionState
from cluster.storage.config import LogConfig
from cluster.storage.disk import Disk
from cluster.storage.log import PartitionLog

log = logging.getLogger(__name__)
ISR_CHECK_INTERVAL_MS = 100
PARTITION_METADATA_FILE = "partition.metadata"  # which topic id the directory's log belongs to
HWM_CHECKPOINT_FILE = "high-watermark-checkpoint"
# Kafka's replica.high.watermark.checkpoint.interval.ms default. A restarted replica starts
# from this (possibly stale, hence low) HWM rather than its log end: what is past the HWM
# may never have been committed.
HWM_CHECKPOINT_INTERVAL_MS = 5000
# An AlterPartition whose answer never came (timeout, lost connection) may or may not have
# been applied: it is sent again after this pause, and the maximal ISR stays in force meanwhile.
ALTER_PARTITION_RETRY_BACKOFF_MS = 200
# The controller's answers that say for certain the proposal was not applied (Kafka's
# Partition.handleAlterPartitionError reverts to the committed ISR on exactly these). Any
# other error leaves the proposal pending until the metadata brings a newer partition state.
_ALTER_PARTITION_NOT_APPLIED = frozenset({ErrorCode.operation_not_attempted, ErrorCode.ineligible_replica,
                                          ErrorCode.invalid_request})


@dataclass(frozen=True)
class RoleChanges:
    became_leader: list[TopicPartition] = field(default_factory=list)
    became_follower: list[TopicPartition] = field(default_factory=list)
    removed: list[TopicPartition] = field(default_factory=list)


def _int_setting(configs: dict[str, str], key: str, default: int) -> int:
    try:
        return int(configs[key])
    except (KeyError, ValueError):
        return default


class ReplicaManager:
    def __init__(self, config: BrokerConfig, disk: Disk, clock: Clock, scheduler: Scheduler, outbound: Outbound,
                 controller: ControllerClient, log_config_for: Callable[[str], LogConfig]) -> None:
        self.config = config
        self.disk = disk
        self.clock = clock
        self.scheduler = scheduler
        self.outbound = outbound
        self.controller = controller
        self.log_config_for = log_config_for
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.wakeups = DeferredWakeups(scheduler)  # parked fetches' re-checks, batched per request
        self.running = False
        self.offline = False  # the log directory failed: take_offline()
        self._timer: TimerHandle | None = None
        self._checkpoint_timer: TimerHandle | None = None
        self._checkpointed_hwm: dict[TopicPartition, int] = {}
        # The broker's Broker.on_txn_marker: told of each marker a follower replicates.
        self.on_txn_marker: Callable[[TopicPartition, int, int, bool], None] | None = None

    def _marker_replicated(self, tp: TopicPartition, producer_id: int, producer_epoch: int, committed: bool) -> None:
        if self.on_txn_marker is not None:
            self.on_txn_marker(tp, producer_id, producer_epoch, committed)

    def start(self) -> None:
        self.disk.makedirs(self.config.data_dir)
        self.running = True
        self._schedule_isr_check()
        self._schedule_hwm_checkpoint()

    def shutdown(self) -> None:
        self.running = False
        for timer in (self._timer, self._checkpoint_timer):
            if timer is not None:
                timer.cancel()
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        if self.offline:
            return  # nothing more is written to a failed directory
        self.checkpoint_high_watermarks()
        for partition in self.partitions.values():
            partition.stop()
            partition.log.close()

    def take_offline(self) -> list[TopicPartition]:
        """The log directory failed: Kafka's ReplicaManager.handleLogDirFailure for the only
        directory. Fetchers stop, every partition answers KAFKA_STORAGE_ERROR, and nothing
        here (ISR changes, checkpoints, metadata) touches a log again. Returns the partitions."""
        self.offline = True
        self.running = False
        for timer in (self._timer, self._checkpoint_timer):
            if timer is not None:
                timer.cancel()
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        for partition in self.partitions.values():
            partition.take_offline()
        return sorted(self.partitions, key=lambda tp: (tp.topic, tp.partition))

    # ---- high watermark checkpoints --------------------------------------------------

    def _schedule_hwm_checkpoint(self) -> None:
        def tick() -> None:
            if not self.running:
                return
            self.checkpoint_high_watermarks()
            self._schedule_hwm_checkpoint()

        self._checkpoint_timer = self.scheduler.call_later(HWM_CHECKPOINT_INTERVAL_MS, tick)

    def checkpoint_high_watermarks(self) -> None:
        """Write the HWM of every replica whose HWM moved since its last checkpoint."""
        for tp, p in self.partitions.items():
            if self._checkpointed_hwm.get(tp) != p.high_watermark:
                try:
                    self.disk.write_atomic(f"{self._dir(tp)}/{HWM_CHECKPOINT_FILE}", f"{p.high_watermark}\n".encode("ascii"))
                except OSError as error:
                    log.error("%s: cannot checkpoint the high watermark %d: %s", tp, p.high_watermark, error)
                    continue
                self._checkpointed_hwm[tp] = p.high_watermark

    def _checkpointed_high_watermark(self, tp: TopicPartition) -> int:
        path = f"{self._dir(tp)}/{HWM_CHECKPOINT_FILE}"
        if not self.disk.exists(path):
            return 0
        text = self.disk.read_all(path).decode("ascii", errors="replace").strip()
        if not text.isdigit():
            log.warning("%s: high watermark checkpoint holds %r, not an offset: starting from 0", tp, text[:40])
            return 0
        return int(text)

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def _dir(self, tp: TopicPartition) -> str:
        return f"{self.config.data_dir}/{tp.topic}-{tp.partition}"

    def _settings(self, configs: dict[str, str]) -> ReplicationSettings:
        return ReplicationSettings(
            broker_id=self.config.broker_id,
            min_insync_replicas=_int_setting(configs, "min.insync.replicas", self.config.min_insync_replicas),
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            read_past_high_watermark=self.config.fetch_read_past_high_watermark,
            truncate_to_high_watermark=self.config.replica_truncate_to_high_watermark,
            lso_ignores_open_transactions=self.config.transaction_lso_ignore_open_transactions,
        )

    # ---- metadata --------------------------------------------------------------------

    def apply_metadata(self, image: MetadataImage, delta: MetadataDelta) -> RoleChanges:
        changes = RoleChanges()
        if self.offline:
            return changes  # the partitions stay offline until the broker restarts
        now_ms = self.clock.wall_ms()
        for topic in delta.removed_topics:
            for index in list(topic.partitions):
                tp = TopicPartition(topic.name, index)
                partition = self.partitions.pop(tp, None)
                self._checkpointed_hwm.pop(tp, None)
                if partition is not None:
                    partition.stop()
                    partition.log.close()
                    self.disk.rmtree(self._dir(tp))
                    changes.removed.append(tp)
                    log.info("%s: deleted (topic removed)", tp)
                elif self.disk.exists(self._dir(tp)) and self._topic_id_on_disk(tp) in (None, topic.topic_id):
                    # Deleted while this broker was down: the restart's replay says so.
                    self.disk.rmtree(self._dir(tp))
                    log.info("%s: deleted the log of topic id %s (removed while this broker was down)", tp, topic.topic_id)
        for topic in delta.reconfigured_topics:
            # An altered topic config holds from the next request (min.insync.replicas) or the
            # next roll, flush or retention pass (the log reads its config at each use).
            for index in topic.partitions:
                hosted = self.partitions.get(TopicPartition(topic.name, index))
                if hosted is not None:
                    hosted.settings = self._settings(topic.configs)
                    hosted.log.config = self.log_config_for(topic.name)
        latest: dict[TopicPartition, PartitionState] = {}
        for state in delta.partitions:
            latest[TopicPartition(state.topic, state.partition)] = state  # a later record for the same partition wins
        for tp, state in latest.items():
            if image.topic(state.topic) is None:
                continue
            if self.config.broker_id not in state.replicas:
                gone = self.partitions.pop(tp, None)
                if gone is not None:
                    # Reassigned away from this broker: the replica's log goes with it.
                    gone.stop()
                    gone.log.close()
                    self.disk.rmtree(self._dir(tp))
                    self._checkpointed_hwm.pop(tp, None)
                    changes.removed.append(tp)
                    log.info("%s: deleted (no longer a replica here: replicas %s, leader epoch %d)", tp, list(state.replicas),
                             state.leader_epoch)
                continue
            partition = self.partitions.get(tp)
            if partition is None:
                topic = image.topic(state.topic)
                assert topic is not None
                try:
                    partition_log = self._open_log(tp, state.topic_id)
                except OSError as error:
                    if not is_disk_failure(error):
                        raise
                    log.error("%s: cannot open its log: %s", tp, error)  # the failed directory is being taken offline
                    continue
                partition = self.partitions[tp] = Partition(tp, partition_log, self._settings(topic.configs),
                                                            high_watermark=self._checkpointed_high_watermark(tp))
                partition.marker_listener = self._marker_replicated
                partition.replica_alive = self._broker_alive
            try:
                role = partition.apply_state(state, now_ms)
            except OSError as error:
                if not is_disk_failure(error):
                    raise
                # As Kafka's applyDelta skips a partition whose replica is offline from a storage
                # error: the failed directory has been reported and takes every partition offline.
                log.error("%s: cannot apply leader epoch %d: %s", tp, state.leader_epoch, error)
                if self.offline:
                    return changes
                continue
            if role == LEADER:
                changes.became_leader.append(tp)
                if state.leader_recovering:
                    self._propose(partition, partition.isr, recovered=True)
            elif role == FOLLOWER:
                changes.became_follower.append(tp)
        if delta.replaced:
            changes.removed.extend(self._remove_stray_logs(image))
        if latest or delta.brokers or delta.removed_topics:
            self._refresh_fetchers()
        return changes

    def _remove_stray_logs(self, image: MetadataImage) -> list[TopicPartition]:
        """After a loaded snapshot (or a rebuilt image) no record told this broker which
        topics were deleted meanwhile: remove every partition directory the image does not
        assign here (topic gone, recreated under another id, or replicas elsewhere), as Kafka
        3.7+ removes stray partitions once its metadata is loaded. Only directories with a
        partition.metadata file are ours to judge."""
        removed = []
        for name in self.disk.listdir(self.config.data_dir):
            topic_name, dash, index = name.rpartition("-")
            if not dash or not topic_name or not index.isdigit():
                continue
            tp = TopicPartition(topic_name, int(index))
            if tp in self.partitions or not self.disk.exists(f"{self._dir(tp)}/{PARTITION_METADATA_FILE}"):
                continue
            topic = image.topic(topic_name)
            state = image.partition(topic_name, tp.partition)
            if (topic is not None and state is not None and self.config.broker_id in state.replicas
                    and self._topic_id_on_disk(tp) in (None, topic.topic_id)):
                continue  # still this broker's (opened as its partition record is applied)
            self.disk.rmtree(self._dir(tp))
            self._checkpointed_hwm.pop(tp, None)
            removed.append(tp)
            why = "its topic was deleted" if topic is None else "not assigned here under the topic's current id"
            log.info("%s: deleted a stray log (%s, per the loaded metadata)", tp, why)
        return removed

    def _broker_alive(self, broker_id: int) -> bool:
        registration = self.controller.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def _topic_id_on_disk(self, tp: TopicPartition) -> uuid.UUID | None:
        """The topic id the replica directory was created for (None: no or unreadable file)."""
        path = f"{self._dir(tp)}/{PARTITION_METADATA_FILE}"
        if not self.disk.exists(path):
            return None
        for line in self.disk.read_all(path).decode("utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                try:
                    return uuid.UUID(value.strip())
                except ValueError:
                    return None
        return None

    def _open_log(self, tp: TopicPartition, topic_id: uuid.UUID) -> PartitionLog:
        """Open (recovering) the replica's log, first discarding a directory left by an older
        topic of the same name: the log belongs to the topic id, as Kafka's partition.metadata
        file records."""
        directory = self._dir(tp)
        on_disk = self._topic_id_on_disk(tp)
        if on_disk is not None and on_disk != topic_id:
            log.warning("%s: the log on disk belongs to topic id %s, not %s: deleting it", tp, on_disk, topic_id)
            self.disk.rmtree(directory)
        partition_log = PartitionLog.open(self.disk, directory, self.log_config_for(tp.topic), now_ms=self.clock.wall_ms())
        recovery = partition_log.recovery
        if recovery.truncated_bytes or recovery.reason:
            # Kafka's "Found invalid messages in log segment ...": a torn or corrupt tail, cut.
            log.warning("%s: recovery truncated %d bytes at the log end %d: %s", tp, recovery.truncated_bytes,
                        partition_log.log_end_offset, recovery.reason)
        if on_disk != topic_id:
            self.disk.write_atomic(f"{directory}/{PARTITION_METADATA_FILE}", f"version: 0\ntopic_id: {topic_id}\n".encode())
        return partition_log

    def _refresh_fetchers(self) -> None:
        wanted: dict[int, set[TopicPartition]] = {}
        for tp, p in self.partitions.items():
            if p.role == FOLLOWER and p.leader_id >= 0:
                wanted.setdefault(p.leader_id, set()).add(tp)
        for leader_id in list(self.fetchers):
            if leader_id not in wanted:
                self.fetchers.pop(leader_id).stop()
        for leader_id, tps in wanted.items():
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
            fetcher.partitions = tps
            fetcher.poke()

    # ---- ISR maintenance -------------------------------------------------------------

    def _schedule_isr_check(self) -> None:
        def tick() -> None:
            if not self.running:
                return
            self._check_isrs()
            self._schedule_isr_check()

        self._timer = self.scheduler.call_later(ISR_CHECK_INTERVAL_MS, tick)

    def _check_isrs(self) -> None:
        now_ms = self.clock.wall_ms()  # replica lag is wall-clock time in Kafka (Partition.scala)
        image = self.controller.image
        for p in self.partitions.values():
            if p.role != LEADER or p.pending_isr is not None or p.state is None:
                continue
            lagging = p.lagging_followers(now_ms)
            if lagging:
                log.info("%s: followers %s not caught up for %d ms: shrinking the ISR", p.tp, lagging, p.settings.replica_lag_time_max_ms)
                self._propose(p, tuple(b for b in p.isr if b not in lagging))
                continue
            joining = [r for r in p.expandable_followers(now_ms) if (b := image.brokers.get(r)) is not None and b.usable
                       and (p.followers[r].broker_epoch in (-1, b.broker_epoch))]
            if joining and not (p.state.leader_recovering):
                log.info("%s: followers %s caught up (log end >= HWM %d): expanding the ISR", p.tp, joining, p.high_watermark)
                self._propose(p, tuple(sorted(set(p.isr) | set(joining))))

    def _propose(self, p: Partition, new_isr: tuple[int, ...], recovered: bool = False) -> None:
        """Send an AlterPartition for `p`; while it is out, HWM decisions use the maximal ISR."""
        state = p.state
        if state is None or p.pending_isr is not None:
            return
        def members() -> list[tuple[int, int]]:
            image = self.controller.image
            out = []
            for b in new_isr:
                follower = p.followers.get(b)
                epoch = follower.broker_epoch if follower is not None and follower.broker_epoch >= 0 else (
                    image.brokers[b].broker_epoch if b in image.brokers else -1)
                if b == self.config.broker_id:
                    epoch = self.controller.broker_epoch  # current at each (re)send: it changes on re-registration
                out.append((b, epoch))
            return out

        p.pending_isr = new_isr
        recovering = state.leader_recovering and not recovered

        def still_pending() -> bool:
            current = p.state
            return (self.running and p.role == LEADER and p.pending_isr == new_isr and current is not None
                    and current.leader_epoch == state.leader_epoch and current.partition_epoch == state.partition_epoch)

        def send() -> None:
            if still_pending():
                self.controller.alter_partition(state, members(), recovering, done)

        def done(result: AlterPartitionResult) -> None:
            if not still_pending():
                return
            if result.error == ErrorCode.none and result.state is not None:
                p.pending_isr = None
                log.info("%s: ISR now %s (partition epoch %d)", p.tp, list(result.state.isr), result.state.partition_epoch)
                if p.state is not None and result.state.partition_epoch > p.state.partition_epoch:
                    p.apply_state(result.state, self.clock.wall_ms())
            elif result.unanswered:
                # The controller may have applied it: going back to the committed ISR now could
                # let this leader advance the HWM (and acknowledge acks=all writes) over an ISR
                # smaller than the one the controller elects from. Keep the maximal ISR; ask again.
                log.info("%s: AlterPartition to ISR %s unanswered (%s): sending it again", p.tp, list(new_isr), result.error.name)
                self.scheduler.call_later(ALTER_PARTITION_RETRY_BACKOFF_MS, send)
                return
            elif result.error in _ALTER_PARTITION_NOT_APPLIED:
                p.pending_isr = None
                log.info("%s: AlterPartition to ISR %s refused: %s", p.tp, list(new_isr), result.error.name)
            else:
                # Stale leader epoch or partition epoch, unknown partition...: the metadata will
                # bring the state that replaces this proposal (Partition.apply_state clears it).
                log.info("%s: AlterPartition to ISR %s refused: %s; the maximal ISR holds until newer metadata",
                         p.tp, list(new_isr), result.error.name)
                return
            p.maybe_advance_high_watermark()

        send()

    # ---- internal appends ------------------------------------------------------------

    def append_internal(self, tp: TopicPartition, build: Callable[[int, int], bytes], now_ms: int,
                        on_committed: Callable[[ErrorCode], None], timeout_ms: int = 5000,
                        refuse: Callable[[Partition], ErrorCode | None] | None = None) -> None:
        """Append a broker-built batch as leader and call back once it is committed (acks=-1).
        `refuse`, asked on the leader just before the append: an error it returns is answered
        instead (KIP-890's guard check for a verified TxnOffsetCommit)."""
        p = self.partitions.get(tp)
        if p is None or p.role != LEADER:
            on_committed(ErrorCode.not_leader_or_follower)
            return
        refused = refuse(p) if refuse is not None else None
        if refused is not None:
            on_committed(refused)
            return
        header = p.append_internal(build, now_ms)
        pending = p.wait_for_commit(header.next_offset, on_committed)
        if not pending.settled:
            self.scheduler.call_later(timeout_ms, lambda: p.cancel_wait(pending, ErrorCode.request_timed_out))
