"""Each record's offset and timestamp inside one RecordBatch v2, for ListOffsets by timestamp
(Kafka answers with the first *record* at or after the time, not the first batch).

Storage otherwise never looks below a batch header. Records of an uncompressed or gzip batch
are read here; the other codecs (snappy, lz4, zstd) have no decoder in this environment, so
for those the caller keeps batch granularity."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from cluster.storage.batch import ATTR_COMPRESSION_MASK, ATTR_TIMESTAMP_TYPE, HEADER_SIZE, parse_header

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint (records use them for lengths and deltas)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise ValueError("record varint runs past the batch")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("record varint longer than 10 bytes")


def record_times(batch: bytes | memoryview) -> Iterator[tuple[int, int]] | None:
    """(offset, timestamp_ms) of every record in `batch`, in order; None if the batch's codec
    cannot be read here. With LogAppendTime every record carries the batch's max timestamp,
    as Kafka's DefaultRecord.timestamp() reports."""
    header = parse_header(batch)
    codec = header.attributes & ATTR_COMPRESSION_MASK
    view = memoryview(batch)[HEADER_SIZE : header.size_bytes]
    if codec == COMPRESSION_GZIP:
        body: bytes | memoryview = zlib.decompress(bytes(view), wbits=16 + zlib.MAX_WBITS)
    elif codec == COMPRESSION_NONE:
        body = view
    else:
        return None
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    return _walk(body, header.record_count, header.base_offset, header.base_timestamp_ms, header.max_timestamp_ms, log_append_time)


def _walk(body: bytes | memoryview, count: int, base_offset: int, base_timestamp_ms: int, max_timestamp_ms: int,
          log_append_time: bool) -> Iterator[tuple[int, int]]:
    pos = 0
    for _ in range(count):
        length, pos = _read_varint(body, pos)
        end = pos + length
        timestamp_delta, after_delta = _read_varint(body, pos + 1)  # skip the attributes byte
        offset_delta, _ = _read_varint(body, after_delta)
        yield base_offset + offset_delta, max_timestamp_ms if log_append_time else base_timestamp_ms + timestamp_delta
        pos = end
