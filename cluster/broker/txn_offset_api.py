"""TxnOffsetCommit (v0-3), the group coordinator's side of a transaction: the offsets are
written to the group's __consumer_offsets partition as a transactional batch of the
producer and held pending (cluster.broker.txn_offsets) until the transaction's marker
commits or drops them. From v3 a consumer's member id and generation are checked (KIP-447).
With transaction.partition.verification.enable (KIP-890 part 1) a batch that would open the
producer's transaction on the offsets partition is verified with the transaction coordinator
first and appended under the verification guard, as a transactional Produce is."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.broker.groups import OffsetToCommit
from cluster.broker.offsets_log import offset_commit_batch, partition_for_group
from cluster.broker.partition import Partition, TopicPartition
from cluster.broker.producer_state import VerificationGuard
from cluster.broker.topics import OFFSETS_TOPIC
from cluster.broker.txn_api import version_error
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)
# Kafka's offsets.commit.timeout.ms default: how long a commit waits for the ISR.
OFFSETS_COMMIT_TIMEOUT_MS = 5000


def handle_txn_offset_commit(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    version = request.api_version
    cls = response_class(ApiKey.TXN_OFFSET_COMMIT, version)
    topic_cls = payload_class(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitResponseTopic")
    partition_cls = payload_class(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitResponsePartition")
    requested = [(t.name, p) for t in body.topics for p in t.partitions]

    def answer(error_of: Any) -> None:
        topics: dict[str, list[object]] = {}
        for name, p in requested:
            topics.setdefault(name, []).append(build(partition_cls, partition_index=p.partition_index,
                                                     error_code=version_error(request, error_of(name, p))))
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE,
                                            topics=tuple(build(topic_cls, name=n, partitions=tuple(ps)) for n, ps in topics.items()))))

    group_id = body.group_id
    error = broker.group_error(group_id)
    if error is ErrorCode.none:
        error = broker.txn_offsets.validate(group_id, int(getattr(body, "generation_id", -1)), getattr(body, "member_id", ""),
                                            getattr(body, "group_instance_id", None),
                                            check_members=not broker.config.transaction_offset_commit_skip_generation_check)
    if error is not ErrorCode.none:
        answer(lambda name, p: error)
        return
    too_large = {(name, p.partition_index) for name, p in requested
                 if p.committed_metadata is not None and len(p.committed_metadata.encode()) > broker.config.offset_metadata_max_bytes}
    unknown = {(name, p.partition_index) for name, p in requested if broker.topics.by_name(name) is None}
    offsets = [OffsetToCommit(name, p.partition_index, int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                              p.committed_metadata or "")
               for name, p in requested if (name, p.partition_index) not in too_large | unknown]

    def error_of(name: str, p: Any, stored: ErrorCode = ErrorCode.none) -> ErrorCode:
        if (name, p.partition_index) in too_large:
            return ErrorCode.offset_metadata_too_large
        if (name, p.partition_index) in unknown:
            return ErrorCode.unknown_topic_or_partition
        return stored

    if not offsets:
        answer(error_of)
        return
    offsets_topic = broker.topics.by_name(OFFSETS_TOPIC)
    assert offsets_topic is not None  # group_error said this broker coordinates the group
    index = partition_for_group(group_id, offsets_topic.num_partitions)
    producer_id, producer_epoch = int(body.producer_id), int(body.producer_epoch)
    fenced = broker.txn_offsets.check_epoch(index, producer_id, producer_epoch)
    if fenced is not ErrorCode.none:
        answer(lambda name, p: error_of(name, p, fenced))
        return
    now_ms = broker.clock.wall_ms()
    tp = TopicPartition(OFFSETS_TOPIC, index)

    def build_offsets(base: int, epoch: int) -> bytes:
        return offset_commit_batch(group_id, offsets, now_ms, base, epoch, producer_id, producer_epoch)

    def stored(error: ErrorCode) -> None:
        from cluster.broker.broker import offset_commit_error

        if error is ErrorCode.none and broker.coordinates(group_id):
            broker.txn_offsets.add(index, producer_id, producer_epoch, group_id, offsets, now_ms)
        answer(lambda name, p: error_of(name, p, offset_commit_error(error)))

    def append(guard: VerificationGuard | None) -> None:
        def unverified(partition: Partition) -> ErrorCode | None:
            # KIP-890 part 1 at the append (as produce.py's): the offsets either continue the
            # producer's transaction here or present the guard their verification started
            # under; a marker written while the answer travelled dropped that guard.
            refused = partition.producers.check_verified_producer(producer_id, producer_epoch, guard)
            if refused is None:
                return None
            log.info("TxnOffsetCommit of %r to %s refused: %s", group_id, tp, refused.message)
            return refused.error

        try:
            broker.replicas.append_internal(tp, build_offsets, now_ms, stored, OFFSETS_COMMIT_TIMEOUT_MS,
                                            refuse=unverified if broker.config.transaction_partition_verification_enable else None)
        except OSError:
            stored(ErrorCode.kafka_storage_error)

    partition = broker.partition(OFFSETS_TOPIC, index)
    if (not broker.config.transaction_partition_verification_enable or partition is None or partition.leader_error() is not None
            or not _opens_transaction(partition, producer_id, producer_epoch)):
        append(None)
        return
    # KIP-890 part 1 for offsets (Kafka's GroupCoordinator.handleTxnCommitOffsets): the batch
    # would open the producer's transaction on the offsets partition, so the transaction
    # coordinator is asked first whether the partition is in its ongoing transaction (added
    # by AddOffsetsToTxn). A TxnOffsetCommit delayed past its transaction's end is refused
    # (INVALID_TXN_STATE) instead of opening a transaction no coordinator will ever end.
    guard = partition.producers.start_verification(producer_id)

    def verified(error: ErrorCode) -> None:
        if error is not ErrorCode.none:
            log.info("TxnOffsetCommit of %r to %s refused by verification: %s", group_id, tp, error.name)
            stored(error)
            return
        append(guard)

    broker.txn.verifier.verify(body.transactional_id, producer_id, producer_epoch, tp, verified)


def _opens_transaction(partition: Partition, producer_id: int, producer_epoch: int) -> bool:
    """Would a transactional batch of this producer open its transaction on `partition`?
    (produce.opens_transaction's rule, for a batch not yet built.)"""
    entry = partition.producers.entry(producer_id)
    return entry is None or entry.current_txn_first_offset < 0 or producer_epoch > entry.producer_epoch
