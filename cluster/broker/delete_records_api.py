"""DeleteRecords on the wire: the leader moves a partition's log start offset up to the
requested offset (-1 meaning its high watermark; beyond the high watermark is
OFFSET_OUT_OF_RANGE, as in Kafka), and followers follow the leader's log start offset from
their fetch responses (replica_fetcher) and report theirs in their fetch requests.

As Kafka's DelayedDeleteRecords, the answer waits until the partition's low watermark (the
smallest log start offset over the leader and its live followers) reaches the offset, and
answers that low watermark; after the request's timeout a partition still waiting answers
REQUEST_TIMED_OUT with the low watermark it had when the request arrived, and one whose
leadership moves NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, TimerHandle
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker
    from cluster.broker.partition import Partition

HIGH_WATERMARK = -1  # the request's "delete up to the high watermark"


def handle_delete_records(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    topic_cls = payload_class(ApiKey.DELETE_RECORDS, version, "DeleteRecordsTopicResult")
    partition_cls = payload_class(ApiKey.DELETE_RECORDS, version, "DeleteRecordsPartitionResult")
    # [topic name, [[partition index, error, low watermark]]], filled in as the waits end
    results: list[tuple[str, list[list[Any]]]] = []
    waits: list[tuple[list[Any], Partition, int]] = []
    for topic in request.body.topics:
        partitions: list[list[Any]] = []
        for p in topic.partitions:
            error, low_watermark, partition, required = _delete(broker, topic.name, p)
            entry = [int(p.partition_index), error, low_watermark]
            partitions.append(entry)
            if partition is not None:
                waits.append((entry, partition, required))
        results.append((topic.name, partitions))

    def answer() -> None:
        topics = tuple(build(topic_cls, name=name, partitions=tuple(
            build(partition_cls, partition_index=index, low_watermark=low, error_code=error) for index, error, low in parts))
            for name, parts in results)
        body = build(response_class(ApiKey.DELETE_RECORDS, version), throttle_time=datetime.timedelta(0), topics=topics)
        reply(broker.respond(request, body))

    outstanding = [len(waits)]
    if not waits:
        answer()
        return
    timer: list[TimerHandle] = []

    def settle(entry: list[Any], partition: Partition, error: ErrorCode) -> None:
        if error == ErrorCode.none:
            entry[2] = partition.low_watermark
        else:
            entry[1] = error
            if error != ErrorCode.request_timed_out:
                entry[2] = -1
        outstanding[0] -= 1
        if outstanding[0] == 0:
            for handle in timer:
                handle.cancel()
            answer()

    pendings = [(partition, partition.wait_for_low_watermark(required, lambda e, en=entry, pa=partition: settle(en, pa, e)))
                for entry, partition, required in waits]
    if outstanding[0] > 0:
        timeout = request.body.timeout
        timeout_ms = timeout.total_seconds() * 1000 if hasattr(timeout, "total_seconds") else float(timeout)

        def expire() -> None:
            for partition, pending in pendings:
                partition.cancel_delete_wait(pending, ErrorCode.request_timed_out)

        timer.append(broker.scheduler.call_later(max(timeout_ms, 0.0), expire))


def _delete(broker: Broker, topic: str, p: Any) -> tuple[ErrorCode, int, Partition | None, int]:
    """(error, low watermark now, the partition to wait on or None, the offset to wait for)."""
    partition = broker.partition(topic, int(p.partition_index))
    if partition is None:
        image = broker.topics.by_name(topic)
        hosted_elsewhere = image is not None and 0 <= int(p.partition_index) < image.num_partitions
        return (ErrorCode.not_leader_or_follower if hosted_elsewhere else ErrorCode.unknown_topic_or_partition), -1, None, -1
    not_leader = partition.leader_error()
    if not_leader is not None:
        return not_leader, -1, None, -1
    offset = int(p.offset)
    if offset == HIGH_WATERMARK:
        offset = partition.high_watermark
    if offset < 0 or offset > partition.high_watermark:
        return ErrorCode.offset_out_of_range, -1, None, -1
    partition.log.delete_records_before(offset)
    partition.wake_fetchers()  # fetch sessions carry the new log start to the followers
    return ErrorCode.none, partition.low_watermark, partition, offset
