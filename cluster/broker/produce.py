"""Produce: validate each partition's batch (framing, CRC, size), run the idempotent
producer's sequence checks, restamp and append, then answer (or not, for acks=0).

With one replica, acks=1 and acks=all are both answered right after the local append;
replication will park acks=all until the high watermark passes the batch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response
from cluster.broker.producer_state import Duplicate, Reject
from cluster.protocol.codec import Request
from cluster.protocol.produce_response import ProducePartitionResult, ProduceTopicResult, encode_produce_response
from cluster.storage.batch import InvalidBatchError, split_batches

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
VALID_ACKS = (0, 1, -1)


def handle_produce(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    now_ms = broker.clock.wall_ms()
    results: list[ProduceTopicResult] = []
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            if body.acks not in VALID_ACKS:
                partitions.append(ProducePartitionResult(data.index, ErrorCode.invalid_required_acks.value, error_message=f"acks={body.acks} is not 0, 1 or -1"))
            elif body.transactional_id is not None:
                partitions.append(ProducePartitionResult(data.index, ErrorCode.invalid_request.value, error_message="transactions are not supported yet"))
            else:
                partitions.append(_produce_partition(broker, topic.name, data.index, data.records, now_ms))
        results.append(ProduceTopicResult(topic.name, tuple(partitions)))

    probability = broker.config.test_drop_produce_response_probability
    if probability > 0.0 and broker.rng.random() < probability:
        reply(Response(None, close_connection=True, close_reason="test.drop.produce.response.probability fault: produce appended, response dropped"))
        return
    if body.acks == 0:
        reply(Response(None))
        return
    reply(Response([encode_produce_response(request.api_version, request.correlation_id, results)]))


def _produce_partition(broker: Broker, topic: str, index: int, records: bytes | None, now_ms: int) -> ProducePartitionResult:
    partition = broker.partition(topic, index)
    if partition is None:
        return ProducePartitionResult(index, ErrorCode.unknown_topic_or_partition.value)
    if partition.tp.topic.startswith("__"):
        return ProducePartitionResult(index, ErrorCode.invalid_topic_exception.value, error_message=f"{topic} is an internal topic")
    if not records:
        return ProducePartitionResult(index, ErrorCode.corrupt_message.value, error_message="produce request carries no record batch")
    if len(records) > broker.config.message_max_bytes:
        return ProducePartitionResult(
            index, ErrorCode.message_too_large.value, error_message=f"{len(records)} bytes exceed message.max.bytes={broker.config.message_max_bytes}"
        )
    try:
        batches = split_batches(records)
    except InvalidBatchError as error:
        log.info("produce to %s-%d rejected: %s", topic, index, error)
        return ProducePartitionResult(index, ErrorCode.corrupt_message.value, error_message=str(error))
    if len(batches) != 1:
        # Kafka requires exactly one batch per partition from Produce v3 on.
        return ProducePartitionResult(index, ErrorCode.invalid_record.value, error_message=f"{len(batches)} record batches; exactly one is allowed")
    header, batch = batches[0]
    verdict = partition.producers.check(header)
    if isinstance(verdict, Duplicate):
        return ProducePartitionResult(index, ErrorCode.none.value, verdict.base_offset, -1, partition.log_start_offset)
    if isinstance(verdict, Reject):
        log.info("produce to %s-%d rejected: %s", topic, index, verdict.message)
        return ProducePartitionResult(index, verdict.error.value, -1, -1, partition.log_start_offset, error_message=verdict.message)
    try:
        appended = partition.append_as_leader(batch, now_ms)
    except OSError as error:
        log.error("append to %s-%d failed: %s", topic, index, error)
        return ProducePartitionResult(index, ErrorCode.kafka_storage_error.value, error_message=str(error))
    return ProducePartitionResult(index, ErrorCode.none.value, appended.base_offset, -1, partition.log_start_offset)
