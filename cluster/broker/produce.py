"""Produce: validate each partition's batch (framing, CRC, size), run the idempotent
producer's sequence checks, restamp and append, then answer (or not, for acks=0).

acks=0/1 are answered after the local append. acks=all (-1) is refused before the append
with NOT_ENOUGH_REPLICAS when the ISR is below min.insync.replicas, and otherwise parked
until the high watermark passes the batch: then it succeeds (or gets
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell below min ISR meanwhile), or fails with
REQUEST_TIMED_OUT after the request's timeout, or NOT_LEADER_OR_FOLLOWER if leadership moves.
The response goes out once every partition in the request is decided.

Transactional batches (KIP-98) come in requests with a transactional id; the producer state
opens the producer's transaction at its first one, refuses an older epoch
(INVALID_PRODUCER_EPOCH, what Kafka answers since KIP-588 for every Produce version) and a
non-transactional batch while a transaction is open (INVALID_TXN_STATE). Control batches are
the coordinator's (WriteTxnMarkers) and never a client's.

KIP-890 part 1 (transaction.partition.verification.enable): a batch that would open its
producer's transaction on a partition is first verified with the coordinator, under the
verification guard the partition's producer state hands out (cluster/broker/producer_state.py);
the append then presents that guard, and is refused with INVALID_TXN_STATE if a marker (or any
transactional write of the producer) came in meanwhile: the answer may be stale by then.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response, TimerHandle
from cluster.broker.partition import Partition, TopicPartition
from cluster.broker.producer_state import Duplicate, Reject, VerificationGuard
from cluster.broker.topics import INTERNAL_TOPICS
from cluster.protocol.codec import Request
from cluster.protocol.produce_response import ProducePartitionResult, ProduceTopicResult, encode_produce_response
from cluster.storage.batch import BatchHeader, InvalidBatchError, split_batches

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
VALID_ACKS = (0, 1, -1)


def handle_produce(broker: Broker, request: Request, reply: Reply) -> None:
    """KIP-890 part 1 first (transaction.partition.verification.enable): a transactional batch
    that would open its producer's transaction on a partition is appended only if the
    coordinator says the partition is in the producer's ongoing transaction; a late batch of
    a transaction that ended is refused instead of opening one that never ends. Each
    verification runs under its partition's verification guard for the producer, which the
    append presents: a marker written while the answer was on its way drops the guard, and
    the append is refused."""
    body = request.body
    transactional_id = body.transactional_id
    wanted = _opening_batches(broker, body) if transactional_id is not None and broker.config.transaction_partition_verification_enable else []
    if not wanted:
        _handle_produce(broker, request, reply, {}, {})
        return
    refused: dict[tuple[str, int], ErrorCode] = {}
    guards: dict[tuple[str, int], VerificationGuard] = {}
    outstanding = [len(wanted)]

    def verified(key: tuple[str, int], error: ErrorCode) -> None:
        if error is not ErrorCode.none:
            log.info("produce to %s-%d by %r refused by verification: %s", key[0], key[1], transactional_id, error.name)
            refused[key] = error
        outstanding[0] -= 1
        if outstanding[0] == 0:
            _handle_produce(broker, request, reply, refused, guards)

    for topic, index, producer_id, producer_epoch, partition in wanted:
        # Before asking (Kafka's maybeStartTransactionVerification): what is written to the
        # partition from now until the append decides whether the answer still holds.
        guards[(topic, index)] = partition.producers.start_verification(producer_id)
        broker.txn.verifier.verify(transactional_id, producer_id, producer_epoch, TopicPartition(topic, index),
                                   lambda error, key=(topic, index): verified(key, error))


def _opening_batches(broker: Broker, body: object) -> list[tuple[str, int, int, int, Partition]]:
    """(topic, partition index, producer id, epoch, partition) of each batch that would open
    its producer's transaction on a partition this broker leads."""
    out = []
    for topic in body.topic_data:  # type: ignore[attr-defined]
        for data in topic.partition_data:
            partition = broker.partition(topic.name, data.index)
            if partition is None or partition.leader_error() is not None or not data.records:
                continue
            try:
                batches = split_batches(data.records)
            except InvalidBatchError:
                continue  # refused with its reason by the append path
            if len(batches) == 1 and opens_transaction(partition, batches[0][0]):
                header = batches[0][0]
                out.append((topic.name, data.index, header.producer_id, header.producer_epoch, partition))
    return out


