"""Reads: Fetch (with long poll), ListOffsets and OffsetForLeaderEpoch.

A Fetch that finds fewer than `min_bytes` waits up to `max_wait` for appends to any of its
partitions (each append wakes it to re-read), then answers with whatever is there. Whole
stored batches go out untouched; the first partition with data always gets at least one
batch, even above the byte limits (KIP-74); `records` is empty bytes, never null.
A read_committed consumer (isolation_level 1) reads below the last stable offset and gets the
aborted transactions that overlap what it read; its long poll re-reads as the LSO moves.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response, TimerHandle
from cluster.broker.partition import Partition
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.fetch_response import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import parse_header
from cluster.storage.log import OffsetOutOfRangeError

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
READ_COMMITTED = 1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class _FetchRead:
    topics: list[FetchTopicResult]
    size_bytes: int
    has_error: bool
    partitions: list[Partition]


DEBUG_REPLICA_ID = -2  # Kafka's id for a debugging consumer, which any replica serves


def replica_of(request: Request) -> tuple[int, int]:
    """(replica id, broker epoch) of a Fetch: a follower's id, or -1 for a consumer."""
    body = request.body
    if request.api_version >= 15:
        state = body.replica_state
        return (int(state.replica_id), int(state.replica_epoch)) if state is not None else (-1, -1)
    return int(getattr(body, "replica_id", -1)), -1


def _read(broker: Broker, request: Request) -> _FetchRead:
    body = request.body
    version = request.api_version
    replica_id, replica_epoch = replica_of(request)
    now_ms = broker.clock.wall_ms()  # follower fetch times feed replica lag: wall clock, as in Kafka
    by_id = version >= 13
    read_committed = body.isolation_level == READ_COMMITTED
    remaining = body.max_bytes
    total = 0
    has_error = False
    topics: list[FetchTopicResult] = []
    touched: list[Partition] = []
    for topic in body.topics:
        info = broker.topics.by_id(topic.topic_id) if by_id else broker.topics.by_name(topic.topic)
        name = info.name if info is not None else (topic.topic if not by_id else "")
        # kio reads the all-zero topic id as None; answer it like any unknown id.
        out = FetchTopicResult(name, (topic.topic_id or _ZERO_UUID) if by_id else (info.topic_id if info else _ZERO_UUID))
        topics.append(out)
        for p in topic.partitions:
            partition = broker.partition(info.name, p.partition) if info is not None else None
            if partition is None:
                error = ErrorCode.unknown_topic_id if by_id and info is None else ErrorCode.unknown_topic_or_partition
                out.partitions.append(FetchPartitionResult(p.partition, error.value))
                has_error = True
                continue
            touched.append(partition)
            result = FetchPartitionResult(
                p.partition,
                ErrorCode.none.value,
                partition.high_watermark,
                partition.last_stable_offset,
                partition.log_start_offset,
                () if read_committed else None,
            )
            out.partitions.append(result)
            if replica_id == DEBUG_REPLICA_ID:
                epoch_error = None
            else:
                epoch_error = partition.leader_error(getattr(p, "current_leader_epoch", -1))
            if epoch_error is not None:
                result.error_code = epoch_error.value
                has_error = True
                continue
            limit = min(p.partition_max_bytes, remaining) if total else p.partition_max_bytes
            if total and limit <= 0:
                continue
            if replica_id >= 0:
                diverging = partition.diverging_epoch(p.fetch_offset, getattr(p, "last_fetched_epoch", -1))
                if diverging is not None:
                    result.diverging_epoch = diverging
                    has_error = True  # answer at once: the follower must truncate before it can fetch
                    continue
                partition.on_follower_fetch(replica_id, p.fetch_offset, replica_epoch, now_ms, int(getattr(p, "log_start_offset", -1)))
                result.high_watermark = partition.high_watermark
            try:
                if replica_id >= 0:
                    batches = partition.read_for_replica(p.fetch_offset, max(limit, 0))
                else:
                    batches = partition.read(p.fetch_offset, max(limit, 0), read_committed)
            except OffsetOutOfRangeError:
                result.error_code = ErrorCode.offset_out_of_range.value
                has_error = True
                continue
            size = sum(len(b) for b in batches)
            if total and size > remaining:
                continue  # only the first partition with data may exceed the limits
            result.records = batches
            if read_committed and batches and replica_id < 0:
                # Kafka's collectAbortedTransactions: those with records in the range returned.
                upper = parse_header(batches[-1]).next_offset
                result.aborted_transactions = tuple((a.producer_id, a.first_offset)
                                                    for a in partition.aborted_transactions(p.fetch_offset, upper))
            total += size
            remaining -= size
    return _FetchRead(topics, total, has_error, touched)


def _encode(request: Request, read: _FetchRead) -> Response:
    return Response(encode_fetch_response(request.api_version, request.correlation_id, read.topics))


