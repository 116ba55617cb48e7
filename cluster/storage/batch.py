"""RecordBatch v2 headers: the only part of a record batch the broker reads.

Records stay opaque bytes end to end. The broker parses the fixed 61-byte header, checks
the CRC-32C (which covers bytes 21..end, i.e. from `attributes` on), and rewrites
`baseOffset` and `partitionLeaderEpoch`, both of which lie before the CRC'd range, so a
rewritten batch keeps a valid CRC without recomputing it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# baseOffset (8) + batchLength (4): batchLength counts the bytes after these 12.
LOG_OVERHEAD = 12
CRC_START = 21  # attributes onward are covered by the CRC
MAGIC_V2 = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class InvalidBatchError(ValueError):
    """A record batch whose framing, magic or CRC is wrong (Kafka: CORRUPT_MESSAGE)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at int32 max, as in Kafka's DefaultRecordBatch.
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


def parse_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at `pos`; raises InvalidBatchError if it cannot be a v2 batch."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatchError(f"record batch header truncated: {len(buf) - pos} of {HEADER_SIZE} bytes")
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise InvalidBatchError(f"record batch magic {header.magic}, only v2 is supported")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatchError(f"record batch length {header.batch_length} is shorter than its header")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise InvalidBatchError("record batch has a negative record count or offset delta")
    return header


def crc_is_valid(buf: bytes | memoryview, header: BatchHeader, pos: int = 0) -> bool:
    end = pos + header.size_bytes
    if end > len(buf):
        return False
    return crc32c.crc32c(memoryview(buf)[pos + CRC_START : end]) == header.crc


def split_batches(records: bytes | memoryview, *, verify_crc: bool = True) -> list[tuple[BatchHeader, memoryview]]:
    """Split a records blob (as in a Produce request) into whole batches, validating each."""
    view = memoryview(records)
    out: list[tuple[BatchHeader, memoryview]] = []
    pos = 0
    while pos < len(view):
        header = parse_header(view, pos)
        end = pos + header.size_bytes
        if end > len(view):
            raise InvalidBatchError(f"record batch at byte {pos} claims {header.size_bytes} bytes, {len(view) - pos} present")
        if verify_crc and not crc_is_valid(view, header, pos):
            raise InvalidBatchError(f"record batch at byte {pos} fails its CRC-32C check")
        out.append((header, view[pos:end]))
        pos = end
    return out


_OFFSET_AND_LENGTH = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")


def restamp(batch: bytes | memoryview, base_offset: int, partition_leader_epoch: int) -> bytearray:
    """A copy of `batch` with a new base offset and leader epoch (the CRC stays valid)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    _EPOCH.pack_into(out, 12, partition_leader_epoch)
    return out
