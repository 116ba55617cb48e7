"""The broker core: turns decoded requests into responses for the partitions this broker
hosts, as the cluster metadata says, and coordinates the consumer groups whose
`__consumer_offsets` partitions it leads.

Sans-I/O: it is handed a Disk, a Clock, a Scheduler, an Rng and an Outbound (to reach the
controller and the other brokers), and answers each request through the `reply` callback
the runtime passes with it (synchronously for most APIs, later for long-poll Fetch, acks=all
Produce, requests forwarded to the controller, and JoinGroup/SyncGroup parked in a
rebalance). The runtime guarantees one request at a time per connection, as Kafka does.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.broker import admin_api, config_api, delete_records_api, fetch, group_api, produce, producers_api, topic_api, txn_admin_api, txn_api, txn_markers_api, txn_offset_api
from cluster.broker import clean_shutdown
from cluster.broker.controller_client import ControllerClient
from cluster.broker.env import ClientInfo, Clock, Endpoint, Outbound, Reply, Response, Rng, Scheduler, TimerHandle
from cluster.broker.fetch_sessions import FetchSessionCache
from cluster.broker.groups import Group, GroupCoordinator, OffsetToCommit
from cluster.broker.log_dir import LogDir, is_disk_failure
from cluster.broker.offsets_log import GroupRecord, GroupTombstone, OffsetRecord, decode_batch, group_batch, offset_commit_batch, partition_for_group, tombstone_batch
from cluster.broker.partition import Partition, TopicPartition
from cluster.broker.producer_ids import ProducerIdAllocator
from cluster.broker.replica_manager import ReplicaManager, RoleChanges
from cluster.broker.topics import INTERNAL_TOPICS, OFFSETS_TOPIC
from cluster.broker.txn.service import TxnService
from cluster.broker.txn_offsets import TxnOffsets
from cluster.config import BrokerConfig
from cluster.metadata.image import MetadataDelta, MetadataImage, TopicImage
from cluster.protocol.codec import Request, build, encode_response, payload_class, request_class, response_class
from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS
from cluster.storage.batch import parse_header
from cluster.storage.config import LogConfig
from cluster.storage.disk import Disk

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)
GROUP_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
                        ApiKey.OFFSET_DELETE})
# Kafka's offsets.commit.timeout.ms default: how long a commit waits for the ISR.
OFFSETS_COMMIT_TIMEOUT_MS = 5000
# __consumer_offsets bytes replayed per scheduler turn while loading a partition's groups.
LOAD_CHUNK_BYTES = 1 << 20


class ImageTopics:
    """The topics as this broker's metadata image has them (the registry the handlers read)."""

    def __init__(self, controller: ControllerClient) -> None:
        self._controller = controller

    def by_name(self, name: str | None) -> TopicImage | None:
        return self._controller.image.topic(name) if name is not None else None

    def by_id(self, topic_id: Any) -> TopicImage | None:
        return self._controller.image.topics_by_id.get(topic_id)

    def all(self) -> list[TopicImage]:
        return sorted(self._controller.image.topics_by_name.values(), key=lambda t: t.name)


