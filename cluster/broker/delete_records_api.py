"""DeleteRecords on the wire: the leader moves a partition's log start offset up to the
requested offset (-1 meaning its high watermark; beyond the high watermark is
OFFSET_OUT_OF_RANGE, as in Kafka), and followers follow the leader's log start offset from
their fetch responses (replica_fetcher).

Kafka's leader answers once every replica's log start has reached the offset (its
DelayedDeleteRecords purgatory); this one answers with its own log start at once, so a
follower may briefly still serve the deleted records' offsets until its next fetch."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

HIGH_WATERMARK = -1  # the request's "delete up to the high watermark"


def handle_delete_records(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    topic_cls = payload_class(ApiKey.DELETE_RECORDS, version, "DeleteRecordsTopicResult")
    partition_cls = payload_class(ApiKey.DELETE_RECORDS, version, "DeleteRecordsPartitionResult")
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            error, low_watermark = _delete(broker, topic.name, p)
            partitions.append(build(partition_cls, partition_index=p.partition_index, low_watermark=low_watermark, error_code=error))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    body = build(response_class(ApiKey.DELETE_RECORDS, version), throttle_time=datetime.timedelta(0), topics=tuple(topics))
    reply(broker.respond(request, body))


def _delete(broker: Broker, topic: str, p: Any) -> tuple[ErrorCode, int]:
    partition = broker.partition(topic, int(p.partition_index))
    if partition is None:
        image = broker.topics.by_name(topic)
        hosted_elsewhere = image is not None and 0 <= int(p.partition_index) < image.num_partitions
        return (ErrorCode.not_leader_or_follower if hosted_elsewhere else ErrorCode.unknown_topic_or_partition), -1
    not_leader = partition.leader_error()
    if not_leader is not None:
        return not_leader, -1
    offset = int(p.offset)
    if offset == HIGH_WATERMARK:
        offset = partition.high_watermark
    if offset < 0 or offset > partition.high_watermark:
        return ErrorCode.offset_out_of_range, -1
    partition.log.delete_records_before(offset)
    return ErrorCode.none, partition.log_start_offset
