"""Sends a transaction's commit or abort markers: a WriteTxnMarkers request to the leader of
each of its partitions (broker to broker, through the Outbound, as Kafka's
TransactionMarkerChannelManager does), retried from the current metadata until every
partition has its marker. The partition leaders answer once the marker is replicated."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint, Outbound, OutboundResult, Scheduler
from cluster.broker.partition import TopicPartition
from cluster.metadata.image import MetadataImage
from cluster.protocol.txn_requests import WRITE_TXN_MARKERS_VERSION, encode_write_txn_markers
from cluster.protocol.versions import ApiKey

log = logging.getLogger(__name__)

# kio has no v0 schema; v1 is v0 on the flexible encoding, and every broker here speaks it
# (WRITE_TXN_MARKERS_VERSION, from the hand-written encoder in cluster/protocol/txn_requests.py).
MARKER_CHANNEL = "txn-markers"
# Kafka's coordinator retries a failed marker on its next metadata update or send loop
# (about every 100 ms with its default retry backoff).
RETRY_BACKOFF_MS = 100
# Kafka's request.timeout.ms for the marker channel's NetworkClient.
REQUEST_TIMEOUT_MS = 30_000
# Partition errors after which the marker is sent again (to whoever leads then).
RETRIABLE = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                       ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
                       ErrorCode.coordinator_load_in_progress, ErrorCode.unknown_server_error})
# Errors that say this coordinator is stale (a newer coordinator epoch or producer epoch
# has written to the partition): it stops and leaves the transaction to the newer one.
FENCED = frozenset({ErrorCode.transaction_coordinator_fenced, ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced})


@dataclass(frozen=True, slots=True)
class MarkerJob:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


class MarkerSender:
    def __init__(self, outbound: Outbound, scheduler: Scheduler, image: Callable[[], MetadataImage]) -> None:
        self._outbound = outbound
        self._scheduler = scheduler
        self._image = image

    def send(self, job: MarkerJob, still_wanted: Callable[[], bool], done: Callable[[bool], None]) -> None:
        """Write `job`'s markers; `done(True)` once every partition has one (a deleted
        partition needs none), `done(False)` if a partition says this coordinator is fenced.
        Gives up silently once `still_wanted()` is false (this broker no longer coordinates
        the transaction; the new coordinator resends from its log)."""
        remaining = set(job.partitions)

        def attempt() -> None:
            if not still_wanted():
                return
            image = self._image()
            by_leader: dict[Endpoint, list[TopicPartition]] = {}
            for tp in sorted(remaining, key=lambda t: (t.topic, t.partition)):
                topic = image.topic(tp.topic)
                state = topic.partitions.get(tp.partition) if topic is not None else None
                if state is None:
                    log.info("%s: no marker for %s, which no longer exists", job.transactional_id, tp)
                    remaining.discard(tp)
                    continue
                leader = image.brokers.get(state.leader) if state.has_leader else None
                if leader is None or not leader.usable:
                    continue  # no leader now: try again after the backoff
                by_leader.setdefault(Endpoint(leader.broker_id, leader.host, leader.port, MARKER_CHANNEL), []).append(tp)
            if not remaining:
                done(True)
                return
            if not by_leader:
                self._scheduler.call_later(RETRY_BACKOFF_MS, attempt)
                return
            outstanding = [len(by_leader)]
            fenced = [False]

            def answered(sent: list[TopicPartition], result: OutboundResult) -> None:
                if result.ok:
                    for marker in result.body.markers:
                        for topic_result in marker.topics:
                            for p in topic_result.partitions:
                                tp = TopicPartition(topic_result.name, p.partition_index)
                                if p.error_code is ErrorCode.none:
                                    remaining.discard(tp)
                                elif p.error_code in FENCED:
                                    log.warning("%s: marker for %s refused with %s: this coordinator is stale", job.transactional_id, tp,
                                                p.error_code.name)
                                    fenced[0] = True
                                elif p.error_code not in RETRIABLE:
                                    log.warning("%s: marker for %s failed with %s; retrying", job.transactional_id, tp, p.error_code.name)
                else:
                    log.info("%s: WriteTxnMarkers for %s failed (%s); retrying", job.transactional_id, [str(t) for t in sent], result.error)
                outstanding[0] -= 1
                if outstanding[0] > 0:
                    return
                if fenced[0]:
                    done(False)
                elif not remaining:
                    done(True)
                else:
                    self._scheduler.call_later(RETRY_BACKOFF_MS, attempt)

            for endpoint, tps in by_leader.items():
                topics: dict[str, list[int]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(tp.partition)
                # Encoded by hand (one request per leader per transaction, between EndTxn and CompleteCommit).
                body = encode_write_txn_markers([(job.producer_id, job.producer_epoch, job.committed, job.coordinator_epoch,
                                                  sorted(topics.items()))])
                self._outbound.send(endpoint, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body,
                                    lambda result, sent=tps: answered(sent, result), REQUEST_TIMEOUT_MS)

        attempt()