class Broker:
    def __init__(self, config: BrokerConfig, disk: Disk, clock: Clock, scheduler: Scheduler, rng: Rng, outbound: Outbound,
                 controller: Endpoint | None = None) -> None:
        self.config = config
        self.disk = disk
        self.clock = clock
        self.scheduler = scheduler
        self.rng = rng
        self.outbound = outbound
        if controller is None:
            voter = config.controller_endpoint()
            if voter is None:
                raise ValueError("the broker needs a controller: set controller.quorum.voters (or run it in combined mode)")
            controller = Endpoint(*voter)
        voters = [Endpoint(*v) for v in config.controller_voters()]
        self.controller_client = ControllerClient(config, clock, scheduler, outbound, controller, self._on_metadata, rng, voters)
        # Every log and checkpoint file goes through the log directory, which fails for good
        # at the first disk error (log_dir.py); the broker then halts, as Kafka's does.
        self.log_dir = LogDir(disk, config.data_dir, self._on_log_dir_failure)
        # The runtime's way to end the process (Kafka's Exit.halt); None: the core only stops.
        self.on_halt: Callable[[str], None] | None = None
        self.halted: str | None = None  # why the broker halted, once it has
        # Metadata deltas held back until the broker has caught up with its registration (see
        # _on_metadata); None once applied.
        self._metadata_held: MetadataDelta | None = MetadataDelta()
        self.replicas = ReplicaManager(config, self.log_dir, clock, scheduler, outbound, self.controller_client, self._log_config_for_topic)
        self.replicas.on_txn_marker = self.on_txn_marker  # markers followers replicate
        self.topics = ImageTopics(self.controller_client)
        self.metadata_answers = topic_api.MetadataAnswers()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots, rng)  # KIP-227
        self.producer_ids = ProducerIdAllocator(self.controller_client)
        self.txn = TxnService(self)  # the transaction coordinator of the __transaction_state partitions it leads
        self.groups = GroupCoordinator(config, clock, scheduler, rng, self._persist_offsets, self._persist_group, self._persist_deletion)
        # Offsets committed in transactions, pending until their marker (TxnOffsetCommit).
        self.txn_offsets = TxnOffsets(self.groups)
        # Called with each transaction marker appended here (as leader or follower): see on_txn_marker.
        self.txn_marker_listeners: list[Callable[[TopicPartition, int, int, bool], None]] = [
            lambda tp, pid, epoch, committed: self.txn_offsets.on_marker(tp, pid, epoch, committed, self._coordinating.__contains__)
            if tp.topic == OFFSETS_TOPIC else None]
        # __consumer_offsets partitions whose groups this broker has loaded and coordinates,
        # and those it leads and is still loading (partition -> the leader epoch loading).
        self._coordinating: set[int] = set()
        self._loading: dict[int, int] = {}
        self._offsets_topic_requested = False
        # Topics being auto-created for Metadata requests, and the controller's last refusal
        # of one (reported to the next Metadata request for it).
        self.auto_creating: set[str] = set()
        self.auto_create_failures: dict[str, ErrorCode] = {}
        self._topic_waiters: list[Callable[[], bool]] = []
        self._timers: list[TimerHandle] = []
        self._running = False
        self._handlers: dict[int, Callable[[Request, ClientInfo, Reply], None]] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: lambda r, c, reply: topic_api.handle_metadata(self, r, reply),
            ApiKey.CREATE_TOPICS: lambda r, c, reply: topic_api.handle_create_topics(self, r, reply),
            ApiKey.DELETE_TOPICS: lambda r, c, reply: topic_api.handle_delete_topics(self, r, reply),
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.PRODUCE: lambda r, c, reply: produce.handle_produce(self, r, reply),
            ApiKey.FETCH: lambda r, c, reply: fetch.handle_fetch(self, r, reply),
            ApiKey.LIST_OFFSETS: lambda r, c, reply: fetch.handle_list_offsets(self, r, reply),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: lambda r, c, reply: fetch.handle_offset_for_leader_epoch(self, r, reply),
            ApiKey.JOIN_GROUP: lambda r, c, reply: group_api.handle_join_group(self, r, c, reply),
            ApiKey.SYNC_GROUP: lambda r, c, reply: group_api.handle_sync_group(self, r, reply),
            ApiKey.HEARTBEAT: lambda r, c, reply: group_api.handle_heartbeat(self, r, reply),
            ApiKey.LEAVE_GROUP: lambda r, c, reply: group_api.handle_leave_group(self, r, reply),
            ApiKey.OFFSET_COMMIT: lambda r, c, reply: group_api.handle_offset_commit(self, r, reply),
            ApiKey.OFFSET_FETCH: lambda r, c, reply: group_api.handle_offset_fetch(self, r, reply),
            ApiKey.DESCRIBE_GROUPS: lambda r, c, reply: group_api.handle_describe_groups(self, r, reply),
            ApiKey.LIST_GROUPS: lambda r, c, reply: group_api.handle_list_groups(self, r, reply),
            ApiKey.DELETE_GROUPS: lambda r, c, reply: group_api.handle_delete_groups(self, r, reply),
            ApiKey.OFFSET_DELETE: lambda r, c, reply: group_api.handle_offset_delete(self, r, reply),
            ApiKey.DESCRIBE_PRODUCERS: lambda r, c, reply: producers_api.handle_describe_producers(self, r, reply),
            ApiKey.DESCRIBE_CONFIGS: lambda r, c, reply: config_api.handle_describe_configs(self, r, reply),
            ApiKey.ALTER_CONFIGS: lambda r, c, reply: config_api.handle_alter_configs(self, r, reply),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda r, c, reply: config_api.handle_alter_configs(self, r, reply),
            ApiKey.CREATE_PARTITIONS: lambda r, c, reply: admin_api.handle_create_partitions(self, r, reply),
            ApiKey.ELECT_LEADERS: lambda r, c, reply: admin_api.handle_elect_leaders(self, r, reply),
            ApiKey.DELETE_RECORDS: lambda r, c, reply: delete_records_api.handle_delete_records(self, r, reply),
            ApiKey.ADD_PARTITIONS_TO_TXN: lambda r, c, reply: txn_api.handle_add_partitions_to_txn(self, r, reply),
            ApiKey.ADD_OFFSETS_TO_TXN: lambda r, c, reply: txn_api.handle_add_offsets_to_txn(self, r, reply),
            ApiKey.END_TXN: lambda r, c, reply: txn_api.handle_end_txn(self, r, reply),
            ApiKey.TXN_OFFSET_COMMIT: lambda r, c, reply: txn_offset_api.handle_txn_offset_commit(self, r, reply),
            ApiKey.DESCRIBE_TRANSACTIONS: lambda r, c, reply: txn_admin_api.handle_describe_transactions(self, r, reply),
            ApiKey.LIST_TRANSACTIONS: lambda r, c, reply: txn_admin_api.handle_list_transactions(self, r, reply),
            ApiKey.WRITE_TXN_MARKERS: lambda r, c, reply: txn_markers_api.handle_write_txn_markers(self, r, reply),
        }

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start replication and the controller session; partitions are opened (and
        recovered) as the metadata log names them."""
        self.disk.makedirs(self.config.data_dir)
        self.controller_client.previous_broker_epoch = clean_shutdown.take_previous_epoch(self.disk, self.config.data_dir)
        self.replicas.start()
        self.controller_client.start()
        self._running = True
        self._schedule_repeating(self.config.log_flush_scheduler_interval_ms, self._flush_due_logs)
        self._schedule_repeating(self.config.log_retention_check_interval_ms, self._apply_retention)
        self.txn.start(self._schedule_repeating)
        log.info("broker %d started (controller at %s)", self.config.broker_id, self.controller_client.controller)

    @property
    def ready(self) -> bool:
        """Registered, caught up with the metadata and unfenced: clients can use it."""
        return self.controller_client.registered and not self.controller_client.fenced

    def begin_controlled_shutdown(self, on_done: Callable[[], None]) -> None:
        self.controller_client.begin_controlled_shutdown(on_done)

    def shutdown(self) -> None:
        """Clean shutdown: stop timers, the controller session and replication; flush and
        close every log."""
        self._running = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self.controller_client.stop()
        self.replicas.shutdown()
        clean_shutdown.mark_clean(self.disk, self.config.data_dir, self.controller_client.broker_epoch)
        log.info("broker %d shut down cleanly", self.config.broker_id)

    def _on_log_dir_failure(self, reason: str) -> None:
        """The log directory failed (log_dir.py): take every partition offline now, as Kafka's
        ReplicaManager.handleLogDirFailure, and halt once the failed call has returned (its
        caller still answers KAFKA_STORAGE_ERROR), as LogManager does with no live directory."""
        offline = self.replicas.take_offline()
        log.error("broker %d: log directory %s failed (%s): %d partitions offline; halting", self.config.broker_id,
                  self.config.data_dir, reason, len(offline))
        self.scheduler.call_later(0, lambda: self._halt(reason))

    def _halt(self, reason: str) -> None:
        """Stop at once: no flush, no controlled shutdown (the controller fences the broker
        when its heartbeats stop and moves its leaderships), then end the process."""
        if self.halted is not None:
            return
        self.halted = reason
        self._running = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self.controller_client.stop()
        self.replicas.shutdown()  # stops the fetchers; writes nothing to the failed directory
        log.error("broker %d halted: all log directories have failed (%s)", self.config.broker_id, reason)
        if self.on_halt is not None:
            self.on_halt(reason)

    def _schedule_repeating(self, interval_ms: int, action: Callable[[], None]) -> None:
        def tick() -> None:
            if not self._running:
                return
            try:
                action()
            finally:
                self._timers.remove(handle[0])
                handle[0] = self.scheduler.call_later(interval_ms, tick)
                self._timers.append(handle[0])

        handle = [self.scheduler.call_later(interval_ms, tick)]
        self._timers.append(handle[0])

    def _flush_due_logs(self) -> None:
        now_ms = self.clock.wall_ms()
        for partition in self.partitions.values():
            try:
                partition.log.maybe_flush(now_ms=now_ms)
            except OSError as error:
                if not is_disk_failure(error):
                    raise
                return  # the log directory failed and is going offline

    def _apply_retention(self) -> None:
        now_ms = self.clock.wall_ms()
        for partition in self.partitions.values():
            # The internal topics are compacted in Kafka, never deleted by age or size; we do
            # not compact, so they keep everything (a transactional id's last state may be old).
            if partition.tp.topic not in INTERNAL_TOPICS:
                start = partition.log_start_offset
                try:
                    partition.log.apply_retention(now_ms=now_ms, max_offset=partition.high_watermark)
                except OSError as error:
                    if not is_disk_failure(error):
                        raise
                    return  # the log directory failed and is going offline
                if partition.log_start_offset != start:
                    partition.wake_fetchers()  # fetch sessions carry the new log start to the followers

    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        return self.replicas.partitions

    def _log_config_for_topic(self, topic: str) -> LogConfig:
        image = self.topics.by_name(topic)
        return LogConfig.from_properties({**self.config.properties, **(image.configs if image else {})})

    def log_config_for(self, info: TopicImage) -> LogConfig:
        return LogConfig.from_properties({**self.config.properties, **info.configs})

    # ---- metadata ----------------------------------------------------------------------

    def _on_metadata(self, image: MetadataImage, delta: MetadataDelta) -> None:
        if self._metadata_held is not None:
            # Partition states wait until the log is replayed up to our registration, as
            # Kafka's broker publishes metadata only after its initial catch-up: a broker
            # restarted before the controller noticed its crash would otherwise act on its
            # old incarnation's leaderships (with a log recovery may have cut short, so its
            # followers would truncate acknowledged records to match it). The registration
            # fenced the old incarnation and moved those leaderships first.
            self._metadata_held.merge(delta)
            if not (self.controller_client.registered and self.controller_client.last_applied_offset >= self.controller_client.broker_epoch):
                if self._topic_waiters:
                    self._topic_waiters = [w for w in self._topic_waiters if not w()]
                return
            delta, self._metadata_held = self._metadata_held, None
        changes = self.replicas.apply_metadata(image, delta)
        for topic in delta.removed_topics:
            self.groups.forget_topic(topic.name)
        self._on_offsets_leadership(changes)
        self.txn.on_leadership(changes)
        if self._topic_waiters:
            self._topic_waiters = [w for w in self._topic_waiters if not w()]

    def on_txn_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, committed: bool) -> None:
        """A transaction marker was appended to `tp` (the log side calls this on leaders at
        append time and on followers when they replicate it)."""
        for listener in self.txn_marker_listeners:
            listener(tp, producer_id, producer_epoch, committed)

    def when_metadata(self, check: Callable[[], bool]) -> None:
        """Run `check` after each metadata update until it returns True (now included)."""
        if not check():
            self._topic_waiters.append(check)

    # ---- dispatch ------------------------------------------------------------------------

    def handle(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        """Serve one decoded request; `reply` is called exactly once (now or later)."""
        handler = self._handlers.get(request.api_key)
        if handler is None:
            reply(Response(None, close_connection=True, close_reason=f"no handler for API key {request.api_key}"))
            return
        # OffsetFetch v8+ names several groups and is answered per group by its handler.
        if request.api_key in GROUP_APIS and not (request.api_key == ApiKey.OFFSET_FETCH and request.api_version >= 8):
            refused = self.group_error(request.body.group_id)
            if refused is not ErrorCode.none:
                self.group_error_response(request, refused, reply)
                return
        with self.replicas.wakeups:  # parked fetches this request wakes are answered after it
            handler(request, client, reply)

    def respond(self, request: Request, body: Any) -> Response:
        return Response([encode_response(request.api_key, request.api_version, request.correlation_id, body)])

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.replicas.partition(TopicPartition(topic, index))

    # ---- ApiVersions, Metadata -----------------------------------------------------------

    def _api_versions(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        version = request.api_version
        entry = payload_class(ApiKey.API_VERSIONS, version, "ApiVersion")
        body = build(
            response_class(ApiKey.API_VERSIONS, version),
            error_code=ErrorCode.none,
            api_keys=tuple(entry(api_key=int(k), min_version=r.min_version, max_version=r.max_version) for k, r in sorted(SUPPORTED_VERSIONS.items())),
            throttle_time=NO_THROTTLE,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )
        reply(self.respond(request, body))

    # ---- producers ----------------------------------------------------------------------

    def _init_producer_id(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        cls = response_class(ApiKey.INIT_PRODUCER_ID, request.api_version)
        if body.transactional_id is not None:
            txn_api.handle_init_producer_id(self, request, reply)
            return

        def answer(new_id: int, new_epoch: int, error: ErrorCode = ErrorCode.none) -> None:
            reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=error, producer_id=new_id, producer_epoch=new_epoch)))

        # Without a transactional id Kafka's coordinator ignores the producer id and epoch a
        # client sends (KIP-360's bump is for transactional ids) and always hands out a fresh
        # id at epoch 0; bumping the old id's epoch here would let two producers that both
        # recovered from the same id share it.
        def allocated(new_id: int | None, error: str | None) -> None:
            if new_id is None:
                log.info("InitProducerId: no producer id from the controller (%s)", error)
                answer(-1, -1, ErrorCode.coordinator_not_available)
            else:
                answer(new_id, 0)

        if not self.controller_client.registered:
            answer(-1, -1, ErrorCode.coordinator_not_available)
            return
        self.producer_ids.allocate(allocated)

    # ---- groups: coordinator lookup and persistence ----------------------------------------

    def _find_coordinator(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        version = request.api_version
        cls = response_class(ApiKey.FIND_COORDINATOR, version)
        keys = list(body.coordinator_keys) if version >= 4 else [body.key]
        key_type = getattr(body, "key_type", 0)
        message = None
        if key_type == 1:  # a transactional id
            found = [(key, *self.txn.find_coordinator(key)) for key in keys]
        elif key_type == 0:
            found = [(key, *self._coordinator_for(key)) for key in keys]
        else:
            message = f"unknown coordinator key type {key_type}"
            found = [(key, ErrorCode.invalid_request, -1, "", -1) for key in keys]
        if version >= 4:
            coordinator_cls = payload_class(ApiKey.FIND_COORDINATOR, version, "Coordinator")
            coordinators = tuple(build(coordinator_cls, key=key, node_id=node, host=host, port=port, error_code=error, error_message=message)
                                 for key, error, node, host, port in found)
            reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, coordinators=coordinators)))
            return
        _, error, node, host, port = found[0]
        reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message, node_id=node, host=host,
                                          port=port)))

    def _coordinator_for(self, group_id: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the group's coordinator: the leader of its
        __consumer_offsets partition. The first lookup creates the topic."""
        offsets = self.topics.by_name(OFFSETS_TOPIC)
        if offsets is None:
            self._request_offsets_topic()
            return ErrorCode.coordinator_not_available, -1, "", -1
        state = offsets.partitions.get(partition_for_group(group_id, offsets.num_partitions))
        leader = self.controller_client.image.brokers.get(state.leader) if state is not None and state.has_leader else None
        if leader is None or not leader.usable:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return ErrorCode.none, leader.broker_id, leader.host, leader.port

    def _request_offsets_topic(self) -> None:
        if self._offsets_topic_requested or not self.controller_client.registered:
            return
        self._offsets_topic_requested = True
        version = 5
        topic_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopic", EntityType.request)
        body = build(request_class(ApiKey.CREATE_TOPICS, version), topics=(topic_cls(
            name=OFFSETS_TOPIC, num_partitions=self.config.offsets_topic_num_partitions,
            replication_factor=self.config.offsets_topic_replication_factor, assignments=(),
            configs=(),),), timeout=datetime.timedelta(seconds=10), validate_only=False)

        def done(result: Any) -> None:
            if not result.ok or result.body.topics[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                reason = result.error if not result.ok else f"{result.body.topics[0].error_code.name}: {result.body.topics[0].error_message}"
                log.warning("cannot create %s yet (%s); will ask again", OFFSETS_TOPIC, reason)
                self._offsets_topic_requested = False
        # Topics being auto-created for Metadata requests, and the controller's last refusal
        # of one (reported to the next Metadata request for it).
        self.auto_creating: set[str] = set()
        self.auto_create_failures: dict[str, ErrorCode] = {}

        self.controller_client.create_topics(body, version, done)

    # ---- groups: coordination per __consumer_offsets partition ---------------------------

    def group_error(self, group_id: str) -> ErrorCode:
        """none when this broker coordinates `group_id` now; COORDINATOR_LOAD_IN_PROGRESS while
        it loads the group's partition; NOT_COORDINATOR otherwise (the client looks again)."""
        offsets = self.topics.by_name(OFFSETS_TOPIC)
        if offsets is None or offsets.num_partitions == 0:
            return ErrorCode.not_coordinator
        index = partition_for_group(group_id, offsets.num_partitions)
        if index in self._loading:
            return ErrorCode.coordinator_load_in_progress
        partition = self.partition(OFFSETS_TOPIC, index)
        if index in self._coordinating and partition is not None and partition.is_leader:
            return ErrorCode.none
        return ErrorCode.not_coordinator

    def coordinates(self, group_id: str) -> bool:
        return self.group_error(group_id) is ErrorCode.none

    def _offsets_tp(self, group_id: str) -> TopicPartition:
        offsets = self.topics.by_name(OFFSETS_TOPIC)
        assert offsets is not None, f"{OFFSETS_TOPIC} does not exist"
        return TopicPartition(OFFSETS_TOPIC, partition_for_group(group_id, offsets.num_partitions))

    def _persist_offsets(self, group_id: str, offsets: list[OffsetToCommit], now_ms: int, done: Callable[[ErrorCode], None]) -> None:
        self._append_group_records(group_id, lambda base, epoch: offset_commit_batch(group_id, offsets, now_ms, base, epoch), now_ms,
                                   lambda error: done(offset_commit_error(error)))

    def _persist_group(self, group: Group, done: Callable[[ErrorCode], None]) -> None:
        now_ms = self.clock.wall_ms()
        self._append_group_records(
            group.group_id,
            lambda base, epoch: group_batch(group.group_id, group.generation_id, group.protocol_type, group.protocol_name, group.leader_id,
                                            self.groups.stored_members(group), now_ms, base, epoch),
            now_ms, lambda error: done(group_store_error(error)))

    def _persist_deletion(self, group_id: str, partitions: list[tuple[str, int]], delete_group: bool, done: Callable[[ErrorCode], None]) -> None:
        now_ms = self.clock.wall_ms()
        self._append_group_records(group_id, lambda base, epoch: tombstone_batch(group_id, partitions, delete_group, now_ms, base, epoch), now_ms,
                                   lambda error: done(offset_commit_error(error)))

    def _append_group_records(self, group_id: str, build_batch: Callable[[int, int], bytes], now_ms: int,
                              done: Callable[[ErrorCode], None]) -> None:
        """Append as the offsets partition's leader with acks=-1 semantics: `done` once the
        ISR has the records (a commit acknowledged then survives the coordinator's loss)."""
        try:
            self.replicas.append_internal(self._offsets_tp(group_id), build_batch, now_ms, done, OFFSETS_COMMIT_TIMEOUT_MS)
        except OSError as error:
            log.error("appending group records of %s failed: %s", group_id, error)
            done(ErrorCode.kafka_storage_error)

    def _on_offsets_leadership(self, changes: RoleChanges) -> None:
        for tp in changes.became_follower + changes.removed:
            if tp.topic == OFFSETS_TOPIC:
                self._unload_groups(tp.partition)
        for tp in changes.became_leader:
            if tp.topic == OFFSETS_TOPIC:
                self._unload_groups(tp.partition)  # a stale load of an earlier leadership
                self._begin_loading(tp.partition)

    def _begin_loading(self, index: int) -> None:
        """This broker now leads __consumer_offsets-`index`: replay its log (a new leader holds
        every committed record) into the coordinator, a chunk per scheduler turn, answering
        COORDINATOR_LOAD_IN_PROGRESS for its groups meanwhile."""
        partition = self.partition(OFFSETS_TOPIC, index)
        if partition is None:
            return
        epoch = partition.leader_epoch
        self._loading[index] = epoch
        self.txn_offsets.unload(index)  # rebuilt from the log
        tp = partition.tp
        position = [partition.log_start_offset]
        loaded = [0]
        log.info("%s: leader in epoch %d: loading its groups (log %d-%d)", tp, epoch, partition.log_start_offset, partition.log_end_offset)

        def step() -> None:
            if not self._running or self._loading.get(index) != epoch:
                return  # stopped, or leadership changed while loading
            current = self.partition(OFFSETS_TOPIC, index)
            if current is None or not current.is_leader or current.leader_epoch != epoch:
                self._loading.pop(index, None)
                return
            end = current.log_end_offset
            batches = current.read_for_replica(position[0], LOAD_CHUNK_BYTES) if position[0] < end else []
            for batch in batches:
                header = parse_header(batch)
                if header.is_transactional or header.is_control:  # a TxnOffsetCommit or its marker
                    self.txn_offsets.replay(index, header, batch, str(tp), lambda topic: self.topics.by_name(topic) is not None)
                    position[0] = header.next_offset
                    continue
                for record in decode_batch(batch, str(tp)):
                    loaded[0] += 1
                    if isinstance(record, OffsetRecord):
                        if self.topics.by_name(record.topic) is not None:
                            self.groups.restore_offset(record.group_id, record.topic, record.partition, record.committed)
                    elif isinstance(record, GroupRecord):
                        self.groups.restore_group(record.group_id, record.generation_id, record.protocol_type, record.protocol_name,
                                                  record.leader_id, record.members)
                    elif isinstance(record, GroupTombstone):
                        self.groups.restore_deletion(record.group_id)
                position[0] = parse_header(batch).next_offset
            if batches and position[0] < end:
                self.scheduler.call_later(0, step)
                return
            del self._loading[index]
            self._coordinating.add(index)
            log.info("%s: coordinating its groups (epoch %d): loaded %d records", tp, epoch, loaded[0])

        self.scheduler.call_later(0, step)

    def _unload_groups(self, index: int) -> None:
        was_loading = self._loading.pop(index, None) is not None
        if index not in self._coordinating and not was_loading:
            return
        self._coordinating.discard(index)
        self.txn_offsets.unload(index)
        offsets = self.topics.by_name(OFFSETS_TOPIC)
        count = offsets.num_partitions if offsets is not None else 0
        gone = [g for g in self.groups.groups if count == 0 or partition_for_group(g, count) == index]
        self.groups.unload(gone)
        log.info("%s-%d: no longer coordinating its groups: unloaded %d", OFFSETS_TOPIC, index, len(gone))

    def group_error_response(self, request: Request, error: ErrorCode, reply: Reply) -> None:
        """Answer a group request with a coordinator error (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS) in the shape of its API and version."""
        version = request.api_version
        cls = response_class(request.api_key, version)
        body = request.body
        if request.api_key == ApiKey.OFFSET_COMMIT:
            topic_cls = payload_class(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponseTopic")
            partition_cls = payload_class(ApiKey.OFFSET_COMMIT, version, "OffsetCommitResponsePartition")
            topics = tuple(build(topic_cls, name=t.name, partitions=tuple(build(partition_cls, partition_index=p.partition_index, error_code=error)
                                                                          for p in t.partitions)) for t in body.topics)
            response = build(cls, throttle_time=NO_THROTTLE, topics=topics)
        else:
            response = build(cls, throttle_time=NO_THROTTLE, error_code=error, generation_id=-1, protocol_type=None,
                             protocol_name=None if version >= 7 else "", leader="", skip_assignment=False, member_id="", members=(),
                             assignment=b"", topics=())
        reply(self.respond(request, response))


def offset_commit_error(error: ErrorCode) -> ErrorCode:
    """What a client is told when appending its offset commit failed (Kafka's
    GroupMetadataManager.storeOffsets mapping): retriable coordinator errors, so the client
    looks the coordinator up again and retries."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                 ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return error


def group_store_error(error: ErrorCode) -> ErrorCode:
    """The same mapping for the group record written at SyncGroup (GroupMetadataManager.storeGroup)."""
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return offset_commit_error(error)
