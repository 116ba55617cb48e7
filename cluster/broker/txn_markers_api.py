"""WriteTxnMarkers (API key 27, KIP-98): the transaction coordinator asks each partition
leader to end a producer's transaction by appending a marker (a transactional control batch
with the producer id and epoch and one record: commit or abort, and the coordinator epoch).

Per partition, as Kafka's ReplicaManager appends markers with acks=all: refused if this broker
does not lead it (NOT_LEADER_OR_FOLLOWER; UNKNOWN_TOPIC_OR_PARTITION when the cluster has no
such partition), if the ISR is below min.insync.replicas (NOT_ENOUGH_REPLICAS), if the marker's
producer epoch is older than the partition's (INVALID_PRODUCER_EPOCH) or its coordinator
epoch older than the last marker's for that producer (TRANSACTION_COORDINATOR_FENCED);
otherwise appended and answered once the high watermark passes it (the marker is on the
ISR), or with the error that ends the wait (leadership lost, timeout). The response goes out
once every partition is decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response, TimerHandle
from cluster.broker.partition import PendingAck, Partition, TopicPartition
from cluster.protocol.codec import Request
from cluster.protocol.txn_responses import encode_write_txn_markers_response

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
# The request has no timeout of its own; Kafka bounds the acks=all wait by the broker's
# request timeout. The coordinator resends on REQUEST_TIMED_OUT.
MARKER_COMMIT_TIMEOUT_MS = 30_000


@dataclass(slots=True)
class _PartitionResult:
    tp: TopicPartition
    error: ErrorCode


def handle_write_txn_markers(broker: Broker, request: Request, reply: Reply) -> None:
    now_ms = broker.clock.wall_ms()
    # Per marker (producer), per partition: its result; waits reference them by position.
    results: list[list[_PartitionResult]] = []
    waits: list[tuple[_PartitionResult, Partition, int]] = []
    for marker in request.body.markers:
        out: list[_PartitionResult] = []
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, int(index))
                result = _PartitionResult(tp, ErrorCode.none)
                out.append(result)
                partition, required = _write_marker(broker, tp, int(marker.producer_id), int(marker.producer_epoch),
                                                    bool(marker.transaction_result), int(marker.coordinator_epoch), now_ms, result)
                if partition is not None:
                    waits.append((result, partition, required))
        results.append(out)

    def answer() -> None:
        # v1, the only version served (versions.py), encoded by hand (cluster/protocol/txn_responses.py).
        markers = []
        for marker, out in zip(request.body.markers, results):
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for result in out:
                by_topic.setdefault(result.tp.topic, []).append((result.tp.partition, int(result.error)))
            markers.append((int(marker.producer_id), list(by_topic.items())))
        reply(Response([encode_write_txn_markers_response(request.correlation_id, markers)]))

    if not waits:
        answer()
        return
    outstanding = [len(waits)]
    timer: list[TimerHandle] = []
    pendings: list[tuple[Partition, PendingAck]] = []

    def settle(result: _PartitionResult, error: ErrorCode) -> None:
        result.error = error
        outstanding[0] -= 1
        if outstanding[0] == 0:
            for handle in timer:
                handle.cancel()
            answer()

    for result, partition, required in waits:
        pendings.append((partition, partition.wait_for_commit(required, lambda e, r=result: settle(r, e))))
    if outstanding[0] > 0:
        def expire() -> None:
            for partition, pending in pendings:
                partition.cancel_wait(pending, ErrorCode.request_timed_out)

        timer.append(broker.scheduler.call_later(MARKER_COMMIT_TIMEOUT_MS, expire))


def _write_marker(broker: Broker, tp: TopicPartition, producer_id: int, producer_epoch: int, committed: bool,
                  coordinator_epoch: int, now_ms: int, result: _PartitionResult) -> tuple[Partition | None, int]:
    """Append the marker to `tp` or set `result.error`; the partition and offset to wait for."""
    partition = broker.partition(tp.topic, tp.partition)
    if partition is None:
        info = broker.topics.by_name(tp.topic)
        known = info is not None and tp.partition in info.partitions
        result.error = ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition
        return None, 0
    not_leader = partition.leader_error()
    if not_leader is not None:
        result.error = not_leader
        return None, 0
    if partition.isr_below_min():
        result.error = ErrorCode.not_enough_replicas
        return None, 0
    refused = partition.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
    if refused is not None:
        log.info("marker on %s refused: %s", tp, refused.message)
        result.error = refused.error
        return None, 0
    try:
        header = partition.append_marker(committed=committed, producer_id=producer_id, producer_epoch=producer_epoch,
                                         coordinator_epoch=coordinator_epoch, now_ms=now_ms)
    except OSError as error:
        log.error("marker append to %s failed: %s", tp, error)
        result.error = ErrorCode.kafka_storage_error
        return None, 0
    # Pending TxnOffsetCommit offsets of this producer become visible (commit) or go (abort).
    broker.on_txn_marker(tp, producer_id, producer_epoch, committed)
    return partition, header.next_offset
