"""The hand-written WriteTxnMarkers v1 and verify-only AddPartitionsToTxn v4 encoders agree
with kio byte for byte (whole frames, header included), and the broker's decoder reads back
what it was given."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import EntityType

from cluster.protocol.codec import build, decode_request, encode_request, payload_class, request_class
from cluster.protocol.txn_requests import VERIFY_VERSION, WRITE_TXN_MARKERS_VERSION, encode_verify_add_partitions, encode_write_txn_markers
from cluster.protocol.versions import ApiKey

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=0, max_size=300)  # past 127 bytes the compact length takes two varint bytes
topics = st.lists(st.tuples(names, st.lists(INT32, max_size=5)), max_size=4)
markers = st.lists(st.tuples(INT64, INT16, st.booleans(), INT32, topics), max_size=4)
client_ids = st.one_of(st.none(), st.text(max_size=20))


def _markers_kio(values: list) -> object:
    version = WRITE_TXN_MARKERS_VERSION
    marker_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarker", EntityType.request)
    topic_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerTopic", EntityType.request)
    return build(request_class(ApiKey.WRITE_TXN_MARKERS, version), markers=tuple(
        build(marker_cls, producer_id=pid, producer_epoch=epoch, transaction_result=committed, coordinator_epoch=coordinator_epoch,
              topics=tuple(build(topic_cls, name=name, partition_indexes=tuple(indexes)) for name, indexes in marker_topics))
        for pid, epoch, committed, coordinator_epoch, marker_topics in values))


def _verify_kio(transactional_id: str, producer_id: int, producer_epoch: int, verify_topics: list) -> object:
    version = VERIFY_VERSION
    txn_cls = payload_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnTransaction", EntityType.request)
    topic_cls = payload_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnTopic", EntityType.request)
    return build(request_class(ApiKey.ADD_PARTITIONS_TO_TXN, version), transactions=(build(
        txn_cls, transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
        topics=tuple(build(topic_cls, name=name, partitions=tuple(indexes)) for name, indexes in verify_topics)),))


@settings(max_examples=150, deadline=None)
@given(values=markers, correlation_id=INT32, client_id=client_ids)
def test_write_txn_markers_matches_kio(values: list, correlation_id: int, client_id: str | None) -> None:
    key, version = ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION
    ours = encode_request(key, version, correlation_id, client_id, encode_write_txn_markers(values))
    expected = _markers_kio(values)
    assert ours == encode_request(key, version, correlation_id, client_id, expected)
    assert decode_request(ours[4:]).body == expected


@settings(max_examples=150, deadline=None)
@given(transactional_id=names, producer_id=INT64, producer_epoch=INT16, verify_topics=topics, correlation_id=INT32, client_id=client_ids)
def test_verify_add_partitions_matches_kio(transactional_id: str, producer_id: int, producer_epoch: int, verify_topics: list,
                                           correlation_id: int, client_id: str | None) -> None:
    key, version = ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION
    ours = encode_request(key, version, correlation_id, client_id,
                          encode_verify_add_partitions(transactional_id, producer_id, producer_epoch, verify_topics))
    expected = _verify_kio(transactional_id, producer_id, producer_epoch, verify_topics)
    assert ours == encode_request(key, version, correlation_id, client_id, expected)
    assert decode_request(ours[4:]).body == expected
