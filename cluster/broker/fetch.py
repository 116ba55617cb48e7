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
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response, TimerHandle
from cluster.broker.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, FetchSession, SessionPartition, next_epoch
from cluster.broker.partition import Partition
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.fetch_response import NO_EPOCH_END_OFFSET, FetchPartitionResult, FetchTopicResult, encode_fetch_response
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


DEBUG_REPLICA_ID = -2  # Kafka's id for a debugging consumer, which any replica serves


def replica_of(request: Request) -> tuple[int, int]:
    """(replica id, broker epoch) of a Fetch: a follower's id, or -1 for a consumer."""
    body = request.body
    if request.api_version >= 15:
        state = body.replica_state
        return (int(state.replica_id), int(state.replica_epoch)) if state is not None else (-1, -1)
    return int(getattr(body, "replica_id", -1)), -1


@dataclass(slots=True)
class _Context:
    """One Fetch request as the leader serves it: its partitions (a session's, for a
    session fetch) and which of them to look at."""

    request: Request
    replica_id: int
    replica_epoch: int
    read_committed: bool
    by_id: bool
    entries: list[SessionPartition]
    session: FetchSession | None = None
    incremental: bool = False
    mentioned: set[Hashable] = field(default_factory=set)
    error: ErrorCode | None = None

    @property
    def response_session_id(self) -> int:
        return self.session.session_id if self.session is not None else INVALID_SESSION_ID

    def to_look_at(self) -> list[SessionPartition]:
        """A full fetch looks at every partition; an incremental one at those it names and
        those that changed since the session last answered (or still have news for it)."""
        if not self.incremental:
            return self.entries
        session = self.session
        assert session is not None
        keys = self.mentioned | session.dirty
        if not keys:
            return []
        # In session order (the order of the full fetch, then of additions).
        return [entry for key, entry in session.entries.items() if key in keys]


def _key_topic(topic: uuid.UUID | str) -> int | str:
    """The topic in a session key: a topic id's integer hashes without a Python call."""
    return topic.int if isinstance(topic, uuid.UUID) else topic


def _entries_of(body: Any, by_id: bool) -> list[SessionPartition]:
    out = []
    for topic in body.topics:
        # kio reads the all-zero topic id as None; it is answered like any unknown id.
        name = (topic.topic_id or _ZERO_UUID) if by_id else topic.topic
        key_topic = _key_topic(name)
        for p in topic.partitions:
            out.append(SessionPartition((key_topic, p.partition), name, p.partition, p.fetch_offset, int(getattr(p, "log_start_offset", -1)),
                                        p.partition_max_bytes, int(getattr(p, "current_leader_epoch", -1)),
                                        int(getattr(p, "last_fetched_epoch", -1))))
    return out


def _new_context(broker: Broker, request: Request, now_ms: int) -> _Context:
    """Kafka's FetchManager.newContext: sessionless (id 0, epoch -1), full with a new session
    (epoch 0, closing `session_id` if given), or incremental on an existing session."""
    body = request.body
    version = request.api_version
    replica_id, replica_epoch = replica_of(request)
    by_id = version >= 13
    ctx = _Context(request, replica_id, replica_epoch, body.isolation_level == READ_COMMITTED, by_id, _entries_of(body, by_id))
    if version < 7:
        return ctx
    cache = broker.fetch_sessions
    session_id, epoch = int(body.session_id), int(body.session_epoch)
    if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # closed by its fetcher
        if epoch == INITIAL_EPOCH:
            ctx.session = cache.create(replica_id, by_id, ctx.entries, now_ms)
            if ctx.session is not None:
                ctx.session.stamp.fetched(now_ms)
        return ctx
    session = cache.get(session_id)
    if session is None or session.replica_id != replica_id:
        ctx.error = ErrorCode.fetch_session_id_not_found
    elif session.epoch != epoch:
        ctx.error = ErrorCode.invalid_fetch_session_epoch
    elif session.uses_topic_ids != by_id:
        ctx.error = ErrorCode.fetch_session_topic_id_error
    if ctx.error is not None:
        ctx.entries = []
        return ctx
    assert session is not None
    for topic in body.forgotten_topics_data:
        key_topic = _key_topic((topic.topic_id or _ZERO_UUID) if by_id else topic.topic)
        for index in topic.partitions:
            session.forget((key_topic, int(index)))
    for entry in ctx.entries:
        cached = session.entries.get(entry.key)
        if cached is None:
            session.entries[entry.key] = entry
        else:
            cached.update_from(entry)
        ctx.mentioned.add(entry.key)
    session.epoch = next_epoch(epoch)
    session.last_used_ms = now_ms
    session.stamp.fetched(now_ms)
    ctx.session, ctx.incremental = session, True
    ctx.entries = list(session.entries.values())
    return ctx


@dataclass(slots=True)
class _FetchRead:
    results: list[tuple[SessionPartition, FetchPartitionResult, Partition | None]]
    size_bytes: int
    has_error: bool


