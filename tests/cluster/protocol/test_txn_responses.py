"""The hand-written WriteTxnMarkers v1 and AddPartitionsToTxn v4 response encoders agree with
kio's byte for byte (whole frames), and kio reads back what they wrote."""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from cluster.protocol.codec import build, decode_response, encode_response, payload_class, response_class
from cluster.protocol.txn_responses import encode_add_partitions_v4_response, encode_write_txn_markers_response
from cluster.protocol.versions import ApiKey

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
errors = st.sampled_from(list(ErrorCode))
names = st.text(max_size=300)  # past 127 bytes the compact length takes two varint bytes
topics = st.lists(st.tuples(names, st.lists(st.tuples(INT32, errors), max_size=4)), max_size=4)


def _plain(values: list) -> list:
    return [(name, [(index, int(error)) for index, error in partitions]) for name, partitions in values]


@settings(max_examples=150, deadline=None)
@given(markers=st.lists(st.tuples(INT64, topics), max_size=4), correlation_id=INT32)
def test_write_txn_markers_response_matches_kio(markers: list, correlation_id: int) -> None:
    key, version = ApiKey.WRITE_TXN_MARKERS, 1
    partition_cls = payload_class(key, version, "WritableTxnMarkerPartitionResult")
    topic_cls = payload_class(key, version, "WritableTxnMarkerTopicResult")
    marker_cls = payload_class(key, version, "WritableTxnMarkerResult")
    expected = build(response_class(key, version), markers=tuple(
        build(marker_cls, producer_id=pid, topics=tuple(
            build(topic_cls, name=name, partitions=tuple(build(partition_cls, partition_index=i, error_code=e) for i, e in partitions))
            for name, partitions in marker_topics))
        for pid, marker_topics in markers))
    ours = encode_write_txn_markers_response(correlation_id, [(pid, _plain(marker_topics)) for pid, marker_topics in markers])
    assert ours == encode_response(key, version, correlation_id, expected)
    assert decode_response(key, version, ours[4:]) == (correlation_id, expected)


@settings(max_examples=150, deadline=None)
@given(transactions=st.lists(st.tuples(names, topics), max_size=4), error=errors, correlation_id=INT32)
def test_add_partitions_v4_response_matches_kio(transactions: list, error: ErrorCode, correlation_id: int) -> None:
    key, version = ApiKey.ADD_PARTITIONS_TO_TXN, 4
    result_cls = payload_class(key, version, "AddPartitionsToTxnResult")
    topic_cls = payload_class(key, version, "AddPartitionsToTxnTopicResult")
    partition_cls = payload_class(key, version, "AddPartitionsToTxnPartitionResult")
    expected = build(response_class(key, version), throttle_time=datetime.timedelta(0), error_code=error, results_by_transaction=tuple(
        build(result_cls, transactional_id=txn_id, topic_results=tuple(
            build(topic_cls, name=name, results_by_partition=tuple(build(partition_cls, partition_index=i, partition_error_code=e)
                                                                   for i, e in partitions))
            for name, partitions in txn_topics))
        for txn_id, txn_topics in transactions))
    ours = encode_add_partitions_v4_response(correlation_id, int(error), [(txn_id, _plain(txn_topics)) for txn_id, txn_topics in transactions])
    assert ours == encode_response(key, version, correlation_id, expected)
    assert decode_response(key, version, ours[4:]) == (correlation_id, expected)