def _handle_produce(broker: Broker, request: Request, reply: Reply, refused: dict[tuple[str, int], ErrorCode],
                    guards: dict[tuple[str, int], VerificationGuard]) -> None:
    body = request.body
    now_ms = broker.clock.wall_ms()
    results: list[list[ProducePartitionResult]] = []
    waits: list[tuple[int, int, Partition, int]] = []  # (topic index, partition index, partition, required offset)
    for topic in body.topic_data:
        partitions: list[ProducePartitionResult] = []
        for data in topic.partition_data:
            if body.acks not in VALID_ACKS:
                partitions.append(ProducePartitionResult(data.index, ErrorCode.invalid_required_acks.value, error_message=f"acks={body.acks} is not 0, 1 or -1"))
            elif (topic.name, data.index) in refused:
                partitions.append(ProducePartitionResult(data.index, refused[(topic.name, data.index)].value,
                                                         error_message="the partition is not in the producer's ongoing transaction (KIP-890)"))
            else:
                result, partition, required = _produce_partition(broker, topic.name, data.index, data.records, now_ms, body.acks,
                                                                 body.transactional_id, guards.get((topic.name, data.index)))
                partitions.append(result)
                if partition is not None:
                    waits.append((len(results), len(partitions) - 1, partition, required))
        results.append(partitions)

    def answer() -> None:
        probability = broker.config.test_drop_produce_response_probability
        if probability > 0.0 and broker.rng.random() < probability:
            reply(Response(None, close_connection=True, close_reason="test.drop.produce.response.probability fault: produce appended, response dropped"))
            return
        if body.acks == 0:
            reply(Response(None))
            return
        topics = [ProduceTopicResult(t.name, tuple(r)) for t, r in zip(body.topic_data, results)]
        reply(Response([encode_produce_response(request.api_version, request.correlation_id, topics)]))

    if not waits:
        answer()
        return
    outstanding = [len(waits)]
    timeout_ms = body.timeout.total_seconds() * 1000 if hasattr(body.timeout, "total_seconds") else float(body.timeout)
    pendings = []
    timer: list[TimerHandle] = []

    def settle(topic_index: int, partition_index: int, error: ErrorCode) -> None:
        if error != ErrorCode.none:
            old = results[topic_index][partition_index]
            results[topic_index][partition_index] = ProducePartitionResult(old.index, error.value, -1, -1, old.log_start_offset)
        outstanding[0] -= 1
        if outstanding[0] == 0:
            for handle in timer:
                handle.cancel()
            answer()

    for topic_index, partition_index, partition, required in waits:
        pendings.append((partition, partition.wait_for_commit(required, lambda e, t=topic_index, i=partition_index: settle(t, i, e))))
    if outstanding[0] > 0:
        def expire() -> None:
            for partition, pending in pendings:
                partition.cancel_wait(pending, ErrorCode.request_timed_out)

        timer.append(broker.scheduler.call_later(max(timeout_ms, 0.0), expire))


def _produce_partition(broker: Broker, topic: str, index: int, records: bytes | None, now_ms: int, acks: int,
                       transactional_id: str | None = None,
                       guard: VerificationGuard | None = None) -> tuple[ProducePartitionResult, Partition | None, int]:
    """The partition's result, and (for acks=all after an append) the partition and offset
    the answer must wait for."""
    partition = broker.partition(topic, index)
    if partition is None:
        return ProducePartitionResult(index, ErrorCode.unknown_topic_or_partition.value), None, 0
    if partition.tp.topic in INTERNAL_TOPICS:
        # As Kafka's ReplicaManager: clients may not append to internal topics.
        return ProducePartitionResult(index, ErrorCode.invalid_topic_exception.value, error_message=f"Cannot append to internal topic {topic}"), None, 0
    not_leader = partition.leader_error()
    if not_leader is not None:
        return ProducePartitionResult(index, not_leader.value), None, 0
    result, required = _append(broker, partition, topic, index, records, now_ms, acks, transactional_id, guard)
    if acks == -1 and result.error_code == ErrorCode.none.value and required > 0:
        return result, partition, required
    return result, None, 0


