"""The hand-written Produce and Fetch response encoders agree with kio byte for byte, for
every version the broker offers, including flexible versions and their tagged fields."""

from __future__ import annotations

import datetime
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from cluster.protocol.codec import build, encode_response, payload_class, response_class
from cluster.protocol.fetch_response import FetchPartitionResult, FetchTopicResult, encode_fetch_response
from cluster.protocol.produce_response import ProducePartitionResult, ProduceTopicResult, encode_produce_response
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey, SUPPORTED_VERSIONS

PRODUCE_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.PRODUCE].min_version, SUPPORTED_VERSIONS[ApiKey.PRODUCE].max_version + 1)
FETCH_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.FETCH].min_version, SUPPORTED_VERSIONS[ApiKey.FETCH].max_version + 1)
ERROR_CODES = [0, 1, 3, 6, 45, 47, 59, 74, 100]
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _kio_produce(version: int, correlation_id: int, topics: list[ProduceTopicResult], throttle_ms: int) -> bytes:
    partition_cls = payload_class(ApiKey.PRODUCE, version, "PartitionProduceResponse")
    topic_cls = payload_class(ApiKey.PRODUCE, version, "TopicProduceResponse")
    extra = {}
    if version >= 8:
        extra["record_errors_cls"] = payload_class(ApiKey.PRODUCE, version, "BatchIndexAndErrorMessage")
    leader_cls = payload_class(ApiKey.PRODUCE, version, "LeaderIdAndEpoch") if version >= 10 else None

    def partition(p: ProducePartitionResult):
        values = dict(
            index=p.index,
            error_code=ErrorCode(p.error_code),
            base_offset=p.base_offset,
            log_append_time=None
            if p.log_append_time_ms == -1
            else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, tz=datetime.timezone.utc),
            log_start_offset=p.log_start_offset,
            error_message=p.error_message,
        )
        if version >= 8:
            values["record_errors"] = tuple(
                extra["record_errors_cls"](batch_index=i, batch_index_error_message=m) for i, m in p.record_errors
            )
        if leader_cls is not None:
            values["current_leader"] = leader_cls(leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
        return build(partition_cls, **values)

    body = build(
        response_class(ApiKey.PRODUCE, version),
        responses=tuple(topic_cls(name=t.name, partition_responses=tuple(partition(p) for p in t.partitions)) for t in topics),
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
    )
    return encode_response(ApiKey.PRODUCE, version, correlation_id, body)


def _kio_fetch(version: int, correlation_id: int, topics: list[FetchTopicResult], throttle_ms: int, error_code: int, session_id: int) -> bytes:
    partition_cls = payload_class(ApiKey.FETCH, version, "PartitionData")
    topic_cls = payload_class(ApiKey.FETCH, version, "FetchableTopicResponse")
    aborted_cls = payload_class(ApiKey.FETCH, version, "AbortedTransaction")
    tagged = {}
    if version >= 12:
        tagged["EpochEndOffset"] = payload_class(ApiKey.FETCH, version, "EpochEndOffset")
        tagged["LeaderIdAndEpoch"] = payload_class(ApiKey.FETCH, version, "LeaderIdAndEpoch")

    def partition(p: FetchPartitionResult):
        values = dict(
            partition_index=p.partition_index,
            error_code=ErrorCode(p.error_code),
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted_transactions=None
            if p.aborted_transactions is None
            else tuple(aborted_cls(producer_id=pid, first_offset=first) for pid, first in p.aborted_transactions),
            preferred_read_replica=p.preferred_read_replica,
            records=b"".join(bytes(c) for c in p.records),
        )
        if version >= 12:
            values["diverging_epoch"] = tagged["EpochEndOffset"](epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1])
            values["current_leader"] = tagged["LeaderIdAndEpoch"](leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
        return build(partition_cls, **values)

    body = build(
        response_class(ApiKey.FETCH, version),
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        error_code=ErrorCode(error_code),
        session_id=session_id,
        responses=tuple(
            build(topic_cls, topic=t.name, topic_id=t.topic_id, partitions=tuple(partition(p) for p in t.partitions)) for t in topics
        ),
    )
    return encode_response(ApiKey.FETCH, version, correlation_id, body)


def _batch(base_offset: int, count: int, size: int) -> bytes:
    return build_batch([Record(b"key-%d" % i, b"v" * size) for i in range(count)], base_offset=base_offset, timestamp_ms=1_700_000_000_000)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_response_matches_kio_for_typical_results(version: int) -> None:
    topics = [
        ProduceTopicResult("orders", (ProducePartitionResult(0, 0, 1234, -1, 0), ProducePartitionResult(5, 45, -1, -1, 7, error_message="gap"))),
        ProduceTopicResult("ümlaut-topic", (ProducePartitionResult(2, 2, -1, record_errors=((0, "crc"), (3, None)), current_leader=(0, 4)),)),
        ProduceTopicResult("empty", ()),
    ]
    assert encode_produce_response(version, 99, topics, 0) == _kio_produce(version, 99, topics, 0)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_response_matches_kio_for_typical_results(version: int) -> None:
    batches = [_batch(10, 3, 20), _batch(13, 1, 1000)]
    topics = [
        FetchTopicResult(
            "orders",
            uuid.UUID(int=0x1234),
            [
                FetchPartitionResult(0, 0, 14, 14, 0, None, -1, batches),
                FetchPartitionResult(1, 1, 20, 20, 5, (), -1, []),
                FetchPartitionResult(2, 0, 30, 25, 0, ((77, 21), (78, 24)), 2, [memoryview(batches[0])], (3, 99), (0, 5)),
            ],
        ),
        FetchTopicResult("nothing", uuid.UUID(int=0), []),
    ]
    chunks = encode_fetch_response(version, 7, topics, 0, 0, 0)
    assert b"".join(bytes(c) for c in chunks) == _kio_fetch(version, 7, topics, 0, 0, 0)


produce_partitions = st.builds(
    ProducePartitionResult,
    index=INT32,
    error_code=st.sampled_from(ERROR_CODES),
    base_offset=INT64,
    log_append_time_ms=st.one_of(st.just(-1), st.integers(0, 2**41)),
    log_start_offset=INT64,
    record_errors=st.lists(st.tuples(INT32, st.one_of(st.none(), st.text(max_size=20))), max_size=3).map(tuple),
    error_message=st.one_of(st.none(), st.text(max_size=30)),
    current_leader=st.one_of(st.just((-1, -1)), st.tuples(INT32, INT32)),
)
produce_topics = st.lists(
    st.builds(ProduceTopicResult, name=st.text(min_size=1, max_size=30), partitions=st.lists(produce_partitions, max_size=4).map(tuple)),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(list(PRODUCE_VERSIONS)), correlation_id=INT32, topics=produce_topics, throttle_ms=st.integers(0, 2**31 - 1))
def test_produce_response_matches_kio_for_arbitrary_results(version, correlation_id, topics, throttle_ms) -> None:
    assert encode_produce_response(version, correlation_id, topics, throttle_ms) == _kio_produce(version, correlation_id, topics, throttle_ms)


fetch_partitions = st.builds(
    FetchPartitionResult,
    partition_index=INT32,
    error_code=st.sampled_from(ERROR_CODES),
    high_watermark=INT64,
    last_stable_offset=INT64,
    log_start_offset=INT64,
    aborted_transactions=st.one_of(st.none(), st.lists(st.tuples(INT64, INT64), max_size=3).map(tuple)),
    preferred_read_replica=INT32,
    records=st.lists(st.builds(_batch, st.integers(0, 2**40), st.integers(1, 4), st.integers(0, 300)), max_size=3),
    diverging_epoch=st.one_of(st.just((-1, -1)), st.tuples(INT32, INT64)),
    current_leader=st.one_of(st.just((-1, -1)), st.tuples(INT32, INT32)),
)
fetch_topics = st.lists(
    st.builds(FetchTopicResult, name=st.text(min_size=1, max_size=30), topic_id=st.uuids(), partitions=st.lists(fetch_partitions, max_size=3)),
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(list(FETCH_VERSIONS)),
    correlation_id=INT32,
    topics=fetch_topics,
    error_code=st.sampled_from(ERROR_CODES),
    session_id=INT32,
)
def test_fetch_response_matches_kio_for_arbitrary_results(version, correlation_id, topics, error_code, session_id) -> None:
    chunks = encode_fetch_response(version, correlation_id, topics, 0, error_code, session_id)
    assert b"".join(bytes(c) for c in chunks) == _kio_fetch(version, correlation_id, topics, 0, error_code, session_id)


def test_fetch_response_passes_stored_batches_through_uncopied() -> None:
    batch = _batch(0, 2, 50)
    view = memoryview(batch)
    chunks = encode_fetch_response(16, 1, [FetchTopicResult("t", uuid.uuid4(), [FetchPartitionResult(0, 0, 2, 2, 0, None, -1, [view])])])
    assert any(chunk is view for chunk in chunks)


def test_encoders_refuse_versions_outside_their_range() -> None:
    with pytest.raises(ValueError, match="Produce response v2"):
        encode_produce_response(2, 1, [])
    with pytest.raises(ValueError, match="Fetch response v17"):
        encode_fetch_response(17, 1, [])
