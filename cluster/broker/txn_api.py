"""The transaction coordinator's client APIs: InitProducerId with a transactional id,
AddPartitionsToTxn (v0-3, the client's single-transaction form), AddOffsetsToTxn and EndTxn.
Each decodes the request, asks the coordinator (cluster.broker.txn) and answers in the
request's version.

KIP-588 gave fenced producers their own error, PRODUCER_FENCED, from these versions on;
older versions are told INVALID_PRODUCER_EPOCH, as Kafka's handlers do."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response
from cluster.broker.offsets_log import partition_for_group
from cluster.broker.partition import TopicPartition
from cluster.broker.topics import OFFSETS_TOPIC
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.txn_responses import encode_add_partitions_v4_response
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

NO_THROTTLE = datetime.timedelta(0)
PRODUCER_FENCED_FROM = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2,
                        ApiKey.TXN_OFFSET_COMMIT: 3}


def version_error(request: Request, error: ErrorCode) -> ErrorCode:
    if error is ErrorCode.producer_fenced and request.api_version < PRODUCER_FENCED_FROM[ApiKey(request.api_key)]:
        return ErrorCode.invalid_producer_epoch
    return error


def handle_init_producer_id(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    cls = response_class(ApiKey.INIT_PRODUCER_ID, request.api_version)

    def done(error: ErrorCode, producer_id: int, producer_epoch: int) -> None:
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=version_error(request, error), producer_id=producer_id,
                                            producer_epoch=producer_epoch)))

    timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
    broker.txn.coordinator.init_producer_id(body.transactional_id, timeout_ms, int(getattr(body, "producer_id", -1)),
                                            int(getattr(body, "producer_epoch", -1)), done)


def handle_add_partitions_to_txn(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    version = request.api_version
    if version >= 4:
        _handle_batched_add_partitions(broker, request, reply)
        return
    cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    topic_cls = payload_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnTopicResult")
    partition_cls = payload_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnPartitionResult")
    requested = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]

    def answer(errors: dict[tuple[str, int], ErrorCode]) -> None:
        topics: dict[str, list[object]] = {}
        for (name, index), error in errors.items():
            topics.setdefault(name, []).append(build(partition_cls, partition_index=index, partition_error_code=version_error(request, error)))
        results = tuple(build(topic_cls, name=name, results_by_partition=tuple(parts)) for name, parts in topics.items())
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_topic_v3_and_below=results,
                                            results_by_transaction=())))

    # Kafka checks the partitions exist before asking the coordinator: the unknown ones
    # fail, the others are not attempted.
    unknown = {tp for tp in requested if not _exists(broker, *tp)}
    if unknown:
        answer({tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted for tp in requested})
        return
    broker.txn.coordinator.add_partitions(body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
                                          int(body.v3_and_below_producer_epoch), [TopicPartition(t, p) for t, p in requested],
                                          lambda error: answer({tp: error for tp in requested}))


def _handle_batched_add_partitions(broker: Broker, request: Request, reply: Reply) -> None:
    """v4+, KIP-890's broker form: several transactions, each verify-only (a partition leader
    asking whether a producer's partition is in its ongoing transaction) or an add."""
    # v4, the only batched version served (versions.py): its answer is encoded by hand
    # (cluster/protocol/txn_responses.py), as every transaction's verifications get one each.
    transactions = list(request.body.transactions)
    results: dict[int, tuple[str, list[tuple[str, list[tuple[int, int]]]]]] = {}

    def answer() -> None:
        reply(Response([encode_add_partitions_v4_response(request.correlation_id, int(ErrorCode.none),
                                                          [results[i] for i in range(len(transactions))])]))

    def result(position: int, errors: dict[TopicPartition, ErrorCode]) -> None:
        topics: dict[str, list[tuple[int, int]]] = {}
        for tp, error in errors.items():
            topics.setdefault(tp.topic, []).append((tp.partition, int(error)))
        results[position] = (transactions[position].transactional_id, list(topics.items()))
        if len(results) == len(transactions):
            answer()

    if not transactions:
        answer()
        return
    coordinator = broker.txn.coordinator
    for position, txn in enumerate(transactions):
        wanted = [TopicPartition(t.name, int(p)) for t in txn.topics for p in t.partitions]
        if txn.verify_only:
            result(position, coordinator.verify_partitions(txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), wanted))
        else:
            coordinator.add_partitions(txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), wanted,
                                       lambda error, position=position, wanted=wanted: result(position, {tp: error for tp in wanted}))


def _exists(broker: Broker, topic: str, partition: int) -> bool:
    image = broker.topics.by_name(topic)
    return image is not None and partition in image.partitions


def handle_add_offsets_to_txn(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    cls = response_class(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version)

    def done(error: ErrorCode) -> None:
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=version_error(request, error))))

    # The group's offsets partition joins the transaction, so its commit marker makes the
    # transaction's offset commits visible.
    offsets = broker.topics.by_name(OFFSETS_TOPIC)
    count = offsets.num_partitions if offsets is not None and offsets.num_partitions > 0 else broker.config.offsets_topic_num_partitions
    tp = TopicPartition(OFFSETS_TOPIC, partition_for_group(body.group_id, count))
    broker.txn.coordinator.add_partitions(body.transactional_id, int(body.producer_id), int(body.producer_epoch), [tp], done)


def handle_end_txn(broker: Broker, request: Request, reply: Reply) -> None:
    body = request.body
    cls = response_class(ApiKey.END_TXN, request.api_version)

    def done(error: ErrorCode) -> None:
        reply(broker.respond(request, build(cls, throttle_time=NO_THROTTLE, error_code=version_error(request, error))))

    broker.txn.coordinator.end_txn(body.transactional_id, int(body.producer_id), int(body.producer_epoch), bool(body.committed), done)
