"""The controller core (sans-I/O): every request it serves either reads the metadata image or
appends records to the metadata log through the metadata quorum (cluster/quorum/api.py: Raft,
a majority of one for a single controller) and applies them to the image, then answers once
they are committed. Only the quorum's leader decides; the others answer NOT_CONTROLLER.

Decisions follow KRaft (reference/kafka-reliability.md §1.3, §2.2-2.3):
- broker epoch = offset of the broker's registration record; a registration starts fenced
  and is unfenced once the broker has caught up with the log up to that record;
- missed heartbeats for broker.session.timeout.ms fence a broker: it leaves every ISR and
  loses every leadership; with eligible leader replicas (KIP-966, on by default as in Kafka
  4.1) the ISR may empty and members lost below min ISR become eligible leaders, and a broker
  registering after an unclean shutdown (no clean-shutdown epoch) leaves every ISR and ELR;
  without them (eligible.leader.replicas.version=0) the last ISR member stays, as KRaft kept it;
- a leader is elected from the usable ISR members in replica order; only with
  unclean.leader.election.enable (broker or topic config) from any usable replica, which then
  becomes the whole ISR and is marked recovering (committed records may be lost);
- every leader change bumps leader and partition epoch, an ISR change the partition epoch;
- AlterPartition is accepted only with matching broker, leader and partition epochs and
  eligible added replicas (KIP-497, KIP-903).
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo, Clock, Endpoint, Reply, Response, Rng, Scheduler, TimerHandle
from cluster.broker.topics import InvalidTopicError, check_topic_name, new_topic_id
from cluster.controller.config import ControllerConfig
from cluster.controller.elections import IsrProposal, check_isr_proposal, clear_elr, reelect
from cluster.controller.image_snapshot import copy_image, decode_image, encode_image
from cluster.controller.not_controller import not_controller_body
from cluster.controller.placement import assign_replicas, check_topic_configs
from cluster.controller.elect_leaders import plan_election
from cluster.controller.partitions import plan_create_partitions
from cluster.controller.topic_configs import plan_alter_configs
from cluster.metadata.image import MetadataImage, PartitionState
from cluster.metadata.records import (
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from cluster.protocol.codec import Request, build, encode_response, payload_class, response_class
from cluster.protocol.fetch_response import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from cluster.protocol.versions import ApiKey, VersionRange
from cluster.quorum import rpc as quorum_rpc
from cluster.quorum.api import MetadataQuorum, QuorumListener, QuorumVoters
from cluster.storage.log import OffsetOutOfRangeError

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)
MAX_PARTITIONS_PER_TOPIC = 10_000
SESSION_CHECK_INTERVAL_MS = 50

CONTROLLER_VERSIONS: dict[ApiKey, VersionRange] = {
    ApiKey.API_VERSIONS: VersionRange(0, 3),
    ApiKey.FETCH: VersionRange(12, 16),
    ApiKey.CREATE_TOPICS: VersionRange(2, 7),
    ApiKey.DELETE_TOPICS: VersionRange(1, 6),
    ApiKey.ALTER_PARTITION: VersionRange(2, 3),
    ApiKey.BROKER_REGISTRATION: VersionRange(0, 3),
    ApiKey.BROKER_HEARTBEAT: VersionRange(0, 1),
    ApiKey.ALLOCATE_PRODUCER_IDS: VersionRange(0, 0),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2),
}


def _metric_name(topic: str) -> str:
    return topic.replace(".", "_")


QuorumFactory = Callable[[QuorumListener], MetadataQuorum]
"""Builds this node's Raft node with the controller as its listener (main.py and SimCluster
know how; the core only sees the MetadataQuorum contract)."""


class NotActiveController(Exception):
    """A handler tried to append while this node does not lead: answered NOT_CONTROLLER."""


@dataclass(slots=True)
class _Barrier:
    """An answer held until every append made before it is committed."""

    end_offset: int
    request: Request
    reply: Reply
    response: Response


@dataclass
class _MetadataWaiter:
    request: Request
    fetch_offset: int
    max_bytes: int
    reply: Reply
    timer: TimerHandle | None = None


class Controller:
    def __init__(self, config: ControllerConfig, disk: Any, clock: Clock, scheduler: Scheduler, rng: Rng,
                 quorum_factory: QuorumFactory, quorum_versions: Mapping[ApiKey, VersionRange] | None = None) -> None:
        self.config = config
        # What the connection layer decodes: the controller's APIs and, with a quorum, its own.
        self.versions = {**quorum_versions, **CONTROLLER_VERSIONS} if quorum_versions else CONTROLLER_VERSIONS
        self.disk = disk
        self.clock = clock
        self.scheduler = scheduler
        self.rng = rng
        # The working image: on the active controller it runs ahead of the committed image by
        # the records appended but not yet committed (KRaft's controller also decides on its
        # uncommitted state, so two requests in flight never decide from the same stale state);
        # on a standby it is the committed image itself.
        self.image = MetadataImage()
        self.committed_image = self.image
        self._quorum_factory = quorum_factory
        self.quorum: MetadataQuorum | None = None
        self.voter_ids = frozenset(QuorumVoters.parse(config.quorum_voters).voters) if config.quorum_voters else frozenset({config.node_id})
        self._active = False  # leads the quorum and has applied everything committed before
        self.epoch = -1  # the quorum epoch this node leads, or -1
        self._appended_end = 0  # end offset of the last append of this epoch
        self._committed_end = 0  # end offset of the last append known committed
        self._barriers: list[_Barrier] = []
        self.failovers = 0  # times this node became the active controller
        # Told (offset, quorum epoch, record value) of every committed record as it is
        # applied: the runtime's journal for the checks after a run (quorum_journal.py).
        self.on_committed: Callable[[int, int, bytes], None] | None = None
        # The runtime's way to end the process when committed metadata cannot be applied
        # (Kafka's QuorumController hands a replay error to its fatal fault handler, which
        # halts the process); None: the core only goes silent.
        self.on_fatal: Callable[[str], None] | None = None
        self.halted: str | None = None  # why this node halted on a fatal fault, once it has
        self._last_heartbeat_ns: dict[int, int] = {}
        self._waiters: list[_MetadataWaiter] = []
        # Brokers being unfenced by the batch under construction (usable for its elections).
        self._unfencing: set[int] = set()
        self._session_timer: TimerHandle | None = None
        self._running = False
        self._handlers: dict[int, Callable[[Request, ClientInfo, Reply], None]] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.FETCH: self._fetch,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.ALTER_PARTITION: self._alter_partition,
            ApiKey.BROKER_REGISTRATION: self._broker_registration,
            ApiKey.BROKER_HEARTBEAT: self._broker_heartbeat,
            ApiKey.ALLOCATE_PRODUCER_IDS: self._allocate_producer_ids,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._alter_configs,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.ELECT_LEADERS: self._elect_leaders,
        }

    versions: Mapping[ApiKey, VersionRange] = CONTROLLER_VERSIONS  # an instance with a quorum serves the quorum's too

    @property
    def endpoint(self) -> Endpoint:
        """Where brokers reach this controller."""
        return Endpoint(self.config.node_id, self.config.host, self.config.port)

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """Whether this node is the active controller (leads the quorum and may decide)."""
        return self._active

    def start(self) -> None:
        """Start the Raft node: the image comes through on_commit (a restart replays the
        recovered log, or loads the snapshot first) and this node decides only from
        on_become_leader on, when every live registration gets a fresh session (a grace
        period, as after a KRaft controller failover)."""
        self._running = True
        self.quorum = self._quorum_factory(self)
        self.quorum.start()
        log.info("controller %d started on the metadata quorum (voters %s)", self.config.node_id, sorted(self.voter_ids))

    def _activate(self) -> None:
        """Start deciding: fresh sessions for every registered broker, then the session check."""
        self._active = True
        self.failovers += 1
        now = self.clock.monotonic_ns()
        self._last_heartbeat_ns = {broker.broker_id: now for broker in self.image.brokers.values()}
        self._schedule_session_check()

    def _deactivate(self, why: str) -> None:
        """Stop deciding: cancel the session check, refuse held answers, and send waiting
        metadata fetchers to the new leader."""
        self._active = False
        if self._session_timer is not None:
            self._session_timer.cancel()
            self._session_timer = None
        barriers, self._barriers = self._barriers, []
        for barrier in barriers:
            barrier.reply(self._respond(barrier.request, not_controller_body(barrier.request)))
        if barriers:
            log.info("controller %d: %d answers refused with NOT_CONTROLLER (%s)", self.config.node_id, len(barriers), why)
        self._wake_waiters()

    def shutdown(self) -> None:
        self._running = False
        if self.quorum is not None:
            self.quorum.shutdown()
        if self._active:
            self._deactivate("shutting down")
        if self._session_timer is not None:
            self._session_timer.cancel()
        for waiter in self._waiters:
            if waiter.timer is not None:
                waiter.timer.cancel()
        self._waiters.clear()

    # ---- the quorum's listener (cluster.quorum.api.QuorumListener) --------------------------

    def on_commit(self, base_offset: int, records: list[bytes], epoch: int) -> None:
        if self.halted is not None:
            return  # the process is ending: it applies nothing more
        for i, value in enumerate(records):
            offset = base_offset + i
            try:
                self.committed_image.apply(decode_record(value, f"at offset {offset} of the metadata quorum"), offset)
            except ValueError as error:
                # A committed record this node's image cannot take (e.g. a partition of a topic
                # its diverged log never created, under controller.quorum.vote.skip.log.check):
                # its state would no longer be the log's, so it halts, as Kafka's controller
                # does on a replay error. The record was committed all the same: journaled.
                if self.on_committed is not None:
                    self.on_committed(offset, epoch, value)
                self._fatal(f"committed metadata at offset {offset} (epoch {epoch}) cannot be applied: {error}")
                return
            if self.on_committed is not None:
                self.on_committed(offset, epoch, value)
        self._wake_waiters()

    def _fatal(self, reason: str) -> None:
        """Stop at once, as Kafka's ProcessTerminatingFaultHandler: no graceful resignation
        (a halted process sends nothing more; the other voters time out its leadership), no
        answer to what is held; then the runtime ends the process."""
        if self.halted is not None:
            return
        self.halted = reason
        self._running = False
        self._active = False
        self.epoch = -1
        if self._session_timer is not None:
            self._session_timer.cancel()
            self._session_timer = None
        self._barriers.clear()
        for waiter in self._waiters:
            if waiter.timer is not None:
                waiter.timer.cancel()
        self._waiters.clear()
        log.error("controller %d halted: %s", self.config.node_id, reason)
        if self.on_fatal is not None:
            self.on_fatal(reason)

    def on_become_leader(self, epoch: int) -> None:
        if self.halted is not None:
            return
        assert self.quorum is not None
        log_end = self.quorum.state.log_end_offset
        if log_end < self.committed_image.next_offset:
            # The quorum's log was cut below records this node had applied as committed (only
            # an unsafe election, controller.quorum.vote.skip.log.check, lets that happen):
            # Kafka's metadata log refuses to truncate below its high watermark and the
            # controller dies of it; leading on that log would append at offsets already
            # applied, so this node halts as on any replay error.
            self._fatal(f"leading epoch {epoch} on a metadata log that ends at offset {log_end}, below the "
                        f"{self.committed_image.next_offset} records applied as committed (the log was truncated below them)")
            return
        self.epoch = epoch
        self.image = copy_image(self.committed_image)
        self._appended_end = self._committed_end = self.committed_image.next_offset
        self._activate()
        log.info("controller %d is the active controller in epoch %d: %d brokers get a grace period of %d ms",
                 self.config.node_id, epoch, len(self.image.brokers), self.config.broker_session_timeout_ms)

    def on_resign(self, epoch: int, new_leader_id: int | None) -> None:
        if not self._active:
            return
        self.epoch = -1
        # Decisions not yet committed may never be: decide again from the committed image.
        self.image = self.committed_image
        self._deactivate(f"resigned epoch {epoch}, leader now {new_leader_id}")
        log.info("controller %d is no longer the active controller (epoch %d; leader now %s)", self.config.node_id, epoch, new_leader_id)

    def snapshot(self) -> tuple[int, bytes]:
        return self.committed_image.next_offset, encode_image(self.committed_image)

    def load_snapshot(self, end_offset: int, data: bytes) -> None:
        image = decode_image(data)
        if image.next_offset != end_offset:
            raise ValueError(f"metadata snapshot ends at {image.next_offset}, not at {end_offset} as the quorum says")
        if self.image is self.committed_image:
            self.image = image
        self.committed_image = image
        log.info("controller %d loaded the metadata snapshot ending at %d", self.config.node_id, end_offset)

    def handle(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        if self.halted is not None:
            # Only until the runtime ends the process: neither the quorum nor the controller answers.
            reply(Response(None, close_connection=True, close_reason=f"controller {self.config.node_id} halted"))
            return
        handler = self._handlers.get(request.api_key)
        if self.quorum is not None and (handler is None or self._is_voter_fetch(request)):
            if self.quorum.handle(request, client, reply):
                return
        if handler is None:
            reply(Response(None, close_connection=True, close_reason=f"the controller does not serve API key {request.api_key}"))
            return
        if not self._active and request.api_key not in (ApiKey.API_VERSIONS, ApiKey.FETCH):
            reply(self._respond(request, not_controller_body(request)))
            return
        try:
            handler(request, client, reply)
        except NotActiveController:
            # Leadership ended part way: what was appended is refused by _deactivate.
            reply(self._respond(request, not_controller_body(request)))

    def _is_voter_fetch(self, request: Request) -> bool:
        """A Raft follower's Fetch (from a voter), served by the quorum; brokers' metadata
        fetches are the controller's."""
        if request.api_key != ApiKey.FETCH:
            return False
        replica = getattr(request.body, "replica_id", None)
        if replica is None:
            state = getattr(request.body, "replica_state", None)
            replica = getattr(state, "replica_id", None)
        # A voter never fetches from itself: that id is a combined-mode broker sharing the node id.
        return replica is not None and int(replica) in self.voter_ids and int(replica) != self.config.node_id

    def _answer(self, request: Request, reply: Reply, body: Any) -> None:
        """Answer once every record appended so far is committed (at once without a quorum,
        or when nothing is pending); NOT_CONTROLLER if leadership is lost first."""
        response = self._respond(request, body)
        if self._committed_end >= self._appended_end:
            reply(response)
            return
        self._barriers.append(_Barrier(self._appended_end, request, reply, response))

    def _respond(self, request: Request, body: Any) -> Response:
        return Response([encode_response(request.api_key, request.api_version, request.correlation_id, body)])

    # ---- the log ---------------------------------------------------------------------

    def commit(self, records: list[MetadataRecord]) -> int:
        """Append `records` through the quorum as one atomic batch and apply them to the
        working image; returns the offset of the first. The batch is committed later (once
        fsynced on a majority of voters), and answers given through `_answer` wait for it.
        Raises NotActiveController when this node does not lead."""
        assert self.quorum is not None
        if not self._active:
            raise NotActiveController(f"controller {self.config.node_id} does not lead")
        if not records:
            return self._appended_end
        epoch = self.epoch
        placed: list[int] = []

        def done(base_offset: int | None, why: str | None) -> None:
            if why is not None or base_offset is None:
                log.info("controller %d: append at %s not committed: %s", self.config.node_id, placed or "?", why)
                return  # on_resign refuses the held answers
            if epoch == self.epoch:
                self._committed_end = max(self._committed_end, base_offset + len(records))
                self._release_barriers()

        base = self.quorum.append([encode_record(r) for r in records], done)
        if base is None:
            raise NotActiveController(f"controller {self.config.node_id}: the quorum refused the append (not the leader)")
        placed.append(base)
        for i, record in enumerate(records):
            self.image.apply(record, base + i)
        self._appended_end = max(self._appended_end, base + len(records))
        return base

    def _next_append_offset(self) -> int:
        """The offset the next appended record gets."""
        assert self.quorum is not None
        return self.quorum.state.log_end_offset

    def _release_barriers(self) -> None:
        ready = [b for b in self._barriers if b.end_offset <= self._committed_end]
        if ready:
            self._barriers = [b for b in self._barriers if b.end_offset > self._committed_end]
            for barrier in ready:
                barrier.reply(barrier.response)

    # ---- elections -------------------------------------------------------------------

    def _unclean_allowed(self, topic: str) -> bool:
        """unclean.leader.election.enable of the topic, else of the controller."""
        image = self.image.topic(topic)
        raw = image.configs.get("unclean.leader.election.enable") if image else None
        if raw is None:
            return self.config.unclean_leader_election_enable
        return str(raw).strip().lower() in ("true", "1", "yes")

    def _usable(self, broker_id: int) -> bool:
        if broker_id in self._unfencing:
            return True
        broker = self.image.brokers.get(broker_id)
        return broker is not None and broker.usable

    @property
    def _elr_enabled(self) -> bool:
        return self.config.eligible_leader_replicas_version >= 1

    def _min_isr(self, topic: str) -> int:
        """The topic's effective min.insync.replicas (its config, else the cluster's). Kafka caps
        it at the replication factor; uncapped, the ELR is the same: an ISR of every replica
        leaves nobody to be eligible."""
        image = self.image.topic(topic)
        raw = image.configs.get("min.insync.replicas") if image else None
        try:
            return int(raw) if raw is not None else self.config.min_insync_replicas
        except ValueError:
            return self.config.min_insync_replicas

    def _reelect(self, p: PartitionState, leaving: int | None, unclean_shutdown: bool = False) -> PartitionRecord | None:
        return reelect(p, leaving, self._usable, self._unclean_allowed(p.topic), min_isr=self._min_isr(p.topic),
                       elr_enabled=self._elr_enabled, unclean_shutdown=unclean_shutdown)

    def _all_partitions(self) -> list[PartitionState]:
        return [p for t in sorted(self.image.topics_by_name.values(), key=lambda t: t.name) for _, p in sorted(t.partitions.items())]

    def _fence_records(self, broker_id: int, *, shutting_down: bool = False, unclean_shutdown: bool = False) -> list[MetadataRecord]:
        broker = self.image.brokers[broker_id]
        records: list[MetadataRecord] = [BrokerRegistrationChangeRecord(broker_id, broker.broker_epoch, fenced=not shutting_down,
                                                                        in_controlled_shutdown=shutting_down)]
        return records + self._leave_records(broker_id, unclean_shutdown)

    def _leave_records(self, broker_id: int, unclean_shutdown: bool = False) -> list[MetadataRecord]:
        """The broker leaves every ISR and leadership (with `unclean_shutdown` every ELR too)."""
        records: list[MetadataRecord] = []
        for p in self._all_partitions():
            if broker_id in p.isr or p.leader == broker_id or (unclean_shutdown and broker_id in p.elr):
                change = self._reelect(p, broker_id, unclean_shutdown)
                if change is not None:
                    records.append(change)
        return records

    def _log_partition_changes(self, records: list[MetadataRecord], why: str) -> None:
        for record in records:
            if isinstance(record, PartitionRecord):
                topic = self.image.topics_by_id.get(uuid.UUID(record.topic_id))
                log.info("%s: %s-%d leader %d epoch %d, ISR %s, partition epoch %d%s%s%s", why, topic.name if topic else record.topic_id,
                         record.partition, record.leader, record.leader_epoch, list(record.isr), record.partition_epoch,
                         f", ELR {list(record.elr)}" if record.elr else "",
                         f", last known leader {record.last_known_leader}" if record.last_known_leader != NO_LEADER else "",
                         " (recovering)" if record.leader_recovering else "")

    # ---- sessions --------------------------------------------------------------------

    def _schedule_session_check(self) -> None:
        def tick() -> None:
            if not self._running or not self._active:
                return
            try:
                self._expire_sessions()
            except NotActiveController:
                return
            self._schedule_session_check()

        self._session_timer = self.scheduler.call_later(SESSION_CHECK_INTERVAL_MS, tick)

    def _expire_sessions(self) -> None:
        now = self.clock.monotonic_ns()
        timeout_ns = self.config.broker_session_timeout_ms * 1_000_000
        for broker in sorted(self.image.brokers.values(), key=lambda b: b.broker_id):
            if broker.fenced:
                continue
            last = self._last_heartbeat_ns.get(broker.broker_id, now)
            if now - last > timeout_ns:
                records = self._fence_records(broker.broker_id)
                why = f"broker {broker.broker_id} (epoch {broker.broker_epoch}) fenced: no heartbeat for {(now - last) // 1_000_000} ms"
                log.info(why)
                self._log_partition_changes(records, why)
                self.commit(records)

    # ---- ApiVersions -----------------------------------------------------------------

    def _api_versions(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        version = request.api_version
        entry = payload_class(ApiKey.API_VERSIONS, version, "ApiVersion")
        body = build(response_class(ApiKey.API_VERSIONS, version), error_code=ErrorCode.none,
                     api_keys=tuple(entry(api_key=int(k), min_version=r.min_version, max_version=r.max_version) for k, r in sorted(CONTROLLER_VERSIONS.items())),
                     throttle_time=NO_THROTTLE, supported_features=(), finalized_features_epoch=-1, finalized_features=(), zk_migration_ready=False)
        reply(self._respond(request, body))

    # ---- brokers ---------------------------------------------------------------------

    def _broker_registration(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        cls = response_class(ApiKey.BROKER_REGISTRATION, request.api_version)

        def answer(error: ErrorCode, epoch: int = -1) -> None:
            self._answer(request, reply, build(cls, throttle_time=NO_THROTTLE, error_code=error, broker_epoch=epoch))

        if body.cluster_id != self.config.cluster_id:
            answer(ErrorCode.inconsistent_cluster_id)
            return
        if not body.listeners:
            answer(ErrorCode.invalid_request)
            return
        broker_id = int(body.broker_id)
        incarnation = str(body.incarnation_id)
        existing = self.image.brokers.get(broker_id)
        if existing is not None and existing.incarnation_id == incarnation:
            answer(ErrorCode.none, existing.broker_epoch)  # a retry of an accepted registration
            return
        records: list[MetadataRecord] = []
        # KIP-966: a broker whose last run did not end in a clean shutdown at its registered
        # epoch (v3's PreviousBrokerEpoch, -1 without one) may have lost its unflushed tail, so
        # it leaves every ISR and ELR (Kafka's handleBrokerUncleanShutdown).
        previous_epoch = int(getattr(body, "previous_broker_epoch", -1)) if request.api_version >= 3 else -1
        unclean = self._elr_enabled and existing is not None and previous_epoch != existing.broker_epoch
        if existing is not None and not existing.fenced:
            last = self._last_heartbeat_ns.get(broker_id, 0)
            if self.clock.monotonic_ns() - last <= self.config.broker_session_timeout_ms * 1_000_000:
                answer(ErrorCode.duplicate_broker_registration)
                return
            records += self._fence_records(broker_id, unclean_shutdown=unclean)
        elif unclean:
            records += self._leave_records(broker_id, unclean_shutdown=True)
        # The broker epoch is the offset its registration record will have.
        epoch = self._next_append_offset() + len(records)
        listener = body.listeners[0]
        records.append(RegisterBrokerRecord(broker_id, epoch, incarnation, listener.host, int(listener.port), fenced=True))
        self._log_partition_changes(records, f"broker {broker_id} re-registered" + (" after an unclean shutdown" if unclean else ""))
        base = self.commit(records)
        assert base + len(records) - 1 == epoch, f"registration record at {base + len(records) - 1}, expected {epoch}"
        self._last_heartbeat_ns[broker_id] = self.clock.monotonic_ns()
        log.info("broker %d registered at %s:%d with epoch %d (incarnation %s)", broker_id, listener.host, listener.port, epoch, incarnation)
        answer(ErrorCode.none, epoch)

    def _broker_heartbeat(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        cls = response_class(ApiKey.BROKER_HEARTBEAT, request.api_version)
        broker_id = int(body.broker_id)
        broker = self.image.brokers.get(broker_id)

        def answer(error: ErrorCode, caught_up: bool = False, fenced: bool = True, shut_down: bool = False) -> None:
            self._answer(request, reply, build(cls, throttle_time=NO_THROTTLE, error_code=error, is_caught_up=caught_up,
                                               is_fenced=fenced, should_shut_down=shut_down))

        if broker is None or broker.broker_epoch != body.broker_epoch:
            answer(ErrorCode.stale_broker_epoch)
            return
        self._last_heartbeat_ns[broker_id] = self.clock.monotonic_ns()
        caught_up = body.current_metadata_offset >= broker.broker_epoch
        if body.want_shut_down and not broker.in_controlled_shutdown and not broker.fenced:
            records = self._fence_records(broker_id, shutting_down=True)
            why = f"broker {broker_id} in controlled shutdown"
            log.info(why)
            self._log_partition_changes(records, why)
            self.commit(records)
        elif broker.fenced and caught_up and not body.want_fence and not body.want_shut_down:
            # Unfenced, and in the same batch a leader for every leaderless partition it can
            # now lead, so no broker ever sees it usable yet its partitions still offline.
            self._unfencing = {broker_id}
            try:
                elections = [change for p in self._all_partitions() if p.leader == NO_LEADER and broker_id in p.replicas
                             if (change := self._reelect(p, None)) is not None]
            finally:
                self._unfencing = set()
            why = f"broker {broker_id} (epoch {broker.broker_epoch}) unfenced"
            log.info(why)
            self._log_partition_changes(elections, why)
            self.commit([BrokerRegistrationChangeRecord(broker_id, broker.broker_epoch, fenced=False), *elections])
        elif body.want_fence and not broker.fenced:
            self.commit(self._fence_records(broker_id))
        current = self.image.brokers[broker_id]
        leads = any(p.leader == broker_id for p in self._all_partitions())
        # A fenced broker leads nothing and is in no ISR it could leave: it may stop at once.
        shut_down = (current.in_controlled_shutdown or (body.want_shut_down and current.fenced)) and not leads
        if shut_down and not current.fenced:
            # Its leaderships are gone and it is about to stop: fence it now (as KRaft does),
            # so that when it comes back it can register again at once.
            self.commit([BrokerRegistrationChangeRecord(broker_id, current.broker_epoch, fenced=True, in_controlled_shutdown=True)])
            log.info("broker %d (epoch %d) completed its controlled shutdown and is fenced", broker_id, current.broker_epoch)
        answer(ErrorCode.none, caught_up, True if shut_down else current.fenced, shut_down)

    def _allocate_producer_ids(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        cls = response_class(ApiKey.ALLOCATE_PRODUCER_IDS, request.api_version)
        broker = self.image.brokers.get(int(body.broker_id))
        if broker is None or broker.broker_epoch != body.broker_epoch:
            self._answer(request, reply, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.stale_broker_epoch, producer_id_start=-1, producer_id_len=0))
            return
        start = self.image.next_producer_id
        size = self.config.producer_id_block_size
        self.commit([ProducerIdsRecord(broker.broker_id, broker.broker_epoch, start + size)])
        self._answer(request, reply, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id_start=start, producer_id_len=size))

    # ---- partitions ------------------------------------------------------------------

    def _alter_partition(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        version = request.api_version
        cls = response_class(ApiKey.ALTER_PARTITION, version)
        topic_cls = payload_class(ApiKey.ALTER_PARTITION, version, "TopicData")
        partition_cls = payload_class(ApiKey.ALTER_PARTITION, version, "PartitionData")
        sender = self.image.brokers.get(int(body.broker_id))
        if sender is None or sender.broker_epoch != body.broker_epoch:
            self._answer(request, reply, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.stale_broker_epoch, topics=()))
            return
        topics_out = []
        records: list[MetadataRecord] = []
        for topic in body.topics:
            topic_image = self.image.topics_by_id.get(topic.topic_id)
            partitions_out = []
            for data in topic.partitions:
                p = topic_image.partitions.get(data.partition_index) if topic_image else None
                if version >= 3:
                    new_isr = tuple((int(m.broker_id), int(m.broker_epoch)) for m in data.new_isr_with_epochs)
                else:
                    new_isr = tuple((int(b), -1) for b in data.new_isr)
                proposal = IsrProposal(sender.broker_id, int(data.leader_epoch), int(data.partition_epoch), new_isr,
                                       bool(data.leader_recovery_state))
                error, record = check_isr_proposal(p, proposal, self.image.brokers, min_isr=self._min_isr(topic_image.name) if topic_image else 1,
                                                   elr_enabled=self._elr_enabled)
                if error is not ErrorCode.none or p is None:
                    partitions_out.append(build(partition_cls, partition_index=data.partition_index, error_code=error, leader_id=-1,
                                                leader_epoch=-1, isr=(), leader_recovery_state=0, partition_epoch=-1))
                    continue
                if record is not None:
                    records.append(record)
                    leader, leader_epoch, isr, recovering, partition_epoch = (record.leader, record.leader_epoch, record.isr,
                                                                              record.leader_recovering, record.partition_epoch)
                else:
                    leader, leader_epoch, isr, recovering, partition_epoch = p.leader, p.leader_epoch, p.isr, p.leader_recovering, p.partition_epoch
                partitions_out.append(build(partition_cls, partition_index=data.partition_index, error_code=error, leader_id=leader,
                                            leader_epoch=leader_epoch, isr=isr, leader_recovery_state=int(recovering),
                                            partition_epoch=partition_epoch))
            topics_out.append(build(topic_cls, topic_id=topic.topic_id, partitions=tuple(partitions_out)))
        if records:
            self._log_partition_changes(records, f"AlterPartition from broker {sender.broker_id} (epoch {sender.broker_epoch})")
            self.commit(records)
        self._answer(request, reply, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(topics_out)))

    # ---- topics ----------------------------------------------------------------------

    def _create_topics(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        version = request.api_version
        result_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicResult")
        results = []
        named = Counter(topic.name for topic in request.body.topics)
        for topic in request.body.topics:
            if named[topic.name] > 1:
                error, message, records = ErrorCode.invalid_request, f"topic {topic.name!r} is named more than once in the request", []
            else:
                error, message, records = self._plan_topic(topic)
            topic_id = uuid.UUID(int=0)
            partitions = replication = -1
            if error is ErrorCode.none:
                topic_id = uuid.UUID(records[0].topic_id)  # type: ignore[union-attr]
                partitions = len(records) - 1
                replication = len(records[1].replicas)  # type: ignore[union-attr]
                if not request.body.validate_only:
                    self.commit(records)
                    log.info("created topic %s (%s): %d partitions, replication factor %d; assignment %s", topic.name, topic_id,
                             partitions, replication, [list(r.replicas) for r in records[1:]])  # type: ignore[union-attr]
            results.append(build(result_cls, name=topic.name, topic_id=topic_id, error_code=error, error_message=message,
                                 topic_config_error_code=ErrorCode.none, num_partitions=partitions, replication_factor=replication, configs=None))
        self._answer(request, reply, build(response_class(ApiKey.CREATE_TOPICS, version), throttle_time=NO_THROTTLE, topics=tuple(results)))

    def _plan_topic(self, topic: Any) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
        """The records creating `topic` (one CreatableTopic of a request), or why not."""
        try:
            check_topic_name(topic.name)
        except InvalidTopicError as error:
            return ErrorCode.invalid_topic_exception, str(error), []
        if self.image.topic(topic.name) is not None:
            return ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists", []
        # Metric names turn '.' into '_', so Kafka refuses names equal up to that swap.
        collides = next((name for name in self.image.topics_by_name if _metric_name(name) == _metric_name(topic.name)), None)
        if collides is not None:
            return ErrorCode.invalid_topic_exception, f"topic {topic.name!r} collides with existing topic {collides!r}", []
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        problem = check_topic_configs(configs)
        if problem is not None:
            return ErrorCode.invalid_config, f"topic {topic.name!r}: {problem}", []
        usable = [b.broker_id for b in self.image.usable_brokers()]
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                return ErrorCode.invalid_request, "num_partitions and replication_factor must be -1 when replica assignments are given", []
            assignment = {int(a.partition_index): tuple(int(b) for b in a.broker_ids) for a in topic.assignments}
            if sorted(assignment) != list(range(len(assignment))) or len(assignment) != len(topic.assignments):
                return ErrorCode.invalid_replica_assignment, "partition indices in the assignment must be 0..n-1, each once", []
            replica_lists = [assignment[i] for i in range(len(assignment))]
            for replicas in replica_lists:
                unknown = [b for b in replicas if b not in self.image.brokers]
                if not replicas or unknown or len(set(replicas)) != len(replicas):
                    return ErrorCode.invalid_replica_assignment, f"replica assignment {list(replicas)} names unknown or repeated brokers", []
                if len(replicas) != len(replica_lists[0]):
                    return ErrorCode.invalid_replica_assignment, "every partition of the assignment must have as many replicas", []
        else:
            partitions = self.config.num_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
            replication = self.config.default_replication_factor if topic.replication_factor == -1 else int(topic.replication_factor)
            if partitions < 1 or partitions > MAX_PARTITIONS_PER_TOPIC:
                return ErrorCode.invalid_partitions, f"number of partitions must lie in 1-{MAX_PARTITIONS_PER_TOPIC}, got {partitions}", []
            if replication < 1 or replication > len(usable):
                return (ErrorCode.invalid_replication_factor,
                        f"replication factor {replication} is not within 1 and the {len(usable)} available brokers", [])
            replica_lists = assign_replicas(usable, partitions, replication, self.rng)
        topic_id = new_topic_id(self.rng)
        while topic_id in self.image.topics_by_id or topic_id == METADATA_TOPIC_ID:
            topic_id = new_topic_id(self.rng)
        records: list[MetadataRecord] = [TopicRecord(topic.name, str(topic_id), configs)]
        for index, replicas in enumerate(replica_lists):
            # An explicit assignment may name fenced brokers: they start outside the ISR
            # (unless none is usable: then the whole list, leaderless until one comes back).
            isr = tuple(b for b in replicas if b in usable) or replicas
            leader = next((b for b in replicas if b in usable), NO_LEADER)
            records.append(PartitionRecord(str(topic_id), index, replicas, isr, leader, 0, 0))
        return ErrorCode.none, None, records

    def _delete_topics(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        version = request.api_version
        result_cls = payload_class(ApiKey.DELETE_TOPICS, version, "DeletableTopicResult")
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.body.topics]
        else:
            wanted = [(name, None) for name in request.body.topic_names]
        results = []
        for name, topic_id in wanted:
            if name is not None:
                topic = self.image.topic(name)
            else:
                topic = self.image.topics_by_id.get(topic_id) if topic_id is not None and topic_id.int != 0 else None
            if topic is None:
                error = ErrorCode.unknown_topic_id if name is None else ErrorCode.unknown_topic_or_partition
            elif topic.is_internal:
                error = ErrorCode.topic_deletion_disabled
            else:
                self.commit([RemoveTopicRecord(str(topic.topic_id))])
                log.info("deleted topic %s (%s)", topic.name, topic.topic_id)
                error = ErrorCode.none
            results.append(build(result_cls, name=topic.name if topic else name, topic_id=topic.topic_id if topic else (topic_id or uuid.UUID(int=0)),
                                 error_code=error, error_message=None))
        self._answer(request, reply, build(response_class(ApiKey.DELETE_TOPICS, version), throttle_time=NO_THROTTLE, responses=tuple(results)))

    def _alter_configs(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        """AlterConfigs and IncrementalAlterConfigs: each resource is decided and committed on
        its own (Kafka answers per resource too)."""
        version = request.api_version
        incremental = request.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        result_cls = payload_class(request.api_key, version, "AlterConfigsResourceResponse")
        named = Counter((r.resource_type, r.resource_name) for r in request.body.resources)
        results = []
        for resource in request.body.resources:
            if named[(resource.resource_type, resource.resource_name)] > 1:
                error, message, record = ErrorCode.invalid_request, f"resource {resource.resource_name!r} is named more than once", None
            else:
                error, message, record = plan_alter_configs(self.image, resource, incremental)
            if record is not None and not request.body.validate_only:
                records: list[MetadataRecord] = [record, *self._min_isr_change_records(resource.resource_name, record.configs)]
                self.commit(records)
                log.info("topic %s configs are now %s", resource.resource_name, record.configs)
                self._log_partition_changes(records, f"topic {resource.resource_name} min.insync.replicas altered: ELR cleared")
            results.append(build(result_cls, error_code=error, error_message=message, resource_type=resource.resource_type,
                                 resource_name=resource.resource_name))
        self._answer(request, reply, build(response_class(request.api_key, version), throttle_time=NO_THROTTLE, responses=tuple(results)))

    def _min_isr_change_records(self, topic: str, new_configs: Mapping[str, str]) -> list[MetadataRecord]:
        """With eligible leader replicas, a topic whose effective min.insync.replicas changes has
        every ELR and last known leader emptied (elections.clear_elr; Kafka 4.1 writes a
        ClearElrRecord for the topic whenever the key is altered, even to the value it has:
        only a change of value can make an ELR member miss a committed record)."""
        image = self.image.topic(topic)
        if not self._elr_enabled or image is None:
            return []
        new_min_isr = new_configs.get("min.insync.replicas", str(self.config.min_insync_replicas))
        if str(self._min_isr(topic)) == str(new_min_isr).strip():
            return []
        return [r for _, p in sorted(image.partitions.items()) if (r := clear_elr(p)) is not None]

    def _create_partitions(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        version = request.api_version
        result_cls = payload_class(ApiKey.CREATE_PARTITIONS, version, "CreatePartitionsTopicResult")
        named = Counter(t.name for t in request.body.topics)
        results = []
        for topic in request.body.topics:
            if named[topic.name] > 1:
                error, message, records = ErrorCode.invalid_request, f"topic {topic.name!r} is named more than once in the request", []
            else:
                error, message, records = plan_create_partitions(self.image, topic, self.rng)
            if records and not request.body.validate_only:
                self.commit(list(records))
                log.info("topic %s: added partitions %s", topic.name, [(r.partition, list(r.replicas)) for r in records])
            results.append(build(result_cls, name=topic.name, error_code=error, error_message=message))
        self._answer(request, reply, build(response_class(ApiKey.CREATE_PARTITIONS, version), throttle_time=NO_THROTTLE, results=tuple(results)))

    def _elect_leaders(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        """ElectLeaders; a null topic list means every partition (Kafka's rule), each answered."""
        version = request.api_version
        election_type = getattr(request.body, "election_type", 0)  # v0 is preferred only
        topic_cls = payload_class(ApiKey.ELECT_LEADERS, version, "ReplicaElectionResult")
        partition_cls = payload_class(ApiKey.ELECT_LEADERS, version, "PartitionResult")
        if request.body.topic_partitions is None:
            wanted = [(t.name, tuple(sorted(t.partitions))) for t in self.image.topics_by_name.values()]
        else:
            wanted = [(t.topic, tuple(int(i) for i in t.partitions)) for t in request.body.topic_partitions]
        results = []
        for name, indices in wanted:
            partitions = []
            for index in indices:
                p = self.image.partition(name, index)
                if p is None:
                    error, message, record = ErrorCode.unknown_topic_or_partition, f"{name}-{index} does not exist", None
                else:
                    error, message, record = plan_election(p, election_type, self._usable)
                if record is not None:
                    self.commit([record])
                    self._log_partition_changes([record], f"election type {election_type} asked by a client")
                partitions.append(build(partition_cls, partition_id=index, error_code=error, error_message=message))
            results.append(build(topic_cls, topic=name, partition_result=tuple(partitions)))
        self._answer(request, reply, build(response_class(ApiKey.ELECT_LEADERS, version), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                                           replica_election_results=tuple(results)))

    # ---- metadata fetch --------------------------------------------------------------

    def _fetch(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        wanted = None
        for topic in body.topics:
            is_metadata = (request.api_version >= 13 and topic.topic_id == METADATA_TOPIC_ID) or (request.api_version < 13 and topic.topic == METADATA_TOPIC)
            if is_metadata:
                for p in topic.partitions:
                    if p.partition == 0:
                        wanted = p
        if wanted is None:
            reply(Response(None, close_connection=True, close_reason="the controller serves Fetch of __cluster_metadata-0 only"))
            return
        waiter = _MetadataWaiter(request, int(wanted.fetch_offset), int(wanted.partition_max_bytes), reply)
        max_wait_ms = min(body.max_wait.total_seconds() * 1000, self.config.fetch_max_wait_cap_ms)
        if not self._active or waiter.fetch_offset < self._committed_log_end() or max_wait_ms <= 0:
            self._answer_fetch(waiter)
            return
        self._waiters.append(waiter)

        def expire() -> None:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                self._answer_fetch(waiter)

        waiter.timer = self.scheduler.call_later(max_wait_ms, expire)

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.timer is not None:
                waiter.timer.cancel()
            self._answer_fetch(waiter)

    def _committed_log_end(self) -> int:
        """Where the committed metadata log ends (brokers read only below it)."""
        assert self.quorum is not None
        return self.quorum.state.high_watermark

    def _answer_fetch(self, waiter: _MetadataWaiter) -> None:
        request = waiter.request
        if not self._active:
            # Brokers read the metadata log from the active controller only (as KRaft's
            # observers fetch from the leader): name it, so they move there.
            state = self.quorum.state if self.quorum is not None else None
            leader = (state.leader_id, state.epoch) if state is not None and state.leader_id is not None else (-1, -1)
            result = FetchPartitionResult(0, ErrorCode.not_leader_or_follower.value, high_watermark=-1, last_stable_offset=-1,
                                          log_start_offset=-1, current_leader=leader)
            topic = FetchTopicResult(METADATA_TOPIC, METADATA_TOPIC_ID, [result])
            waiter.reply(Response(encode_fetch_response(request.api_version, request.correlation_id, [topic])))
            return
        end = self._committed_log_end()
        result = FetchPartitionResult(0, ErrorCode.none.value, high_watermark=end, last_stable_offset=end, log_start_offset=0)
        try:
            if waiter.fetch_offset > end or waiter.fetch_offset < 0:
                raise OffsetOutOfRangeError(waiter.fetch_offset, 0, end)
            if waiter.fetch_offset < end:
                assert self.quorum is not None
                result.records = self.quorum.read_committed(waiter.fetch_offset, max(waiter.max_bytes, 1))
        except OffsetOutOfRangeError as error:
            snapshot = self.quorum.latest_snapshot() if self.quorum is not None else None
            if snapshot is not None and 0 <= waiter.fetch_offset < error.log_start_offset and request.api_version >= 12:
                # Below the log start, which a snapshot moved: as KRaft's leader answers an
                # observer, name the snapshot (and this epoch, for its FetchSnapshot requests).
                state = self.quorum.state  # type: ignore[union-attr]
                body = quorum_rpc.fetch_response(request.api_version, ErrorCode.none, high_watermark=end,
                                                 log_start_offset=error.log_start_offset, leader=(self.config.node_id, state.epoch),
                                                 snapshot=snapshot)
                waiter.reply(Response([encode_response(ApiKey.FETCH, request.api_version, request.correlation_id, body)]))
                return
            result.error_code = ErrorCode.offset_out_of_range.value
            result.log_start_offset = error.log_start_offset
        topic = FetchTopicResult(METADATA_TOPIC, METADATA_TOPIC_ID, [result])
        waiter.reply(Response(encode_fetch_response(request.api_version, request.correlation_id, [topic])))