def _read(broker: Broker, ctx: _Context, entries: list[SessionPartition], *, update_followers: bool) -> _FetchRead:
    """Read `entries` for the fetch; with `update_followers`, a follower's fetch positions
    count for replication (on arrival and on completion, as in Kafka; not on re-checks)."""
    body = ctx.request.body
    replica_id = ctx.replica_id
    now_ms = broker.clock.wall_ms()  # follower fetch times feed replica lag: wall clock, as in Kafka
    session = ctx.session
    stamp = session.stamp if session is not None else None
    watching = session is not None and session.stamp.active
    remaining = body.max_bytes
    total = 0
    has_error = False
    results: list[tuple[SessionPartition, FetchPartitionResult, Partition | None]] = []
    for entry in entries:
        info = broker.topics.by_id(entry.topic) if ctx.by_id else broker.topics.by_name(entry.topic)
        partition = broker.partition(info.name, entry.partition_index) if info is not None else None
        if watching:
            session.watch(entry, partition)  # type: ignore[union-attr]
        if partition is None:
            error = ErrorCode.unknown_topic_id if ctx.by_id and info is None else ErrorCode.unknown_topic_or_partition
            results.append((entry, FetchPartitionResult(entry.partition_index, error.value), None))
            has_error = True
            continue
        result = FetchPartitionResult(
            entry.partition_index,
            ErrorCode.none.value,
            partition.high_watermark,
            partition.last_stable_offset,
            partition.log_start_offset,
            () if ctx.read_committed else None,
        )
        results.append((entry, result, partition))
        if replica_id == DEBUG_REPLICA_ID:
            epoch_error = None
        else:
            epoch_error = partition.leader_error(entry.current_leader_epoch)
        if epoch_error is not None:
            result.error_code = epoch_error.value
            has_error = True
            continue
        limit = min(entry.max_bytes, remaining) if total else entry.max_bytes
        if total and limit <= 0:
            continue
        if replica_id >= 0:
            diverging = partition.diverging_epoch(entry.fetch_offset, entry.last_fetched_epoch)
            if diverging is not None:
                result.diverging_epoch = diverging
                has_error = True  # answer at once: the follower must truncate before it can fetch
                continue
            if update_followers:
                partition.on_follower_fetch(replica_id, entry.fetch_offset, ctx.replica_epoch, now_ms, entry.log_start_offset, stamp)
                if partition.high_watermark != result.high_watermark:  # the LSO moves only with it here
                    result.high_watermark = partition.high_watermark
                    result.last_stable_offset = partition.last_stable_offset
        try:
            if replica_id >= 0:
                batches = partition.read_for_replica(entry.fetch_offset, max(limit, 0))
            else:
                batches = partition.read(entry.fetch_offset, max(limit, 0), ctx.read_committed)
        except OffsetOutOfRangeError:
            result.error_code = ErrorCode.offset_out_of_range.value
            has_error = True
            continue
        size = sum(len(b) for b in batches)
        if total and size > remaining:
            continue  # only the first partition with data may exceed the limits
        result.records = batches
        if ctx.read_committed and batches and replica_id < 0:
            # Kafka's collectAbortedTransactions: those with records in the range returned.
            upper = parse_header(batches[-1]).next_offset
            result.aborted_transactions = tuple((a.producer_id, a.first_offset)
                                                for a in partition.aborted_transactions(entry.fetch_offset, upper))
        total += size
        remaining -= size
    return _FetchRead(results, total, has_error)


def _has_news(entry: SessionPartition, result: FetchPartitionResult) -> bool:
    """Whether an incremental response must carry the partition (as Kafka's
    CachedPartition.maybeUpdateResponseData decides)."""
    return bool(result.error_code or result.records or result.diverging_epoch != NO_EPOCH_END_OFFSET
                or result.high_watermark != entry.sent_high_watermark or result.last_stable_offset != entry.sent_last_stable_offset
                or result.log_start_offset != entry.sent_log_start_offset)


def _settled(ctx: _Context, entry: SessionPartition, result: FetchPartitionResult, partition: Partition | None) -> bool:
    """Whether the session may skip the partition until it changes: no error, nothing sent
    now, and nothing more to read for the fetcher."""
    if partition is None or result.error_code or result.records or result.diverging_epoch != NO_EPOCH_END_OFFSET:
        return False
    if ctx.replica_id >= 0:
        return entry.fetch_offset >= partition.log_end_offset
    return entry.fetch_offset >= (result.last_stable_offset if ctx.read_committed else partition.high_watermark)


def _respond(ctx: _Context, read: _FetchRead) -> Response:
    """The response of a completed read; a session records what it told the fetcher."""
    request = ctx.request
    if ctx.error is not None:
        return Response(encode_fetch_response(request.api_version, request.correlation_id, [], error_code=ctx.error.value))
    session = ctx.session
    topics: list[FetchTopicResult] = []
    by_topic: dict[Any, FetchTopicResult] = {}
    for entry, result, partition in read.results:
        if session is not None:
            if _settled(ctx, entry, result, partition):
                session.dirty.discard(entry.key)
            else:
                session.dirty.add(entry.key)
            if ctx.incremental and not _has_news(entry, result):
                continue
            entry.sent_high_watermark = result.high_watermark
            entry.sent_last_stable_offset = result.last_stable_offset
            entry.sent_log_start_offset = result.log_start_offset
        out = by_topic.get(entry.topic)
        if out is None:
            if ctx.by_id:
                out = FetchTopicResult(partition.tp.topic if partition is not None else "", entry.topic)
            else:
                state = partition.state if partition is not None else None
                out = FetchTopicResult(entry.topic, state.topic_id if state is not None else _ZERO_UUID)
            by_topic[entry.topic] = out
            topics.append(out)
        out.partitions.append(result)
    return Response(encode_fetch_response(request.api_version, request.correlation_id, topics, session_id=ctx.response_session_id))


