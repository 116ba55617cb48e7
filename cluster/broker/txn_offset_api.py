"""TxnOffsetCommit (v0-3), the group coordinator's side of a transaction: the offsets are
written to the group's __consumer_offsets partition as a transactional batch of the
producer and held pending (cluster.broker.txn_offsets) until the transaction's marker
commits or drops them. From v3 a consumer's member id and generation are checked (KIP-447)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.broker.groups import OffsetToCommit
from cluster.broker.offsets_log import offset_commit_batch, partition_for_group
from cluster.broker.partition import TopicPartition
from cluster.broker.topics import OFFSETS_TOPIC
from cluster.broker.txn_api import version_error
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

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

    def stored(error: ErrorCode) -> None:
        from cluster.broker.broker import offset_commit_error

        if error is ErrorCode.none and broker.coordinates(group_id):
            broker.txn_offsets.add(index, producer_id, producer_epoch, group_id, offsets, now_ms)
        answer(lambda name, p: error_of(name, p, offset_commit_error(error)))

    try:
        broker.replicas.append_internal(
            TopicPartition(OFFSETS_TOPIC, index),
            lambda base, epoch: offset_commit_batch(group_id, offsets, now_ms, base, epoch, producer_id, producer_epoch),
            now_ms, stored, OFFSETS_COMMIT_TIMEOUT_MS)
    except OSError:
        stored(ErrorCode.kafka_storage_error)
