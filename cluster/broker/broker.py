"""The broker core: owns topics, partitions, producer ids and the group coordinator, and
turns decoded requests into responses.

Sans-I/O: it is handed a Disk, a Clock, a Scheduler and an Rng, and answers each request
through the `reply` callback the runtime passes with it (synchronously for most APIs, later
for long-poll Fetch and for JoinGroup/SyncGroup parked in a rebalance). The runtime
guarantees one request at a time per connection, as Kafka does.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker import fetch, group_api, produce, topic_api
from cluster.broker.env import ClientInfo, Clock, Reply, Response, Rng, Scheduler, TimerHandle
from cluster.broker.groups import Group, GroupCoordinator, OffsetToCommit
from cluster.broker.offsets_log import GroupRecord, OffsetRecord, decode_batch, group_batch, offset_commit_batch, partition_for_group
from cluster.broker.partition import Partition, TopicPartition
from cluster.broker.producer_ids import ProducerIdAllocator
from cluster.broker.topics import OFFSETS_TOPIC, TopicInfo, TopicRegistry
from cluster.config import BrokerConfig
from cluster.protocol.codec import Request, build, encode_response, payload_class, response_class
from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS
from cluster.storage.batch import parse_header
from cluster.storage.config import LogConfig
from cluster.storage.disk import Disk
from cluster.storage.log import PartitionLog

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)


class Broker:
    def __init__(self, config: BrokerConfig, disk: Disk, clock: Clock, scheduler: Scheduler, rng: Rng) -> None:
        self.config = config
        self.disk = disk
        self.clock = clock
        self.scheduler = scheduler
        self.rng = rng
        self.topics = TopicRegistry(disk, config.data_dir)
        self.partitions: dict[TopicPartition, Partition] = {}
        # Internal-topic partitions never written yet: opened on first use, so that a start
        # (and every restart in a fault run) does not pay for dozens of empty logs.
        self._unopened: set[TopicPartition] = set()
        self.producer_ids = ProducerIdAllocator(disk, config.data_dir, config.producer_id_block_size)
        self.groups = GroupCoordinator(config, clock, scheduler, rng, self._persist_offsets, self._persist_group)
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
        }

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Load metadata, open and recover every log, replay group state, start timers."""
        self.disk.makedirs(self.config.data_dir)
        self.topics.load()
        self.producer_ids.load()
        # This broker is (re)elected leader of everything it hosts: a new epoch each start.
        self.topics.bump_all_epochs()
        if self.topics.by_name(OFFSETS_TOPIC) is None:
            self.topics.create(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, {}, self.rng)
        for info in self.topics.all():
            self._open_partitions(info)
        self._replay_group_state()
        self._running = True
        self._schedule_repeating(self.config.log_flush_scheduler_interval_ms, self._flush_due_logs)
        self._schedule_repeating(self.config.log_retention_check_interval_ms, self._apply_retention)
        log.info("broker %d started with %d topics, %d partitions", self.config.broker_id, len(self.topics.all()), len(self.partitions) + len(self._unopened))

    def shutdown(self) -> None:
        """Clean shutdown: stop timers, flush and close every log."""
        self._running = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for partition in self.partitions.values():
            partition.log.close()
        log.info("broker %d shut down cleanly", self.config.broker_id)

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
            partition.log.maybe_flush(now_ms=now_ms)

    def _apply_retention(self) -> None:
        now_ms = self.clock.wall_ms()
        for partition in self.partitions.values():
            if partition.tp.topic != OFFSETS_TOPIC:
                partition.log.apply_retention(now_ms=now_ms, max_offset=partition.high_watermark)

    def log_config_for(self, info: TopicInfo) -> LogConfig:
        return LogConfig.from_properties({**self.config.properties, **info.configs})

    def _partition_dir(self, tp: TopicPartition) -> str:
        return f"{self.config.data_dir}/{tp.topic}-{tp.partition}"

    def _open_partitions(self, info: TopicInfo) -> None:
        for index in range(info.num_partitions):
            tp = TopicPartition(info.name, index)
            if info.is_internal and not self.disk.exists(self._partition_dir(tp)):
                self._unopened.add(tp)
            else:
                self._open_partition(info, tp)

    def _open_partition(self, info: TopicInfo, tp: TopicPartition) -> Partition:
        partition_log = PartitionLog.open(self.disk, self._partition_dir(tp), self.log_config_for(info), now_ms=self.clock.wall_ms())
        partition = self.partitions[tp] = Partition(tp, partition_log, info.leader_epochs[tp.partition], self.config.broker_id)
        return partition

    # ---- dispatch ------------------------------------------------------------------------

    def handle(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        """Serve one decoded request; `reply` is called exactly once (now or later)."""
        handler = self._handlers.get(request.api_key)
        if handler is None:
            reply(Response(None, close_connection=True, close_reason=f"no handler for API key {request.api_key}"))
            return
        handler(request, client, reply)

    def respond(self, request: Request, body: Any) -> Response:
        return Response([encode_response(request.api_key, request.api_version, request.correlation_id, body)])

    def partition(self, topic: str, index: int) -> Partition | None:
        tp = TopicPartition(topic, index)
        partition = self.partitions.get(tp)
        if partition is None and tp in self._unopened:
            self._unopened.discard(tp)
            partition = self._open_partition(self.topics.by_name(topic), tp)  # type: ignore[arg-type]
        return partition

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

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicInfo:
        info = self.topics.create(name, num_partitions, configs, self.rng)
        self._open_partitions(info)
        log.info("created topic %s (%s) with %d partitions", name, info.topic_id, num_partitions)
        return info

    def delete_topic(self, info: TopicInfo) -> None:
        self.topics.delete(info.name)
        for index in range(info.num_partitions):
            tp = TopicPartition(info.name, index)
            partition = self.partitions.pop(tp)
            partition.log.close()
            partition.wake_fetchers()
            self.disk.rmtree(self._partition_dir(tp))
        self.groups.forget_topic(info.name)
        log.info("deleted topic %s", info.name)

    # ---- producers ----------------------------------------------------------------------

    def _init_producer_id(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        cls = response_class(ApiKey.INIT_PRODUCER_ID, request.api_version)
        if body.transactional_id is not None:
            log.warning("InitProducerId for transactional id %r refused: transactions are not supported yet", body.transactional_id)
            reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, producer_id=-1, producer_epoch=-1)))
            return
        producer_id = getattr(body, "producer_id", -1)
        producer_epoch = getattr(body, "producer_epoch", -1)
        if producer_id >= 0 and 0 <= producer_epoch < 32766:
            # KIP-360: an idempotent producer recovering from an unknown outcome bumps its
            # epoch and restarts its sequences at 0.
            new_id, new_epoch = producer_id, producer_epoch + 1
        else:
            new_id, new_epoch = self.producer_ids.allocate(), 0
        reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=new_id, producer_epoch=new_epoch)))

    # ---- groups: coordinator lookup and persistence ----------------------------------------

    def _find_coordinator(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        body = request.body
        cls = response_class(ApiKey.FIND_COORDINATOR, request.api_version)
        if getattr(body, "key_type", 0) != 0:
            reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_not_available,
                                              error_message="transactions are not supported yet", node_id=-1, host="", port=-1)))
            return
        reply(self.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                                          node_id=self.config.broker_id, host=self.config.host, port=self.config.port)))

    def offsets_partition_for(self, group_id: str) -> Partition:
        index = partition_for_group(group_id, self.topics.by_name(OFFSETS_TOPIC).num_partitions)  # type: ignore[union-attr]
        partition = self.partition(OFFSETS_TOPIC, index)
        assert partition is not None, f"{OFFSETS_TOPIC}-{index} is missing"
        return partition

    def _persist_offsets(self, group_id: str, offsets: list[OffsetToCommit], now_ms: int) -> None:
        self.offsets_partition_for(group_id).append_internal(
            lambda base, epoch: offset_commit_batch(group_id, offsets, now_ms, base, epoch), now_ms
        )

    def _persist_group(self, group: Group) -> None:
        now_ms = self.clock.wall_ms()
        self.offsets_partition_for(group.group_id).append_internal(
            lambda base, epoch: group_batch(group.group_id, group.generation_id, group.protocol_type, group.protocol_name, now_ms, base, epoch),
            now_ms,
        )

    def _replay_group_state(self) -> None:
        for tp, partition in sorted(self.partitions.items(), key=lambda item: (item[0].topic, item[0].partition)):
            if tp.topic != OFFSETS_TOPIC:
                continue
            position = partition.log_start_offset
            while position < partition.high_watermark:
                batches = partition.read(position, 1 << 20)
                if not batches:
                    break
                for batch in batches:
                    for record in decode_batch(batch, str(tp)):
                        if isinstance(record, OffsetRecord):
                            if self.topics.by_name(record.topic) is not None:
                                self.groups.restore_offset(record.group_id, record.topic, record.partition, record.committed)
                        elif isinstance(record, GroupRecord):
                            self.groups.restore_group(record.group_id, record.generation_id, record.protocol_type, record.protocol_name)
                    position = parse_header(batch).next_offset
