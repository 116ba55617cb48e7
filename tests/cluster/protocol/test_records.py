"""The record-batch builder writes batches an independent codec (kafka-python's) accepts,
and the reader reads back what kafka-python's builder writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cluster.protocol.records import Record, build_batch, read_records
from cluster.storage.batch import split_batches

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
records = st.lists(
    st.builds(Record, key=optional_bytes, value=optional_bytes, headers=st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3).map(tuple)),
    min_size=1,
    max_size=20,
)


@settings(max_examples=80, deadline=None)
@given(records=records, base_offset=st.integers(0, 2**62), timestamp_ms=st.integers(0, 2**42), producer_id=st.integers(-1, 2**40))
def test_built_batches_parse_with_kafka_python(records, base_offset, timestamp_ms, producer_id) -> None:
    data = build_batch(records, base_offset=base_offset, timestamp_ms=timestamp_ms, producer_id=producer_id, producer_epoch=0, base_sequence=0)
    ((header, _),) = split_batches(data)  # our own CRC check and framing
    assert header.record_count == len(records) and header.base_offset == base_offset
    parsed = DefaultRecordBatch(data)
    assert parsed.validate_crc()
    assert parsed.producer_id == producer_id
    got = [(r.offset, r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers]) for r in parsed]
    assert got == [(base_offset + i, r.key, r.value, timestamp_ms, list(r.headers)) for i, r in enumerate(records)]


@settings(max_examples=50, deadline=None)
@given(pairs=st.lists(st.tuples(optional_bytes, optional_bytes), min_size=1, max_size=20), base_ts=st.integers(0, 2**41), deltas=st.lists(st.integers(0, 10**6), min_size=20, max_size=20))
def test_reader_reads_kafka_python_batches(pairs, base_ts, deltas) -> None:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=10**7)
    for i, (key, value) in enumerate(pairs):
        builder.append(i, timestamp=base_ts + deltas[i], key=key, value=value, headers=[])
    data = bytes(builder.build())
    got = read_records(data)
    assert [(r.offset, r.timestamp_ms, r.key, r.value) for r in got] == [(i, base_ts + deltas[i], k, v) for i, (k, v) in enumerate(pairs)]
