"""Group state as records in the internal topic __consumer_offsets (our own record format;
no client reads it).

A group's records go to partition `abs(java_hash(group_id)) % partitions`, as in Kafka, so
the later multi-broker coordinator is the leader of that partition. Keys and values are
small JSON documents: an offset commit per (group, topic, partition), and a group record
carrying the generation, its leader and members. Replaying the partitions on startup rebuilds every group's
committed offsets, generation and members.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any
from dataclasses import dataclass

from cluster.broker.groups import CommittedOffset, OffsetToCommit, StoredMember
from cluster.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Record, build_batch, read_records
from cluster.storage.batch import ATTR_TRANSACTIONAL


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    # Kafka's Utils.abs is `n & 0x7fffffff`, not math.abs (which overflows on MIN_VALUE).
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


def offset_commit_batch(group_id: str, offsets: list[OffsetToCommit], now_ms: int, base_offset: int, leader_epoch: int,
                        producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> bytes:
    """With a producer id: a TxnOffsetCommit, a transactional batch of that producer, which
    its transaction's marker commits or aborts."""
    records = [
        Record(
            json.dumps({"type": "offset", "group": group_id, "topic": o.topic, "partition": o.partition}, sort_keys=True).encode(),
            json.dumps({"offset": o.offset, "leader_epoch": o.leader_epoch, "metadata": o.metadata, "commit_timestamp_ms": now_ms}).encode(),
        )
        for o in offsets
    ]
    if producer_id != NO_PRODUCER_ID:
        return build_batch(records, base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=leader_epoch, attributes=ATTR_TRANSACTIONAL,
                           producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0)
    return build_batch(records, base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=leader_epoch)


def group_batch(group_id: str, generation_id: int, protocol_type: str | None, protocol_name: str | None, leader_id: str | None,
                members: Sequence[StoredMember], now_ms: int, base_offset: int, leader_epoch: int) -> bytes:
    """The group's generation with its leader and members, as Kafka's GroupMetadataValue keeps
    them, so a new coordinator after failover knows the members (no rebalance) and which member
    id each static instance holds (KIP-345)."""
    record = Record(
        json.dumps({"type": "group", "group": group_id}, sort_keys=True).encode(),
        json.dumps({"generation": generation_id, "protocol_type": protocol_type, "protocol": protocol_name, "leader": leader_id,
                    "members": [_member_json(m) for m in members]}).encode(),
    )
    return build_batch([record], base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=leader_epoch)


def tombstone_batch(group_id: str, partitions: list[tuple[str, int]], delete_group: bool, now_ms: int, base_offset: int, leader_epoch: int) -> bytes:
    """Null-valued records, as Kafka writes them: each offset of `partitions` is gone and,
    with `delete_group`, the group itself (its record last, so a replay forgets it after its
    offsets)."""
    records = [Record(json.dumps({"type": "offset", "group": group_id, "topic": t, "partition": p}, sort_keys=True).encode(), None)
               for t, p in partitions]
    if delete_group:
        records.append(Record(json.dumps({"type": "group", "group": group_id}, sort_keys=True).encode(), None))
    return build_batch(records, base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=leader_epoch)


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    committed: CommittedOffset | None  # None: a tombstone, the offset was deleted


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None = None
    members: tuple[StoredMember, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    group_id: str


def decode_batch(batch: bytes | memoryview, where: str) -> Iterator[OffsetRecord | GroupRecord | GroupTombstone]:
    for record in read_records(batch):
        if record.key is None:
            continue
        try:
            key = json.loads(record.key)
            if record.value is None:
                if key["type"] == "offset":
                    yield OffsetRecord(key["group"], key["topic"], int(key["partition"]), None)
                elif key["type"] == "group":
                    yield GroupTombstone(key["group"])
                continue
            value = json.loads(record.value)
            if key["type"] == "offset":
                yield OffsetRecord(
                    key["group"],
                    key["topic"],
                    int(key["partition"]),
                    CommittedOffset(int(value["offset"]), int(value["leader_epoch"]), str(value["metadata"]), int(value["commit_timestamp_ms"])),
                )
            elif key["type"] == "group":
                # Records written before members were stored have neither "leader" nor "members".
                yield GroupRecord(key["group"], int(value["generation"]), value["protocol_type"], value["protocol"], value.get("leader"),
                                  tuple(_member_from_json(m) for m in value.get("members", ())))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{where} offset {record.offset}: unreadable group record ({error})") from None


def _member_json(m: StoredMember) -> dict[str, Any]:
    return {"member_id": m.member_id, "instance_id": m.group_instance_id, "client_id": m.client_id, "client_host": m.client_host,
            "session_timeout_ms": m.session_timeout_ms, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "subscription": base64.b64encode(m.subscription).decode(), "assignment": base64.b64encode(m.assignment).decode()}


def _member_from_json(value: dict[str, Any]) -> StoredMember:
    return StoredMember(str(value["member_id"]), value["instance_id"], str(value["client_id"]), str(value["client_host"]),
                        int(value["session_timeout_ms"]), int(value["rebalance_timeout_ms"]),
                        base64.b64decode(value["subscription"]), base64.b64decode(value["assignment"]))
