"""Valid RecordBatch v2 bytes for storage tests. Storage reads records only for ListOffsets by
timestamp (record_times), so by default the body is real records (timestamps from the base to
the max timestamp, values padding the body to about `body_size`, distinct per batch); a test
may pass any `body` bytes where only the header and CRC-32C matter, and a batch of more than
MAX_REAL_RECORDS records gets an opaque body."""

from __future__ import annotations

import struct

import crc32c

_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiiBI")
MAX_REAL_RECORDS = 10_000  # a batch claiming more records (offset-range tests) gets an opaque body


def _varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _record(offset_delta: int, timestamp_delta_ms: int, value: bytes) -> bytes:
    body = b"\x00" + _varint(timestamp_delta_ms) + _varint(offset_delta) + _varint(-1) + _varint(len(value)) + value + _varint(0)
    return _varint(len(body)) + body


def make_batch(
    base_offset: int,
    record_count: int = 1,
    *,
    epoch: int = 0,
    body: bytes = b"",
    body_size: int = 0,
    base_timestamp_ms: int = 1_000,
    max_timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    if record_count < 1:
        raise ValueError("a batch holds at least one record")
    if max_timestamp_ms is None:
        max_timestamp_ms = base_timestamp_ms + record_count - 1
    # Distinct content per batch, so a read that returns the wrong batch is caught.
    seed = f"{base_offset}:{record_count}:{epoch};".encode()
    if not body and record_count > MAX_REAL_RECORDS:
        body = (seed * (body_size // len(seed) + 1))[:body_size]  # offsets-only batches: no records
    elif not body:
        deltas = [min(i, max(max_timestamp_ms - base_timestamp_ms, 0)) for i in range(record_count)]
        deltas[-1] = max(max_timestamp_ms - base_timestamp_ms, 0)  # the last record carries the max
        # Values pad the body to exactly body_size where the records fit in it (sizes decide
        # segment rolls in the tests), the last record taking what the others leave.
        values = [b""] * record_count
        for _ in range(4):  # varint lengths settle within a few rounds
            short = body_size - sum(len(_record(i, d, v)) for i, (d, v) in enumerate(zip(deltas, values)))
            if short == 0 or len(values[-1]) + short < 0:
                break
            size = len(values[-1]) + short
            values[-1] = (seed * (size // len(seed) + 1))[:size]
        body = b"".join(_record(i, delta, value) for i, (delta, value) in enumerate(zip(deltas, values)))
    after_crc = _AFTER_CRC.pack(
        attributes, record_count - 1, base_timestamp_ms, max_timestamp_ms,
        producer_id, producer_epoch, base_sequence, record_count,
    ) + body
    batch_length = 4 + 1 + 4 + len(after_crc)
    return _BEFORE_CRC.pack(base_offset, batch_length, epoch, 2, crc32c.crc32c(after_crc)) + after_crc
