"""The transaction coordinator inside a broker: creates `__transaction_state` on first use,
writes transitions to its partitions as their leader (acks=all, min ISR from
transaction.state.log.min.isr), loads a partition when this broker becomes its leader
(COORDINATOR_LOAD_IN_PROGRESS meanwhile) and unloads it when it stops leading, finds the
coordinator of a transactional id, and runs the timeout and expiration timers."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.broker.partition import TopicPartition
from cluster.broker.replica_manager import RoleChanges
from cluster.broker.topics import TRANSACTION_STATE_TOPIC
from cluster.broker.txn.coordinator import TransactionCoordinator, TxnSettings
from cluster.broker.txn.markers import MarkerSender
from cluster.broker.txn.state_log import decode_batch, partition_for_transactional_id
from cluster.broker.txn.verifier import PartitionVerifier
from cluster.protocol.codec import build, payload_class, request_class
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import parse_header

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
# Kafka's transaction state log appends wait for the ISR this long (its request timeout).
STATE_LOG_APPEND_TIMEOUT_MS = 5000
LOAD_CHUNK_BYTES = 1 << 20


class TxnService:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        config = broker.config
        self.markers = MarkerSender(broker.outbound, broker.scheduler, lambda: broker.controller_client.image)
        self.coordinator = TransactionCoordinator(
            TxnSettings(config.transaction_max_timeout_ms, config.transactional_id_expiration_ms,
                        config.transaction_add_partitions_wait_max_ms), broker.clock, broker.scheduler, self,
            broker.producer_ids,
            self.markers, self.num_partitions)
        # KIP-890 part 1: the produce path asks coordinators through this before a
        # producer's first transactional append to a partition.
        self.verifier = PartitionVerifier(broker.outbound, lambda: broker.controller_client.image)
        self._topic_requested = False

    def start(self, schedule_repeating: Callable[[int, Callable[[], None]], None]) -> None:
        """Start the timers (through the broker's, which stop at shutdown)."""
        config = self._broker.config
        schedule_repeating(config.transaction_abort_timed_out_transaction_cleanup_interval_ms, self._abort_timed_out)
        schedule_repeating(config.transaction_remove_expired_transaction_cleanup_interval_ms, self._expire_ids)

    def _abort_timed_out(self) -> None:
        self.coordinator.abort_timed_out()

    def _expire_ids(self) -> None:
        self.coordinator.expire_ids()

    def num_partitions(self) -> int:
        topic = self._broker.topics.by_name(TRANSACTION_STATE_TOPIC)
        return topic.num_partitions if topic is not None and topic.num_partitions > 0 else self._broker.config.transaction_state_log_num_partitions

    # ---- the state log ---------------------------------------------------------------------

    def append(self, index: int, coordinator_epoch: int, build_batch: Callable[[int, int], bytes], done: Callable[[ErrorCode], None]) -> None:
        partition = self._broker.partition(TRANSACTION_STATE_TOPIC, index)
        if partition is None or not partition.is_leader or partition.leader_epoch != coordinator_epoch:
            done(ErrorCode.not_leader_or_follower)
            return
        if partition.isr_below_min():
            done(ErrorCode.not_enough_replicas)
            return
        try:
            self._broker.replicas.append_internal(partition.tp, build_batch, self._broker.clock.wall_ms(), done, STATE_LOG_APPEND_TIMEOUT_MS)
        except OSError as error:
            log.error("appending to %s failed: %s", partition.tp, error)
            done(ErrorCode.kafka_storage_error)

    # ---- FindCoordinator key type 1 --------------------------------------------------------

    def find_coordinator(self, transactional_id: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port): the leader of the id's __transaction_state partition.
        The first lookup creates the topic."""
        topic = self._broker.topics.by_name(TRANSACTION_STATE_TOPIC)
        if topic is None:
            self._request_topic()
            return ErrorCode.coordinator_not_available, -1, "", -1
        state = topic.partitions.get(partition_for_transactional_id(transactional_id, topic.num_partitions))
        image = self._broker.controller_client.image
        leader = image.brokers.get(state.leader) if state is not None and state.has_leader else None
        if leader is None or not leader.usable:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return ErrorCode.none, leader.broker_id, leader.host, leader.port

    def _request_topic(self) -> None:
        broker = self._broker
        if self._topic_requested or not broker.controller_client.registered:
            return
        self._topic_requested = True
        version = 5
        config = broker.config
        topic_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopic", EntityType.request)
        config_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicConfig", EntityType.request)
        # Kafka's transaction log topic: compacted, its min ISR from transaction.state.log.min.isr.
        configs = (config_cls(name="min.insync.replicas", value=str(config.transaction_state_log_min_isr)),
                   config_cls(name="cleanup.policy", value="compact"))
        body = build(request_class(ApiKey.CREATE_TOPICS, version), topics=(topic_cls(
            name=TRANSACTION_STATE_TOPIC, num_partitions=config.transaction_state_log_num_partitions,
            replication_factor=config.transaction_state_log_replication_factor, assignments=(), configs=configs),),
            timeout=datetime.timedelta(seconds=10), validate_only=False)

        def done(result: Any) -> None:
            if not result.ok or result.body.topics[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                reason = result.error if not result.ok else f"{result.body.topics[0].error_code.name}: {result.body.topics[0].error_message}"
                log.warning("cannot create %s yet (%s); will ask again", TRANSACTION_STATE_TOPIC, reason)
                self._topic_requested = False

        broker.controller_client.create_topics(body, version, done)

    # ---- leadership: loading and unloading ---------------------------------------------------

    def on_leadership(self, changes: RoleChanges) -> None:
        for tp in changes.became_follower + changes.removed:
            if tp.topic == TRANSACTION_STATE_TOPIC:
                self.coordinator.unload(tp.partition)
        for tp in changes.became_leader:
            if tp.topic == TRANSACTION_STATE_TOPIC:
                self._load(tp)

    def _load(self, tp: TopicPartition) -> None:
        """Replay the partition (a new leader holds every committed record), a chunk per
        scheduler turn, then coordinate its ids and resume their prepared transactions."""
        broker = self._broker
        partition = broker.partition(tp.topic, tp.partition)
        if partition is None:
            return
        epoch = partition.leader_epoch
        self.coordinator.begin_loading(tp.partition, epoch)
        position = [partition.log_start_offset]
        log.info("%s: leader in epoch %d: loading its transactions (log %d-%d)", tp, epoch, partition.log_start_offset,
                 partition.log_end_offset)

        def step() -> None:
            current = broker.partition(tp.topic, tp.partition)
            if current is None or not current.is_leader or current.leader_epoch != epoch:
                return  # leadership moved on: on_leadership unloads
            end = current.log_end_offset
            batches = current.read_for_replica(position[0], LOAD_CHUNK_BYTES) if position[0] < end else []
            for batch in batches:
                self.coordinator.load(tp.partition, epoch, decode_batch(batch, str(tp)))
                position[0] = parse_header(batch).next_offset
            if batches and position[0] < end:
                broker.scheduler.call_later(0, step)
                return
            self.coordinator.finish_loading(tp.partition, epoch)

        broker.scheduler.call_later(0, step)
