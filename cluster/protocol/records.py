"""A small RecordBatch v2 builder and reader for the broker's own records.

Client batches are never parsed below their header. The broker writes records of its own
(offset commits and group metadata in __consumer_offsets; later transaction markers), and
reads them back when it replays those logs, so it needs varint records, uncompressed, with
a correct CRC-32C.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from cluster.protocol import wire
from cluster.storage.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD, parse_header
from cluster.storage.txn_index import ControlMarker

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_ATTRIBUTES_AND_REST = struct.Struct(">hiqqqhii")


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ReadRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


def _nullable_bytes(data: bytes | None) -> bytes:
    if data is None:
        return wire.varint(-1)
    return wire.varint(len(data)) + data


def _encode_record(record: Record, offset_delta: int, timestamp_delta_ms: int) -> bytes:
    body = bytearray(b"\x00")  # record attributes, unused
    body += wire.varint(timestamp_delta_ms)
    body += wire.varint(offset_delta)
    body += _nullable_bytes(record.key)
    body += _nullable_bytes(record.value)
    body += wire.varint(len(record.headers))
    for name, value in record.headers:
        encoded = name.encode()
        body += wire.varint(len(encoded)) + encoded
        body += _nullable_bytes(value)
    return wire.varint(len(body)) + bytes(body)


def build_batch(
    records: list[Record],
    *,
    base_offset: int,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """An uncompressed batch with every record stamped at `timestamp_ms`."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    if attributes & 0x07:
        raise ValueError("the builder writes uncompressed batches only")
    body = b"".join(_encode_record(record, i, 0) for i, record in enumerate(records))
    tail = _ATTRIBUTES_AND_REST.pack(
        attributes, len(records) - 1, timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence, len(records)
    ) + body
    crc = crc32c.crc32c(tail)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    head = struct.pack(">qiiBI", base_offset, batch_length, partition_leader_epoch, 2, crc)
    assert len(head) == CRC_START
    return head + tail


def read_records(batch: bytes | memoryview) -> list[ReadRecord]:
    """Records of one uncompressed batch (as written by `build_batch`)."""
    header = parse_header(batch)
    if header.attributes & 0x07:
        raise ValueError("cannot read records of a compressed batch")
    view = memoryview(batch)
    pos = HEADER.size
    out: list[ReadRecord] = []
    for _ in range(header.record_count):
        length, pos = wire.read_varint(view, pos)
        end = pos + length
        pos += 1  # attributes
        timestamp_delta, pos = wire.read_varint(view, pos)
        offset_delta, pos = wire.read_varint(view, pos)
        key_length, pos = wire.read_varint(view, pos)
        key = None if key_length < 0 else bytes(view[pos : pos + key_length])
        pos += max(key_length, 0)
        value_length, pos = wire.read_varint(view, pos)
        value = None if value_length < 0 else bytes(view[pos : pos + value_length])
        pos = end
        out.append(ReadRecord(header.base_offset + offset_delta, header.base_timestamp_ms + timestamp_delta, key, value))
    return out


# Kafka's control records: key = (version int16 0, type int16: 0 abort, 1 commit), value of
# an end-transaction marker = (version int16 0, coordinator epoch int32).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def build_control_batch(*, committed: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                        base_offset: int, timestamp_ms: int, partition_leader_epoch: int = -1) -> bytes:
    """A transaction marker: a transactional control batch of one record."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if committed else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([Record(key, value)], base_offset=base_offset, timestamp_ms=timestamp_ms, partition_leader_epoch=partition_leader_epoch,
                       attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL, producer_id=producer_id, producer_epoch=producer_epoch)


def read_control_marker(batch: bytes | memoryview) -> ControlMarker | None:
    """The marker of a control batch; None when it is not an end-transaction marker (Kafka
    ignores other control record types) or cannot be read."""
    try:
        records = read_records(batch)
    except (ValueError, IndexError, struct.error):
        return None
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        return None
    _, kind = _CONTROL_KEY.unpack_from(records[0].key, 0)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    coordinator_epoch = -1
    value = records[0].value
    if value is not None and len(value) >= _MARKER_VALUE.size:
        _, coordinator_epoch = _MARKER_VALUE.unpack_from(value, 0)
    return ControlMarker(kind == CONTROL_COMMIT, coordinator_epoch)
