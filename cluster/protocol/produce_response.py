"""Hand-written encoder for Produce responses (v3-v10), byte-identical to kio's.

Produce is answered once per request, so its encoder is on the per-request hot path; kio's
generic encoder costs about 20 µs here, this one about 1.5 µs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cluster.protocol import wire

NO_LEADER = (-1, -1)


@dataclass(frozen=True, slots=True)
class ProducePartitionResult:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    # (batch_index, batch_index_error_message) per rejected batch, v8+
    record_errors: tuple[tuple[int, str | None], ...] = ()
    error_message: str | None = None
    # (leader_id, leader_epoch), v10+ tagged field; NO_LEADER is omitted
    current_leader: tuple[int, int] = NO_LEADER


@dataclass(frozen=True, slots=True)
class ProduceTopicResult:
    name: str
    partitions: tuple[ProducePartitionResult, ...] = field(default_factory=tuple)


_V3_FIELDS = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_V5_FIELDS = struct.Struct(">ihqqq")  # ... and log_start_offset


def encode_produce_response(
    api_version: int, correlation_id: int, topics: list[ProduceTopicResult] | tuple[ProduceTopicResult, ...], throttle_time_ms: int = 0
) -> bytes:
    if not 3 <= api_version <= 10:
        raise ValueError(f"Produce response v{api_version} is outside the encoder's range v3-v10")
    flexible = api_version >= 9
    out = bytearray(b"\0\0\0\0")
    out += wire.INT32.pack(correlation_id)
    if flexible:
        out += b"\x00"  # response header v1: no tagged fields
    out += wire.array_length(len(topics), flexible)
    for topic in topics:
        out += wire.string(topic.name, flexible)
        out += wire.array_length(len(topic.partitions), flexible)
        for p in topic.partitions:
            if api_version >= 5:
                out += _V5_FIELDS.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
            else:
                out += _V3_FIELDS.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if api_version >= 8:
                out += wire.array_length(len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += wire.INT32.pack(batch_index)
                    out += wire.nullable_string(message, flexible)
                    if flexible:
                        out += b"\x00"
                out += wire.nullable_string(p.error_message, flexible)
            if flexible:
                if api_version >= 10 and p.current_leader != NO_LEADER:
                    out += wire.tagged_fields([(0, wire.INT32.pack(p.current_leader[0]) + wire.INT32.pack(p.current_leader[1]) + b"\x00")])
                else:
                    out += b"\x00"
        if flexible:
            out += b"\x00"
    out += wire.INT32.pack(throttle_time_ms)
    if flexible:
        out += b"\x00"
    wire.INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
