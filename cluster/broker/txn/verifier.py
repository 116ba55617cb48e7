"""KIP-890 part 1 on the partition leader's side: before the first transactional batch of a
producer is appended to a partition (no transaction of that producer open there), the leader
asks the transactional id's coordinator, with a verify-only AddPartitionsToTxn v4, whether
the partition is in the producer's ongoing transaction. A batch that arrives late, after its
transaction ended, is then refused instead of opening a transaction that never ends (a
hanging transaction that holds the last stable offset back).

Kafka's setting transaction.partition.verification.enable (default true) turns it on; the
produce path (cluster/broker/produce.py) calls `verify` and appends only on none."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint, Outbound, OutboundResult
from cluster.broker.partition import TopicPartition
from cluster.broker.topics import TRANSACTION_STATE_TOPIC
from cluster.broker.txn.state_log import partition_for_transactional_id
from cluster.metadata.image import MetadataImage
from cluster.protocol.txn_requests import VERIFY_VERSION, encode_verify_add_partitions
from cluster.protocol.versions import ApiKey

log = logging.getLogger(__name__)
VERIFY_CHANNEL = "txn-verification"
REQUEST_TIMEOUT_MS = 30_000
# Errors a producer may retry on: Kafka's produce path answers NOT_ENOUGH_REPLICAS when the
# coordinator cannot be reached or is moving, so the client retries the batch.
RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset({ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                              ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
                                              ErrorCode.request_timed_out, ErrorCode.unknown_server_error})


def produce_error(error: ErrorCode) -> ErrorCode:
    """The Produce error for a verification answer."""
    return ErrorCode.not_enough_replicas if error in RETRIABLE_AS_NOT_ENOUGH_REPLICAS else error


class PartitionVerifier:
    def __init__(self, outbound: Outbound, image: Callable[[], MetadataImage]) -> None:
        self._outbound = outbound
        self._image = image

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition, done: Callable[[ErrorCode], None]) -> None:
        """`done(none)` if `tp` is in the producer's ongoing transaction, else the error the
        Produce request gets (INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
        or NOT_ENOUGH_REPLICAS to retry)."""
        image = self._image()
        topic = image.topic(TRANSACTION_STATE_TOPIC)
        if topic is None or topic.num_partitions == 0:
            done(produce_error(ErrorCode.coordinator_not_available))
            return
        state = topic.partitions.get(partition_for_transactional_id(transactional_id, topic.num_partitions))
        leader = image.brokers.get(state.leader) if state is not None and state.has_leader else None
        if leader is None or not leader.usable:
            done(produce_error(ErrorCode.coordinator_not_available))
            return
        # Encoded by hand: one request per transactional Produce that opens a transaction here.
        body = encode_verify_add_partitions(transactional_id, producer_id, producer_epoch, [(tp.topic, (tp.partition,))])

        def answered(result: OutboundResult) -> None:
            if not result.ok:
                log.info("verifying %s for %s: %s", tp, transactional_id, result.error)
                done(produce_error(ErrorCode.request_timed_out))
                return
            if result.body.error_code is not ErrorCode.none:
                done(produce_error(result.body.error_code))
                return
            for txn in result.body.results_by_transaction:
                for topic_result in txn.topic_results:
                    for p in topic_result.results_by_partition:
                        if topic_result.name == tp.topic and p.partition_index == tp.partition:
                            done(produce_error(p.partition_error_code))
                            return
            done(produce_error(ErrorCode.unknown_server_error))

        self._outbound.send(Endpoint(leader.broker_id, leader.host, leader.port, VERIFY_CHANNEL), ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION,
                            body, answered, REQUEST_TIMEOUT_MS)
