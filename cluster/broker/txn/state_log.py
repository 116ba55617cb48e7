"""__transaction_state records: one per transition, keyed by transactional id, with the
fields of Kafka's TransactionLogKey/TransactionLogValue (producer id and epoch, the previous
ones, timeout, state, partitions, timestamps) as small JSON documents (our own encoding; no
client reads this topic). A null value is the tombstone of an expired transactional id.
Replaying a partition in order, the last record of each id is its state."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass

from cluster.broker.offsets_log import java_string_hash
from cluster.broker.partition import TopicPartition
from cluster.broker.txn.metadata import TxnMetadata, TxnState
from cluster.protocol.records import Record, build_batch, read_records


# The coordinator asks this several times per request (ownership, epoch checks); the hash is a
# Python loop over the id's UTF-16 code units, and a broker sees few distinct ids.
@functools.lru_cache(maxsize=4096)
def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """Kafka's TransactionStateManager.partitionFor: Utils.abs(hashCode) % partitions."""
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % num_partitions


def _key(transactional_id: str) -> bytes:
    return json.dumps({"transactional_id": transactional_id}).encode()


def txn_batch(txn: TxnMetadata, now_ms: int, base_offset: int, leader_epoch: int) -> bytes:
    value = {
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        "last_producer_id": txn.last_producer_id,
        "last_producer_epoch": txn.last_producer_epoch,
        "timeout_ms": txn.timeout_ms,
        "state": int(txn.state),
        "partitions": sorted([tp.topic, tp.partition] for tp in txn.partitions),
        "start_ms": txn.start_ms,
        "update_ms": txn.update_ms,
    }
    record = Record(_key(txn.transactional_id), json.dumps(value, sort_keys=True).encode())
    return build_batch([record], base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=leader_epoch)


def tombstone_batch(transactional_id: str, now_ms: int, base_offset: int, leader_epoch: int) -> bytes:
    return build_batch([Record(_key(transactional_id), None)], base_offset=base_offset, timestamp_ms=now_ms, partition_leader_epoch=leader_epoch)


@dataclass(frozen=True, slots=True)
class TxnTombstone:
    transactional_id: str


def decode_batch(batch: bytes | memoryview, where: str) -> Iterator[TxnMetadata | TxnTombstone]:
    for record in read_records(batch):
        if record.key is None:
            continue
        try:
            transactional_id = str(json.loads(record.key)["transactional_id"])
            if record.value is None:
                yield TxnTombstone(transactional_id)
                continue
            value = json.loads(record.value)
            yield TxnMetadata(
                transactional_id=transactional_id,
                producer_id=int(value["producer_id"]),
                producer_epoch=int(value["producer_epoch"]),
                last_producer_id=int(value["last_producer_id"]),
                last_producer_epoch=int(value["last_producer_epoch"]),
                timeout_ms=int(value["timeout_ms"]),
                state=TxnState(int(value["state"])),
                partitions=frozenset(TopicPartition(str(t), int(p)) for t, p in value["partitions"]),
                start_ms=int(value["start_ms"]),
                update_ms=int(value["update_ms"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{where} offset {record.offset}: unreadable transaction record ({error})") from None
