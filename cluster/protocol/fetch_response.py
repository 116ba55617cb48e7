"""Hand-written encoder for Fetch responses (v4-v16), byte-identical to kio's.

The result is a list of chunks for `transport.writelines`: headers packed with `struct`
and the stored batch bytes passed through untouched, so a multi-megabyte response costs no
copy of its records (about 20x cheaper than building one buffer).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from cluster.protocol import wire

NO_EPOCH_END_OFFSET = (-1, -1)
NO_LEADER = (-1, -1)
_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")


@dataclass(slots=True)
class FetchPartitionResult:
    partition_index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # (producer_id, first_offset); None is the null array
    aborted_transactions: tuple[tuple[int, int], ...] | None = None
    preferred_read_replica: int = -1
    # whole stored batches, concatenated on the wire; empty means empty bytes, never null
    records: list[bytes | memoryview] = field(default_factory=list)
    # (epoch, end_offset), v12+ tagged field 0; omitted when (-1, -1)
    diverging_epoch: tuple[int, int] = NO_EPOCH_END_OFFSET
    # (leader_id, leader_epoch), v12+ tagged field 1; omitted when (-1, -1)
    current_leader: tuple[int, int] = NO_LEADER

    @property
    def records_size_bytes(self) -> int:
        return sum(len(chunk) for chunk in self.records)


@dataclass(slots=True)
class FetchTopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[FetchPartitionResult] = field(default_factory=list)


def encode_fetch_response(
    api_version: int,
    correlation_id: int,
    topics: list[FetchTopicResult],
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> list[bytes | memoryview]:
    if not 4 <= api_version <= 16:
        raise ValueError(f"Fetch response v{api_version} is outside the encoder's range v4-v16")
    flexible = api_version >= 12
    chunks: list[bytes | memoryview] = []
    head = bytearray(b"\0\0\0\0")
    head += wire.INT32.pack(correlation_id)
    if flexible:
        head += b"\x00"
    head += wire.INT32.pack(throttle_time_ms)
    if api_version >= 7:
        head += wire.INT16.pack(error_code)
        head += wire.INT32.pack(session_id)
    head += wire.array_length(len(topics), flexible)
    total = 0
    for topic in topics:
        if api_version >= 13:
            head += topic.topic_id.bytes
        else:
            head += wire.string(topic.name, flexible)
        head += wire.array_length(len(topic.partitions), flexible)
        for p in topic.partitions:
            if api_version >= 5:
                head += _PARTITION_V5.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset)
            else:
                head += _PARTITION_V4.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            head += wire.array_length(None if aborted is None else len(aborted), flexible)
            if aborted is not None:
                for producer_id, first_offset in aborted:
                    head += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\x00"
            if api_version >= 11:
                head += wire.INT32.pack(p.preferred_read_replica)
            size = p.records_size_bytes
            head += wire.bytes_length(size, flexible)
            if size:
                chunks.append(head)
                total += len(head)
                chunks.extend(chunk for chunk in p.records if len(chunk))
                total += size
                head = bytearray()
            if flexible:
                tags: list[tuple[int, bytes]] = []
                if p.diverging_epoch != NO_EPOCH_END_OFFSET:
                    tags.append((0, _EPOCH_END.pack(*p.diverging_epoch) + b"\x00"))
                if p.current_leader != NO_LEADER:
                    tags.append((1, _LEADER.pack(*p.current_leader) + b"\x00"))
                head += wire.tagged_fields(tags) if tags else b"\x00"
        if flexible:
            head += b"\x00"
    if flexible:
        head += b"\x00"
    chunks.append(head)
    total += len(head)
    first = chunks[0]
    assert isinstance(first, bytearray)
    wire.INT32.pack_into(first, 0, total - 4)
    return chunks