def handle_fetch(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    read = _read(broker, request)
    max_wait_ms = body.max_wait.total_seconds() * 1000.0
    if max_wait_ms <= 0 or read.size_bytes >= body.min_bytes or read.has_error or not read.partitions:
        reply(_encode(request, read))
        return
    _PendingFetch(broker, request, reply, read.partitions, max_wait_ms)


class _PendingFetch:
    """A parked long-poll Fetch: re-read on every append to one of its partitions."""

    def __init__(self, broker: Broker, request: Request, reply: Reply, partitions: list[Partition], max_wait_ms: float) -> None:
        self._broker = broker
        self._request = request
        self._reply: Reply | None = reply
        self._partitions = partitions
        for partition in partitions:
            partition.add_append_listener(self._on_append)
        self._timer: TimerHandle | None = broker.scheduler.call_later(max_wait_ms, self._on_timeout)

    def _on_append(self) -> None:
        read = _read(self._broker, self._request)
        if read.size_bytes >= self._request.body.min_bytes or read.has_error:
            self._complete(read)

    def _on_timeout(self) -> None:
        self._timer = None
        self._complete(_read(self._broker, self._request))

    def _complete(self, read: _FetchRead) -> None:
        if self._reply is None:
            return
        reply, self._reply = self._reply, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for partition in self._partitions:
            partition.remove_append_listener(self._on_append)
        reply(_encode(self._request, read))


def handle_list_offsets(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    body = request.body
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    topic_cls = payload_class(ApiKey.LIST_OFFSETS, version, "ListOffsetsTopicResponse")
    partition_cls = payload_class(ApiKey.LIST_OFFSETS, version, "ListOffsetsPartitionResponse")
    topics = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            error, timestamp, offset, epoch = _list_offset(broker, topic.name, p, read_committed, int(getattr(body, "replica_id", -1)))
            partitions.append(build(partition_cls, partition_index=p.partition_index, error_code=error, timestamp=timestamp, offset=offset, leader_epoch=epoch))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    cls = response_class(ApiKey.LIST_OFFSETS, version)
    reply(broker.respond(request, build(cls, throttle_time=_no_throttle(), topics=tuple(topics))))


def _list_offset(broker: Broker, topic: str, p: Any, read_committed: bool, replica_id: int = -1) -> tuple[ErrorCode, int, int, int]:
    partition = broker.partition(topic, p.partition_index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, -1
    if replica_id == DEBUG_REPLICA_ID:
        epoch_error = partition.leader_epoch_error(getattr(p, "current_leader_epoch", -1))
    else:
        epoch_error = partition.leader_error(getattr(p, "current_leader_epoch", -1))
    if epoch_error is not None:
        return epoch_error, -1, -1, -1
    epochs = partition.log.epochs
    # KIP-207: a new leader's HWM is the one it had as a follower and may lag what the old
    # leader already told consumers. Until it reaches the start of this leader's epoch it
    # is no answer to "where does the log end" (offsets would go backwards): the client
    # gets the retriable OFFSET_NOT_AVAILABLE and asks again.
    lagging = replica_id != DEBUG_REPLICA_ID and partition.high_watermark < partition.epoch_start_offset
    if p.timestamp == LATEST_TIMESTAMP:
        if replica_id == DEBUG_REPLICA_ID:
            # As Kafka answers a non-consumer: the replica's own log end offset.
            return ErrorCode.none, -1, partition.log_end_offset, epochs.latest_epoch
        if lagging:
            return ErrorCode.offset_not_available, -1, -1, -1
        offset = partition.last_stable_offset if read_committed else partition.high_watermark
        return ErrorCode.none, -1, offset, epochs.latest_epoch
    if p.timestamp == EARLIEST_TIMESTAMP:
        offset = partition.log_start_offset
        return ErrorCode.none, -1, offset, epochs.epoch_for_offset(offset)
    if p.timestamp == MAX_TIMESTAMP:
        found = partition.log.max_timestamp()
    elif p.timestamp < 0:
        return ErrorCode.invalid_request, -1, -1, -1
    else:
        found = partition.log.offset_for_timestamp(p.timestamp)
    if found is None or found[0] >= partition.high_watermark:
        # Past what is committed: "no such record" only if the HWM can be trusted (KIP-207).
        return (ErrorCode.offset_not_available, -1, -1, -1) if lagging else (ErrorCode.none, -1, -1, -1)
    offset, timestamp = found
    return ErrorCode.none, timestamp, offset, epochs.epoch_for_offset(offset)


def handle_offset_for_leader_epoch(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    topic_cls = payload_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderTopicResult")
    partition_cls = payload_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, "EpochEndOffset")
    topics = []
    for topic in request.body.topics:
        partitions = []
        for p in topic.partitions:
            partition = broker.partition(topic.topic, p.partition)
            error: ErrorCode | None
            epoch, end_offset = -1, -1
            if partition is None:
                error = ErrorCode.unknown_topic_or_partition
            else:
                debug = int(getattr(request.body, "replica_id", -1)) == DEBUG_REPLICA_ID
                error = partition.leader_epoch_error(p.current_leader_epoch) if debug else partition.leader_error(p.current_leader_epoch)
                if error is None:
                    error = ErrorCode.none
                    epoch, end_offset = partition.log.epochs.end_offset_for(p.leader_epoch, partition.log_end_offset)
            partitions.append(build(partition_cls, error_code=error, partition=p.partition, leader_epoch=epoch, end_offset=end_offset))
        topics.append(build(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
    cls = response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    reply(broker.respond(request, build(cls, throttle_time=_no_throttle(), topics=tuple(topics))))


def _no_throttle() -> datetime.timedelta:
    return datetime.timedelta(0)
