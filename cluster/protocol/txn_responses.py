"""Hand-written encoders for the answers to the two broker-to-broker requests every
transaction sends (see txn_requests.py), byte-identical to kio's
(tests/cluster/protocol/test_txn_responses.py): WriteTxnMarkers v1, from each partition
leader once its markers are replicated, and AddPartitionsToTxn v4, from the coordinator to a
leader's verification. Each returns the whole frame: size, response header v1 (correlation id,
no tagged fields) and body.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from cluster.protocol import wire

_HEADER = struct.Struct(">iib")  # size, correlation id, the header's empty tagged fields
_PRODUCER_ID = struct.Struct(">q")
_PARTITION = struct.Struct(">ihb")  # partition index, error code, its empty tagged fields
_VERIFY_HEAD = struct.Struct(">ih")  # throttle_time_ms, error code

PartitionErrors = Sequence[tuple[str, Sequence[tuple[int, int]]]]
"""(topic name, ((partition index, error code), ...)), in the order they are written."""


def _topics(out: bytearray, topics: PartitionErrors) -> None:
    out += wire.array_length(len(topics), True)
    pack = _PARTITION.pack
    for name, partitions in topics:
        out += wire.string(name, True)
        out += wire.array_length(len(partitions), True)
        for index, error_code in partitions:
            out += pack(index, error_code, 0)
        out.append(0)  # the topic's tagged fields


def _frame(correlation_id: int, body: bytearray) -> bytes:
    return _HEADER.pack(4 + 1 + len(body), correlation_id, 0) + bytes(body)


def encode_write_txn_markers_response(correlation_id: int, markers: Sequence[tuple[int, PartitionErrors]]) -> bytes:
    """A WriteTxnMarkers v1 response frame; each marker is (producer_id, topics)."""
    out = bytearray(wire.array_length(len(markers), True))
    for producer_id, topics in markers:
        out += _PRODUCER_ID.pack(producer_id)
        _topics(out, topics)
        out.append(0)  # the marker's tagged fields
    out.append(0)  # the body's tagged fields
    return _frame(correlation_id, out)


def encode_add_partitions_v4_response(correlation_id: int, error_code: int, transactions: Sequence[tuple[str, PartitionErrors]]) -> bytes:
    """An AddPartitionsToTxn v4 response frame with no throttle; each transaction is
    (transactional_id, topics)."""
    out = bytearray(_VERIFY_HEAD.pack(0, error_code))
    out += wire.array_length(len(transactions), True)
    for transactional_id, topics in transactions:
        out += wire.string(transactional_id, True)
        _topics(out, topics)
        out.append(0)  # the transaction's tagged fields
    out.append(0)  # the body's tagged fields
    return _frame(correlation_id, out)
