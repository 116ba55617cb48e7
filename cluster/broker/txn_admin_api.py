"""DescribeTransactions v0 and ListTransactions v0-1 (KIP-664): what the transaction
coordinator of this broker knows, for admin clients. Each broker answers for the
__transaction_state partitions it coordinates, as Kafka's do (an admin client asks each
transactional id's coordinator, and every broker for a listing)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.broker.txn.metadata import TxnState
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

NO_THROTTLE = datetime.timedelta(0)
STATE_NAMES = {s.kafka_name: s for s in TxnState}


def _time(ms: int) -> datetime.datetime:
    # -1 (no ongoing transaction) is encoded as -1, as Kafka sends it.
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


def handle_describe_transactions(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    coordinator = broker.txn.coordinator
    state_cls = payload_class(ApiKey.DESCRIBE_TRANSACTIONS, version, "TransactionState")
    topic_cls = payload_class(ApiKey.DESCRIBE_TRANSACTIONS, version, "TopicData")
    states = []
    for transactional_id in request.body.transactional_ids:
        error = coordinator.coordinator_error(transactional_id)
        txn = coordinator.txns.get(transactional_id) if error is ErrorCode.none else None
        if error is ErrorCode.none and txn is None:
            error = ErrorCode.transactional_id_not_found
        if txn is None:
            # Kafka sets only the error code here; the other fields keep the schema's defaults (0).
            states.append(build(state_cls, error_code=error, transactional_id=transactional_id, transaction_state="",
                                transaction_timeout=datetime.timedelta(0), transaction_start_time=_time(0), producer_id=0,
                                producer_epoch=0, topics=()))
            continue
        topics: dict[str, list[int]] = {}
        for tp in sorted(txn.partitions, key=lambda t: (t.topic, t.partition)):
            topics.setdefault(tp.topic, []).append(tp.partition)
        states.append(build(state_cls, error_code=ErrorCode.none, transactional_id=transactional_id, transaction_state=txn.state.kafka_name,
                            transaction_timeout=datetime.timedelta(milliseconds=txn.timeout_ms), transaction_start_time=_time(txn.start_ms),
                            producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                            topics=tuple(build(topic_cls, topic=name, partitions=tuple(parts)) for name, parts in topics.items())))
    reply(broker.respond(request, build(response_class(ApiKey.DESCRIBE_TRANSACTIONS, version), throttle_time=NO_THROTTLE,
                                        transaction_states=tuple(states))))


def handle_list_transactions(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    body = request.body
    coordinator = broker.txn.coordinator
    state_cls = payload_class(ApiKey.LIST_TRANSACTIONS, version, "TransactionState")
    unknown = tuple(f for f in body.state_filters if f not in STATE_NAMES)
    wanted_states = {STATE_NAMES[f] for f in body.state_filters if f in STATE_NAMES}
    wanted_ids = {int(p) for p in body.producer_id_filters}
    # v1's duration filter: only transactions open longer than this many ms.
    min_duration_ms = int(getattr(body, "duration_filter", -1))
    now_ms = broker.clock.wall_ms()
    listed = []
    for txn in sorted(coordinator.txns.values(), key=lambda t: t.transactional_id):
        if coordinator.coordinator_error(txn.transactional_id) is not ErrorCode.none:
            continue
        if (body.state_filters and txn.state not in wanted_states) or (wanted_ids and txn.producer_id not in wanted_ids):
            continue
        if min_duration_ms >= 0 and (txn.start_ms < 0 or now_ms - txn.start_ms < min_duration_ms):
            continue
        listed.append(build(state_cls, transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                            transaction_state=txn.state.kafka_name))
    error = ErrorCode.coordinator_load_in_progress if coordinator.loading else ErrorCode.none
    reply(broker.respond(request, build(response_class(ApiKey.LIST_TRANSACTIONS, version), throttle_time=NO_THROTTLE, error_code=error,
                                        unknown_state_filters=unknown, transaction_states=tuple(listed))))
