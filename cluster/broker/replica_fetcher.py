"""The follower side of replication: one fetcher per leader broker (as Kafka's replica fetcher
threads), long-polling Fetch v15 with this broker's id and epoch for every partition it
follows from that leader, appending what comes back unchanged, and truncating where the
leader says our log diverges (KIP-320/595 truncate-on-fetch).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint, OutboundResult
from cluster.broker.fetch_sessions import FetchPlan, FetchSessionHandler, PartitionFetchState
from cluster.broker.log_dir import is_disk_failure
from cluster.broker.partition import FOLLOWER, Partition, TopicPartition
from cluster.protocol.fetch_request import VERSION as FETCH_REQUEST_VERSION, FetchPartitionRow, encode_replica_fetch
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import InvalidBatchError

if TYPE_CHECKING:
    from cluster.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)
FETCH_VERSION = FETCH_REQUEST_VERSION  # the hand-written encoder's version
_SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch,
                             ErrorCode.fetch_session_topic_id_error})


class ReplicaFetcher:
    def __init__(self, manager: ReplicaManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self._partitions: set[TopicPartition] = set()
        self._ordered: list[TopicPartition] = []  # self._partitions sorted once, not at every fetch
        self._in_flight = False
        self._backoff_pending = False
        self._stopped = False
        self._endpoint: Endpoint | None = None
        self._session = FetchSessionHandler()
        self._topic_ids: dict[int, uuid.UUID] = {}

    def poke(self) -> None:
        """Fetch now if nothing is in flight (new partitions, or truncation done)."""
        if not self._in_flight and not self._backoff_pending and not self._stopped:
            self._fetch()

    def stop(self) -> None:
        self._stopped = True
        if self._endpoint is not None:
            self.manager.outbound.close(self._endpoint)

    @property
    def partitions(self) -> set[TopicPartition]:
        return self._partitions

    @partitions.setter
    def partitions(self, tps: set[TopicPartition]) -> None:
        self._partitions = tps
        self._ordered = sorted(tps, key=lambda t: (t.topic, t.partition))

    def _fetch(self) -> None:
        manager = self.manager
        config = manager.config
        leader = manager.controller.image.brokers.get(self.leader_id)
        if leader is None or not manager.controller.registered:
            return
        # What we ask of each partition we follow from this leader, in one pass (this runs
        # after every answer: locals, no intermediate list).
        wanted: dict[Hashable, PartitionFetchState] = {}
        sent: dict[TopicPartition, int] = {}
        hosted = manager.partitions
        leader_id = self.leader_id
        truncate_to_high_watermark = config.replica_truncate_to_high_watermark
        max_bytes = config.replica_fetch_max_bytes
        topic_ids = self._topic_ids
        for tp in self._ordered:
            p = hosted.get(tp)
            if p is None or p.role != FOLLOWER or p.leader_id != leader_id or p.awaiting_metadata:
                continue
            state = p.state
            if state is None:
                continue
            topic_id = state.topic_id
            topic_int = topic_id.int  # keys hold the id's integer: it hashes without a Python call
            topic_ids[topic_int] = topic_id
            log_ = p.log
            epoch = p.leader_epoch
            # A plain tuple in PartitionFetchState's order (its constructor costs several
            # times the tuple's, for every followed partition at every fetch).
            wanted[(topic_int, tp.partition)] = (log_.log_end_offset, log_.log_start_offset, max_bytes, epoch,  # type: ignore[assignment]
                                -1 if truncate_to_high_watermark else log_.epochs.latest_epoch)
            sent[tp] = epoch
        if not wanted:
            return
        self._endpoint = Endpoint(leader.broker_id, leader.host, leader.port)
        # KIP-227: a full fetch opens a session; later ones name only the partitions whose
        # fetch position changed, and the leader answers only those with news.
        plan = self._session.build(wanted)
        # Encoded by hand (cluster/protocol/fetch_request.py), not as kio entities: this runs
        # after every answer from every leader.
        by_topic: dict[int, list[FetchPartitionRow]] = {}
        for key in plan.send:
            topic_int, index = key  # type: ignore[misc]
            fetch_offset, log_start_offset, partition_max_bytes, current_leader_epoch, last_fetched_epoch = wanted[key]
            row = (index, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes)
            rows = by_topic.get(topic_int)
            if rows is None:
                by_topic[topic_int] = [row]
            else:
                rows.append(row)
        forgotten: dict[int, list[int]] = {}
        for topic_int, index in plan.forget:  # type: ignore[misc]
            forgotten.setdefault(topic_int, []).append(index)
        body = encode_replica_fetch(replica_id=config.broker_id, replica_epoch=manager.controller.broker_epoch,
                                    max_wait_ms=config.replica_fetch_wait_max_ms, min_bytes=config.replica_fetch_min_bytes,
                                    max_bytes=config.replica_fetch_response_max_bytes, isolation_level=0, session_id=plan.session_id,
                                    session_epoch=plan.epoch,
                                    topics=[(topic_ids[topic_int], rows) for topic_int, rows in by_topic.items()],
                                    forgotten=[(topic_ids[topic_int], indexes) for topic_int, indexes in forgotten.items()])
        self._in_flight = True
        manager.outbound.send(self._endpoint, ApiKey.FETCH, FETCH_VERSION, body, lambda result: self._on_response(result, sent, plan),
                              config.replica_socket_timeout_ms + config.replica_fetch_wait_max_ms)

    def _on_response(self, result: OutboundResult, sent: dict[TopicPartition, int], plan: FetchPlan) -> None:
        self._in_flight = False
        if self._stopped or not self.manager.running:
            return
        if not result.ok:
            self._session.handle_error()
            log.debug("fetch from leader %d failed: %s", self.leader_id, result.error)
            self._backoff()
            return
        error = result.body.error_code
        if not self._session.handle_response(plan, error.value, int(result.body.session_id)):
            if error in _SESSION_ERRORS or error == ErrorCode.none:
                # Our session is gone or out of step: the next fetch, a full one, starts over.
                log.debug("fetch session with leader %d reset (%s)", self.leader_id, error.name)
                self._fetch()
            else:
                log.debug("fetch from leader %d failed: %s", self.leader_id, error.name)
                self._backoff()
            return
        with self.manager.wakeups:  # consumers' parked fetches are re-checked once, after all of it
            go_on = self._apply(result.body.responses, sent)
        if go_on:
            self._fetch()  # it does nothing if no partition is left to fetch

    def _apply(self, responses: Any, sent: dict[TopicPartition, int]) -> bool:
        """Handle each partition's answer; False if our log directory failed meanwhile."""
        now_ms = self.manager.clock.wall_ms()
        for topic in responses:
            image_topic = self.manager.controller.image.topics_by_id.get(topic.topic_id)
            if image_topic is None:
                continue
            for answer in topic.partitions:
                tp = TopicPartition(image_topic.name, int(answer.partition_index))
                p = self.manager.partitions.get(tp)
                if p is None or tp not in sent or p.role != FOLLOWER or p.leader_id != self.leader_id or p.leader_epoch != sent[tp]:
                    continue  # the partition changed role while the fetch was out
                try:
                    self._handle_partition(p, answer, now_ms)
                except (InvalidBatchError, ValueError) as error:
                    log.error("%s: bad data from leader %d: %s", tp, self.leader_id, error)
                except OSError as error:
                    if not is_disk_failure(error):
                        raise
                    log.error("%s: cannot store what leader %d sent: %s", tp, self.leader_id, error)
                    return False  # the log directory failed: the broker takes it offline (log_dir.py)
        return True

    def _handle_partition(self, p: Partition, answer: Any, now_ms: int) -> None:
        error = answer.error_code
        if error in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower,
                     ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
            # One of us has not seen the latest leader epoch yet: hold this partition back for
            # a backoff (new metadata also releases it), then try again.
            self._hold_back(p)
            return
        if error == ErrorCode.offset_out_of_range:
            leader_end = int(answer.high_watermark)
            if p.log_end_offset < int(answer.log_start_offset):
                log.info("%s: our log ends at %d, before the leader's log start %d: starting over there", p.tp, p.log_end_offset,
                         answer.log_start_offset)
                p.log.truncate_fully_and_start_at(int(answer.log_start_offset), now_ms=now_ms)
                p.high_watermark = p.log_end_offset
                p.rebuild_producer_state()
            else:
                log.warning("%s: fetch offset %d out of range at leader %d; truncating to its high watermark %d", p.tp, p.log_end_offset,
                            self.leader_id, leader_end)
                p.truncate(leader_end)
            return
        if error != ErrorCode.none:
            return
        diverging = answer.diverging_epoch
        if diverging is not None and int(diverging.epoch) >= 0 and not self.manager.config.replica_truncate_to_high_watermark:
            self._truncate_diverging(p, int(diverging.epoch), int(diverging.end_offset))
            return
        records = answer.records
        if records:
            p.append_as_follower(records, now_ms)
        p.update_follower_high_watermark(int(answer.high_watermark))
        # As Kafka's follower: the leader's log start (moved by DeleteRecords or retention)
        # becomes ours, as far as our log reaches.
        leader_start = min(int(answer.log_start_offset), p.log_end_offset)
        if leader_start > p.log_start_offset:
            p.log.delete_records_before(leader_start)
            p.high_watermark = max(p.high_watermark, leader_start)

    def _truncate_diverging(self, p: Partition, leader_epoch: int, leader_end: int) -> None:
        """The leader says our log leaves its log after `leader_epoch`, which it ends at
        `leader_end`. If we have that epoch, both logs agree up to the smaller of the two ends
        of it. If we do not (we wrote in epochs the leader never saw, and it in epochs we never
        saw), we can only trust our log up to the end of our own largest epoch below it; the
        next fetch asks again from there, stepping back one epoch at a time until the logs
        meet (KIP-279)."""
        before = p.log_end_offset
        local_epoch, local_end = p.log.epochs.end_offset_for(leader_epoch, before)
        if local_epoch == leader_epoch and local_end >= 0:
            target = min(leader_end, local_end)
        elif local_end >= 0:
            target = local_end
        else:
            target = min(leader_end, p.high_watermark)
        p.truncate(min(target, before))
        log.info("%s: log diverges from leader %d after epoch %d (leader's end of it %d; ours: epoch %d ending %d): truncated %d -> %d",
                 p.tp, self.leader_id, leader_epoch, leader_end, local_epoch, local_end, before, p.log_end_offset)
        if p.log_end_offset == before:
            # Nothing to cut, yet the leader still sees a divergence: do not spin on it.
            log.warning("%s: truncation for leader %d's diverging epoch %d changed nothing; backing off", p.tp, self.leader_id, leader_epoch)
            self._hold_back(p)

    def _hold_back(self, p: Partition) -> None:
        p.awaiting_metadata = True
        epoch = p.leader_epoch

        def release() -> None:
            if p.awaiting_metadata and p.leader_epoch == epoch:
                p.awaiting_metadata = False
                self.poke()

        self.manager.scheduler.call_later(self.manager.config.replica_fetch_backoff_ms, release)

    def _backoff(self) -> None:
        self._backoff_pending = True

        def retry() -> None:
            self._backoff_pending = False
            if not self._stopped and self.manager.running:
                self._fetch()

        self.manager.scheduler.call_later(self.manager.config.replica_fetch_backoff_ms, retry)