def handle_fetch(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    ctx = _new_context(broker, request, broker.clock.wall_ms())
    if ctx.error is not None:
        reply(_respond(ctx, _FetchRead([], 0, True)))
        return
    read = _read(broker, ctx, ctx.to_look_at(), update_followers=True)
    max_wait_ms = body.max_wait.total_seconds() * 1000.0
    if max_wait_ms <= 0 or read.size_bytes >= body.min_bytes or read.has_error or not ctx.entries:
        reply(_respond(ctx, read))
        return
    _PendingFetch(broker, ctx, reply, read, max_wait_ms)


def _ready_from_offsets(broker: Broker, ctx: _Context, entry: SessionPartition) -> bool:
    """Whether a read of `entry` would now return records or an error."""
    info = broker.topics.by_id(entry.topic) if ctx.by_id else broker.topics.by_name(entry.topic)
    partition = broker.partition(info.name, entry.partition_index) if info is not None else None
    if partition is None:
        return True
    if ctx.replica_id != DEBUG_REPLICA_ID and partition.leader_error(entry.current_leader_epoch) is not None:
        return True
    end = partition.log_end_offset if ctx.replica_id >= 0 else partition.consumer_read_end(ctx.read_committed)
    if entry.fetch_offset < partition.log_start_offset or entry.fetch_offset > partition.log_end_offset:
        return True  # out of range
    return entry.fetch_offset < end


class _PendingFetch:
    """A parked long-poll Fetch. A change to one of its partitions (an append, a moved HWM,
    a role change) marks that partition; once the request that changed it is handled (see
    wakeups.py) the marked partitions alone are re-read, and the fetch completes when they
    bring `min_bytes` or an error."""

    def __init__(self, broker: Broker, ctx: _Context, reply: Reply, read: _FetchRead, max_wait_ms: float) -> None:
        self._broker = broker
        self._ctx = ctx
        self._reply: Reply | None = reply
        self._sizes: dict[Hashable, int] = {entry.key: sum(len(b) for b in result.records) for entry, result, _ in read.results}
        self._changed: dict[Hashable, SessionPartition] = {}
        self._check_deferred = False
        self._listening: list[tuple[Partition, Callable[[], None]]] = []
        session = ctx.session
        if session is not None:
            session.waiter = self._on_session_change
        else:
            for entry, _, partition in read.results:
                if partition is not None:
                    listener = self._listener(entry)
                    partition.add_append_listener(listener)
                    self._listening.append((partition, listener))
        self._timer: TimerHandle | None = broker.scheduler.call_later(max_wait_ms, self._on_timeout)

    def _listener(self, entry: SessionPartition) -> Callable[[], None]:
        def changed() -> None:
            self._on_change(entry)
        return changed

    def _on_session_change(self, key: Hashable) -> None:
        session = self._ctx.session
        entry = session.entries.get(key) if session is not None else None
        if entry is not None:
            self._on_change(entry)

    def _on_change(self, entry: SessionPartition) -> None:
        if self._reply is None:
            return
        self._changed[entry.key] = entry
        if not self._check_deferred:
            # Coalesced: a produce that appends to several partitions wakes us once.
            self._check_deferred = True
            self._broker.replicas.wakeups.defer(self._check)

    def _check(self) -> None:
        self._check_deferred = False
        if self._reply is None:
            return
        changed, self._changed = list(self._changed.values()), {}
        if self._ctx.request.body.min_bytes <= 1:
            # Any byte will do: offsets tell, without reading the log twice (as Kafka's
            # DelayedFetch judges from offsets, not reads).
            if any(_ready_from_offsets(self._broker, self._ctx, entry) for entry in changed):
                self._complete()
            return
        read = _read(self._broker, self._ctx, changed, update_followers=False)
        for entry, result, _ in read.results:
            self._sizes[entry.key] = sum(len(b) for b in result.records)
        if read.has_error or sum(self._sizes.values()) >= self._ctx.request.body.min_bytes:
            self._complete()

    def _on_timeout(self) -> None:
        self._timer = None
        self._complete()

    def _complete(self) -> None:
        if self._reply is None:
            return
        reply, self._reply = self._reply, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for partition, listener in self._listening:
            partition.remove_append_listener(listener)
        self._listening = []
        ctx = self._ctx
        if ctx.session is not None and ctx.session.waiter == self._on_session_change:
            ctx.session.waiter = None
        reply(_respond(ctx, _read(self._broker, ctx, ctx.to_look_at(), update_followers=True)))


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