def _append(broker: Broker, partition: Partition, topic: str, index: int, records: bytes | None, now_ms: int,
            acks: int, transactional_id: str | None = None, guard: VerificationGuard | None = None) -> tuple[ProducePartitionResult, int]:
    """Validate and append; the result, and the offset the batch ends at (0: nothing to wait for).
    `guard`: the verification guard the batch was verified under, if it was."""
    if not records:
        return ProducePartitionResult(index, ErrorCode.corrupt_message.value, error_message="produce request carries no record batch"), 0
    if len(records) > broker.config.message_max_bytes:
        return ProducePartitionResult(
            index, ErrorCode.message_too_large.value, error_message=f"{len(records)} bytes exceed message.max.bytes={broker.config.message_max_bytes}"
        ), 0
    try:
        batches = split_batches(records)
    except InvalidBatchError as error:
        log.info("produce to %s-%d rejected: %s", topic, index, error)
        return ProducePartitionResult(index, ErrorCode.corrupt_message.value, error_message=str(error)), 0
    if len(batches) != 1:
        # Kafka requires exactly one batch per partition from Produce v3 on.
        return ProducePartitionResult(index, ErrorCode.invalid_record.value, error_message=f"{len(batches)} record batches; exactly one is allowed"), 0
    header, batch = batches[0]
    refused = _transactional_refusal(header, transactional_id)
    if refused is not None:
        return ProducePartitionResult(index, refused[0].value, -1, -1, partition.log_start_offset, error_message=refused[1]), 0
    if acks == -1 and partition.isr_below_min():
        # Checked before the producer state, as Kafka does: a retried duplicate is refused too.
        return ProducePartitionResult(index, ErrorCode.not_enough_replicas.value, -1, -1, partition.log_start_offset,
                                      error_message=f"ISR {list(partition.isr)} is smaller than min.insync.replicas={partition.settings.min_insync_replicas}"), 0
    verdict = partition.producers.check(header)
    if isinstance(verdict, Duplicate):
        # A retry of a batch we have: it is acknowledged once it is committed.
        return ProducePartitionResult(index, ErrorCode.none.value, verdict.base_offset, -1, partition.log_start_offset), verdict.base_offset + header.record_count
    if broker.config.transaction_partition_verification_enable:
        # KIP-890 part 1, checked after duplicates and before epoch and sequence, as Kafka's
        # analyzeAndValidateProducerState: a batch that would open a transaction here was
        # verified by handle_produce, and the answer still holds only under its guard.
        unverified = partition.producers.check_verified(header, guard)
        if unverified is not None:
            log.info("produce to %s-%d by %r refused: %s", topic, index, transactional_id, unverified.message)
            return ProducePartitionResult(index, unverified.error.value, -1, -1, partition.log_start_offset,
                                          error_message=unverified.message), 0
    if isinstance(verdict, Reject):
        log.info("produce to %s-%d rejected: %s", topic, index, verdict.message)
        return ProducePartitionResult(index, verdict.error.value, -1, -1, partition.log_start_offset, error_message=verdict.message), 0
    try:
        appended = partition.append_as_leader(batch, now_ms)
    except OSError as error:
        log.error("append to %s-%d failed: %s", topic, index, error)
        return ProducePartitionResult(index, ErrorCode.kafka_storage_error.value, error_message=str(error)), 0
    return ProducePartitionResult(index, ErrorCode.none.value, appended.base_offset, -1, partition.log_start_offset), appended.next_offset


def _transactional_refusal(header: BatchHeader, transactional_id: str | None) -> tuple[ErrorCode, str] | None:
    if header.is_control:
        # As Kafka's LogValidator: only the broker writes control batches (markers).
        return ErrorCode.invalid_record, "clients may not produce control batches"
    if header.is_transactional:
        if transactional_id is None:
            # Kafka authorizes transactional records by their transactional id: none, refused.
            return ErrorCode.transactional_id_authorization_failed, "transactional batch in a request without a transactional id"
        if not header.has_producer_id:
            return ErrorCode.invalid_record, "transactional batch without a producer id"
    return None


def opens_transaction(partition: Partition, header: BatchHeader) -> bool:
    """Would appending this batch open a transaction of its producer on this partition (the
    append KIP-890 part 1 verifies with the coordinator first)?"""
    if not header.is_transactional:
        return False
    entry = partition.producers.entry(header.producer_id)
    return entry is None or entry.current_txn_first_offset < 0 or header.producer_epoch > entry.producer_epoch
