"""Valid RecordBatch v2 bytes for storage tests. Storage never parses records, so the body
after the 61-byte header is arbitrary bytes; only the header and CRC-32C must be right."""

from __future__ import annotations

import struct

import crc32c

_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiiBI")


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
    if not body:
        # Distinct content per batch, so a read that returns the wrong batch is caught.
        seed = f"{base_offset}:{record_count}:{epoch};".encode()
        body = (seed * (body_size // len(seed) + 1))[:body_size]
    if max_timestamp_ms is None:
        max_timestamp_ms = base_timestamp_ms + record_count - 1
    after_crc = _AFTER_CRC.pack(
        attributes, record_count - 1, base_timestamp_ms, max_timestamp_ms,
        producer_id, producer_epoch, base_sequence, record_count,
    ) + body
    batch_length = 4 + 1 + 4 + len(after_crc)
    return _BEFORE_CRC.pack(base_offset, batch_length, epoch, 2, crc32c.crc32c(after_crc)) + after_crc
