"""The broker's side of the controller protocol (KRaft's BrokerLifecycleManager and metadata
listener): register, heartbeat, pull the metadata log, and forward the requests only the
controller can decide, always to the active controller of the quorum.

- Every request goes to the controller this broker believes active. A connection failure or
  timeout, a NOT_CONTROLLER answer (anywhere in it), or a metadata fetch answered
  NOT_LEADER_OR_FOLLOWER naming another leader moves it: to the named leader when one is
  named, else to the next voter of controller.quorum.voters in order. Requests refused with
  NOT_CONTROLLER are sent again to the new one after a backoff, within the request timeout
  (the refusing controller did not decide them); a request whose connection failed is
  reported to its caller, which retries as before (whether it was decided is unknown).
  The broker's session survives the move: the new active controller gives every registered
  broker a grace period.

- Registration carries a fresh incarnation id per process start and is retried until the
  controller accepts it (a restarted broker waits for its old session to expire, as in Kafka).
- Heartbeats go every broker.heartbeat.interval.ms with the offset of the last metadata
  record applied; the controller unfences the broker once it has caught up.
- Metadata is long-polled with Fetch on `__cluster_metadata-0`; every fetched response is
  applied in log order and reported once through `on_metadata(image, delta)`.
- A broker behind the controllers' log start (a snapshot moved it: a restarted broker starts
  from offset 0) is answered with the snapshot's id, as KRaft's leader answers an observer:
  it fetches the snapshot from the active controller with FetchSnapshot, in pieces, replaces
  its image with it (reporting what differs as the delta) and fetches the log from the
  snapshot's end.
- A broker whose position is past the controller's committed log end (possible only after
  the controllers lost committed metadata: an unsafe switch, or disks lying about fsync) is
  refused OFFSET_OUT_OF_RANGE. It rebuilds its image aside, from offset 0 or a snapshot, and
  swaps it in once the rebuild reaches the controller's high watermark (KRaft's observer
  truncates its log to the leader's and reloads its image): one warning per rebuild, and the
  old image keeps serving meanwhile.
- A controlled shutdown sets want_shut_down on heartbeats until the controller answers
  should_shut_down (it has moved this broker's leaderships away).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Clock, Endpoint, Outbound, OutboundResult, Rng, Scheduler, TimerHandle
from cluster.config import BrokerConfig
from cluster.metadata.image import MetadataDelta, MetadataImage, PartitionState
from cluster.metadata.image_codec import SnapshotError, decode_image
from cluster.metadata.image_diff import diff_images
from cluster.metadata.records import METADATA_TOPIC, MetadataRecordError, decode_record
from cluster.protocol.codec import build, payload_class, request_class
from cluster.protocol.records import read_records
from cluster.protocol.versions import ApiKey
from cluster.quorum import rpc as quorum_rpc
from cluster.storage.batch import InvalidBatchError, parse_header, split_batches

from kio.index import EntityType

log = logging.getLogger(__name__)
REGISTRATION_VERSION = 3  # v3 carries PreviousBrokerEpoch (KIP-966)
HEARTBEAT_VERSION = 0
ALTER_PARTITION_VERSION = 3
METADATA_FETCH_VERSION = 12
METADATA_FETCH_MAX_WAIT_MS = 500
RETRY_BACKOFF_MS = 100
SNAPSHOT_CHUNK_BYTES = 1 << 20  # per FetchSnapshot request


@dataclass(frozen=True)
class AlterPartitionResult:
    """The controller's answer to an AlterPartition. `unanswered`: no answer about the partition
    came (timeout, lost connection, or a request-level error worth retrying), so whether the
    controller applied it is unknown and the proposal is sent again."""

    error: ErrorCode
    state: PartitionState | None = None
    unanswered: bool = False


def mentions_not_controller(body: Any) -> bool:
    """Whether NOT_CONTROLLER appears anywhere in an answer (top level or on any item)."""
    if isinstance(body, tuple):
        return any(mentions_not_controller(item) for item in body)
    if not dataclasses.is_dataclass(body):
        return False
    for f in dataclasses.fields(body):
        value = getattr(body, f.name)
        if f.name == "error_code" and value == ErrorCode.not_controller:
            return True
        if (isinstance(value, tuple) or dataclasses.is_dataclass(value)) and mentions_not_controller(value):
            return True
    return False


@dataclass(frozen=True)
class ProducerIdBlock:
    first_id: int
    count: int


def _req(api_key: int, version: int, name: str) -> type:
    return payload_class(api_key, version, name, EntityType.request)


class ControllerClient:
    def __init__(self, config: BrokerConfig, clock: Clock, scheduler: Scheduler, outbound: Outbound, controller: Endpoint,
                 on_metadata: Callable[[MetadataImage, MetadataDelta], None], rng: Rng, voters: list[Endpoint] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.outbound = outbound
        # The quorum's voters in the order named; `controller` is the one believed active.
        self.voters = list(voters) if voters else [controller]
        if all(v.node_id != controller.node_id for v in self.voters):
            self.voters.insert(0, controller)
        self.controller = controller
        self.controller_moves = 0  # times this broker moved to another controller
        # Where the next metadata fetch starts: past control batches (the quorum's own
        # records, e.g. a leader change), which occupy offsets but change no metadata.
        self._fetch_offset = 0
        self.on_metadata = on_metadata
        self.image = MetadataImage()
        # While rebuilding (this broker was past the controller's committed log end), the image
        # being rebuilt: fetched records go there; `image` keeps serving until it is swapped in.
        self._rebuild: MetadataImage | None = None
        self.snapshots_loaded = 0  # controller snapshots installed (behind the log start)
        self.reloads = 0  # image rebuilds (past the committed log end)
        self.broker_epoch = -1
        # The epoch of the last clean shutdown (broker/clean_shutdown.py), -1 after a crash.
        self.previous_broker_epoch = -1
        self.incarnation_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        self.fenced = True
        self._running = False
        self._want_shut_down = False
        self._shutdown_done: Callable[[], None] | None = None
        self._timers: list[TimerHandle] = []
        self._heartbeat_in_flight = False
        self._heartbeat_timer: TimerHandle | None = None

    @property
    def last_applied_offset(self) -> int:
        return self.image.next_offset - 1

    @property
    def registered(self) -> bool:
        return self.broker_epoch >= 0

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self._register()
        self._fetch_metadata()

    def stop(self) -> None:
        self._running = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None

    def _later(self, delay_ms: float, action: Callable[[], None]) -> None:
        holder: list[TimerHandle] = []

        def fire() -> None:
            if holder[0] in self._timers:
                self._timers.remove(holder[0])
            if self._running:
                action()

        holder.append(self.scheduler.call_later(delay_ms, fire))
        self._timers.append(holder[0])

    def _move(self, failed: Endpoint, why: str, leader_id: int | None = None) -> None:
        """The controller at `failed` is not (or no longer) reachable as the active one: go to
        `leader_id` when it names another voter, else to the next voter. Ignored when the
        broker has already moved away from `failed` (several requests fail together)."""
        if failed.node_id != self.controller.node_id or len(self.voters) < 2:
            return
        named = next((v for v in self.voters if v.node_id == leader_id), None) if leader_id is not None else None
        if named is None or named.node_id == failed.node_id:
            index = next(i for i, v in enumerate(self.voters) if v.node_id == failed.node_id)
            named = self.voters[(index + 1) % len(self.voters)]
        self.controller = named
        self.controller_moves += 1
        log.info("broker %d: controller %d %s; now asking controller %d", self.config.broker_id, failed.node_id, why, named.node_id)

    def _send(self, api_key: int, version: int, body: Any, on_done: Callable[[OutboundResult], None], timeout_ms: int | None = None) -> None:
        """Send to the active controller; a NOT_CONTROLLER answer moves on and sends again
        (after a backoff, until the request timeout has passed since the first try)."""
        budget_ms = timeout_ms or self.config.controller_request_timeout_ms
        deadline_ns = self.clock.monotonic_ns() + budget_ms * 1_000_000

        def attempt() -> None:
            destination = self.controller

            def done(result: OutboundResult) -> None:
                if not result.ok:
                    self._move(destination, f"unreachable ({result.error})")
                elif mentions_not_controller(result.body):
                    self._move(destination, "is not the active controller")
                    if self._running and self.clock.monotonic_ns() + RETRY_BACKOFF_MS * 1_000_000 < deadline_ns:
                        self._later(RETRY_BACKOFF_MS, attempt)
                        return
                on_done(result)

            self.outbound.send(destination, api_key, version, body, done, budget_ms)

        attempt()

    def forward(self, api_key: int, version: int, body: Any, on_done: Callable[[OutboundResult], None]) -> None:
        """Send a client's admin request (CreatePartitions, ElectLeaders, AlterConfigs...) to
        the controller as the client sent it: the controller decides those."""
        self._send(api_key, version, body, on_done)

    # ---- registration and heartbeats ---------------------------------------------------

    def _register(self) -> None:
        listener = _req(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION, "Listener")
        body = build(request_class(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION), broker_id=self.config.broker_id,
                     cluster_id=self.config.cluster_id, incarnation_id=self.incarnation_id,
                     listeners=(listener(name="PLAINTEXT", host=self.config.advertised_host, port=self.config.advertised_port,
                                         security_protocol=0),),
                     features=(), rack=None, is_migrating_zk_broker=False, log_dirs=(),
                     previous_broker_epoch=self.previous_broker_epoch)

        def done(result: OutboundResult) -> None:
            if not self._running:
                return
            if result.ok and result.body.error_code == ErrorCode.none:
                self.broker_epoch = int(result.body.broker_epoch)
                log.info("broker %d registered with the controller: broker epoch %d", self.config.broker_id, self.broker_epoch)
                self._heartbeat()
                return
            reason = result.error if not result.ok else result.body.error_code.name
            log.info("broker %d registration not accepted yet (%s); retrying", self.config.broker_id, reason)
            self._later(min(self.config.broker_heartbeat_interval_ms, 500), self._register)

        self._send(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION, body, done)

    def _schedule_heartbeat(self) -> None:
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()

        def fire() -> None:
            self._heartbeat_timer = None
            if self._running:
                self._heartbeat()

        self._heartbeat_timer = self.scheduler.call_later(self.config.broker_heartbeat_interval_ms, fire)

    def _heartbeat(self) -> None:
        """Send a heartbeat now (one at a time; the next is scheduled when it is answered)."""
        if self._heartbeat_in_flight or not self.registered:
            return
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None
        self._heartbeat_in_flight = True
        body = build(request_class(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION), broker_id=self.config.broker_id, broker_epoch=self.broker_epoch,
                     current_metadata_offset=self.last_applied_offset, want_fence=False, want_shut_down=self._want_shut_down)

        def done(result: OutboundResult) -> None:
            self._heartbeat_in_flight = False
            if not self._running:
                return
            if result.ok and result.body.error_code == ErrorCode.stale_broker_epoch:
                log.warning("broker %d: the controller no longer knows broker epoch %d; registering again", self.config.broker_id, self.broker_epoch)
                self.broker_epoch = -1
                self._register()
                return
            if result.ok and result.body.error_code == ErrorCode.none:
                fenced = bool(result.body.is_fenced)
                if fenced != self.fenced:
                    log.info("broker %d is now %s", self.config.broker_id, "fenced" if fenced else "unfenced")
                self.fenced = fenced
                if self._want_shut_down and result.body.should_shut_down and self._shutdown_done is not None:
                    callback, self._shutdown_done = self._shutdown_done, None
                    callback()
                    return
            self._schedule_heartbeat()

        self._send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION, body, done)

    def begin_controlled_shutdown(self, on_done: Callable[[], None]) -> None:
        """Ask the controller to move this broker's leaderships away; `on_done` once it has
        (never called if the controller cannot be reached: the caller bounds the wait)."""
        self._want_shut_down = True
        self._shutdown_done = on_done
        if not self.registered:
            return
        self._heartbeat()

    # ---- metadata --------------------------------------------------------------------

    def _fetch_metadata(self) -> None:
        part = _req(ApiKey.FETCH, METADATA_FETCH_VERSION, "FetchPartition")
        topic = _req(ApiKey.FETCH, METADATA_FETCH_VERSION, "FetchTopic")
        body = build(request_class(ApiKey.FETCH, METADATA_FETCH_VERSION), replica_id=self.config.broker_id,
                     max_wait=datetime.timedelta(milliseconds=METADATA_FETCH_MAX_WAIT_MS), min_bytes=1, max_bytes=16 << 20,
                     isolation_level=0, session_id=0, session_epoch=-1,
                     topics=(build(topic, topic=METADATA_TOPIC, partitions=(build(part, partition=0, current_leader_epoch=-1,
                                                                                          fetch_offset=self._next_fetch_offset,
                                                                                          last_fetched_epoch=-1, log_start_offset=-1,
                                                                                          partition_max_bytes=8 << 20),)),),
                     forgotten_topics_data=(), rack_id="")

        destination = self.controller

        def done(result: OutboundResult) -> None:
            if not self._running:
                return
            if not result.ok:
                self._move(destination, f"unreachable for the metadata fetch ({result.error})")
                self._later(RETRY_BACKOFF_MS, self._fetch_metadata)
                return
            answer = result.body.responses[0].partitions[0] if result.body.responses and result.body.responses[0].partitions else None
            if answer is not None and answer.error_code in (ErrorCode.not_leader_or_follower, ErrorCode.not_controller,
                                                            ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
                leader = getattr(answer, "current_leader", None)
                leader_id = int(leader.leader_id) if leader is not None and int(leader.leader_id) >= 0 else None
                self._move(destination, f"does not lead the metadata quorum ({answer.error_code.name})", leader_id)
                self._later(RETRY_BACKOFF_MS, self._fetch_metadata)
                return
            if answer is not None and answer.error_code == ErrorCode.none and int(answer.snapshot_id.end_offset) >= 0:
                self._fetch_snapshot(destination, int(answer.snapshot_id.end_offset), int(answer.snapshot_id.epoch),
                                     int(answer.current_leader.leader_epoch), int(answer.high_watermark))
                return
            if answer is not None and answer.error_code == ErrorCode.offset_out_of_range \
                    and 0 <= int(answer.high_watermark) < self._next_fetch_offset:
                self._start_rebuild(int(answer.high_watermark))
                self._fetch_metadata()
                return
            try:
                applied = self._apply(result.body)
            except (MetadataRecordError, InvalidBatchError, ValueError) as error:
                log.error("broker %d: bad metadata from the controller: %s", self.config.broker_id, error)
                self._later(RETRY_BACKOFF_MS, self._fetch_metadata)
                return
            if applied and self.registered and self.fenced:
                self._heartbeat()  # report the catch-up at once, so unfencing is not a heartbeat interval late
            self._fetch_metadata()

        self.outbound.send(destination.on_channel("metadata"), ApiKey.FETCH, METADATA_FETCH_VERSION, body, done,
                           self.config.controller_request_timeout_ms + METADATA_FETCH_MAX_WAIT_MS)

    @property
    def _target(self) -> MetadataImage:
        """The image fetched records are applied to."""
        return self._rebuild if self._rebuild is not None else self.image

    @property
    def _next_fetch_offset(self) -> int:
        return max(self._target.next_offset, self._fetch_offset)

    def _apply(self, body: Any) -> bool:
        partition = body.responses[0].partitions[0]
        if partition.error_code != ErrorCode.none:
            raise ValueError(f"metadata fetch at {self._next_fetch_offset}: {partition.error_code.name}")
        records = partition.records or b""
        if not records:
            self._maybe_swap(int(partition.high_watermark))
            return False
        image = self._target
        delta = MetadataDelta()
        applied = False
        for _, batch in split_batches(records):
            header = parse_header(batch)
            if header.is_control:
                # The quorum's own record (a leader change): nothing for the image.
                self._fetch_offset = max(self._fetch_offset, header.next_offset)
                continue
            for record in read_records(bytes(batch)):
                if record.offset < image.next_offset:
                    continue
                delta.merge(image.apply(decode_record(record.value, f"at offset {record.offset}"), record.offset))
                applied = True
            self._fetch_offset = max(self._fetch_offset, header.next_offset)
        if self._rebuild is not None:
            return self._maybe_swap(int(partition.high_watermark))
        if applied:
            self.on_metadata(self.image, delta)
        return applied

    def _replace_image(self, image: MetadataImage, why: str) -> None:
        """Serve `image` from now on, telling the broker what differs from the old one."""
        old, self.image = self.image, image
        self._rebuild = None
        self._fetch_offset = max(image.next_offset, self._fetch_offset)
        log.info("broker %d: metadata image replaced at offset %d (%s)", self.config.broker_id, image.next_offset, why)
        delta = diff_images(old, image)
        delta.replaced = True
        self.on_metadata(self.image, delta)

    def _maybe_swap(self, high_watermark: int) -> bool:
        """A rebuild that reached the controller's high watermark replaces the image."""
        if self._rebuild is None or self._next_fetch_offset < high_watermark:
            return False
        self._replace_image(self._rebuild, f"rebuilt up to the controller's high watermark {high_watermark}")
        return True

    def _start_rebuild(self, high_watermark: int) -> None:
        if self._rebuild is not None:
            # Already rebuilding and ahead again: the controllers lost more. Start over.
            log.warning("broker %d: metadata rebuild at %d is past the controller's high watermark %d again; starting over",
                        self.config.broker_id, self._next_fetch_offset, high_watermark)
        else:
            log.warning("broker %d: metadata position %d is past the active controller's committed log end %d (the controllers "
                        "lost committed metadata); rebuilding the image from the controller", self.config.broker_id,
                        self._next_fetch_offset, high_watermark)
        self.reloads += 1
        self._rebuild = MetadataImage()
        self._fetch_offset = 0

    def _fetch_snapshot(self, destination: Endpoint, end_offset: int, snapshot_epoch: int, leader_epoch: int, high_watermark: int) -> None:
        """Fetch the controllers' snapshot (end_offset, snapshot_epoch) from `destination` in
        pieces, install it, then go back to fetching the log after it. Any refusal (a newer
        snapshot, another leader or epoch) or lost answer drops the download: the next
        metadata fetch says what to do."""
        log.info("broker %d: metadata position %d is below the controllers' log start; fetching snapshot (%d, %d) from controller %d",
                 self.config.broker_id, self._next_fetch_offset, end_offset, snapshot_epoch, destination.node_id)
        pieces: list[bytes] = []
        received = [0]

        def request_piece() -> None:
            body = quorum_rpc.fetch_snapshot_request(self.config.broker_id, leader_epoch, end_offset, snapshot_epoch, received[0],
                                                     SNAPSHOT_CHUNK_BYTES)
            self.outbound.send(destination.on_channel("metadata"), ApiKey.FETCH_SNAPSHOT, quorum_rpc.FETCH_SNAPSHOT_VERSION, body,
                               on_piece, self.config.controller_request_timeout_ms)

        def give_up(why: str, move: bool = False) -> None:
            log.info("broker %d: snapshot (%d, %d) not fetched from controller %d: %s", self.config.broker_id, end_offset,
                     snapshot_epoch, destination.node_id, why)
            if move:
                self._move(destination, f"unreachable for FetchSnapshot ({why})")
            self._later(RETRY_BACKOFF_MS, self._fetch_metadata)

        def on_piece(result: OutboundResult) -> None:
            if not self._running:
                return
            if not result.ok:
                give_up(str(result.error), move=True)
                return
            answer = quorum_rpc.first_partition(result.body)
            if answer is None or answer.error_code != ErrorCode.none:
                give_up(answer.error_code.name if answer is not None else f"answer without the metadata partition ({result.body.error_code.name})")
                return
            if int(answer.position) != received[0] or int(answer.snapshot_id.end_offset) != end_offset:
                give_up(f"piece at {int(answer.position)} of snapshot ending {int(answer.snapshot_id.end_offset)}, "
                        f"asked for {received[0]} of {end_offset}")
                return
            data = bytes(answer.unaligned_records or b"")
            pieces.append(data)
            received[0] += len(data)
            size = int(answer.size)
            if received[0] < size and data:
                request_piece()
                return
            if received[0] != size:
                give_up(f"snapshot of {size} bytes ended after {received[0]}")
                return
            try:
                image = decode_image(b"".join(pieces))
            except SnapshotError as error:
                log.error("broker %d: snapshot (%d, %d) unreadable: %s", self.config.broker_id, end_offset, snapshot_epoch, error)
                self._later(RETRY_BACKOFF_MS, self._fetch_metadata)
                return
            if image.next_offset != end_offset:
                log.error("broker %d: snapshot (%d, %d) holds an image ending at %d", self.config.broker_id, end_offset, snapshot_epoch,
                          image.next_offset)
                self._later(RETRY_BACKOFF_MS, self._fetch_metadata)
                return
            self.snapshots_loaded += 1
            self._fetch_offset = end_offset
            if self._rebuild is not None and end_offset < high_watermark:
                self._rebuild = image  # rebuilding: the log after the snapshot still to come
            else:
                self._replace_image(image, f"loaded the controllers' snapshot ending at {end_offset}")
                if self.registered and self.fenced:
                    self._heartbeat()
            self._fetch_metadata()

        request_piece()

    # ---- forwarded requests ----------------------------------------------------------

    def alter_partition(self, state: PartitionState, new_isr: list[tuple[int, int]], leader_recovering: bool,
                        on_done: Callable[[AlterPartitionResult], None]) -> None:
        version = ALTER_PARTITION_VERSION
        member = _req(ApiKey.ALTER_PARTITION, version, "BrokerState")
        data = _req(ApiKey.ALTER_PARTITION, version, "PartitionData")
        topic = _req(ApiKey.ALTER_PARTITION, version, "TopicData")
        body = build(request_class(ApiKey.ALTER_PARTITION, version), broker_id=self.config.broker_id, broker_epoch=self.broker_epoch,
                     topics=(topic(topic_id=state.topic_id, partitions=(build(
                         data, partition_index=state.partition, leader_epoch=state.leader_epoch,
                         new_isr_with_epochs=tuple(member(broker_id=b, broker_epoch=e) for b, e in new_isr),
                         leader_recovery_state=int(leader_recovering), partition_epoch=state.partition_epoch),)),))

        def done(result: OutboundResult) -> None:
            if not result.ok:
                on_done(AlterPartitionResult(ErrorCode.request_timed_out, unanswered=True))
                return
            if result.body.error_code != ErrorCode.none:
                # Request-level: the controller did not look at the partition. Stale broker
                # epoch (we re-registered) and not-controller are worth asking again, as Kafka's
                # AlterPartitionManager does.
                retry = result.body.error_code in (ErrorCode.stale_broker_epoch, ErrorCode.not_controller)
                on_done(AlterPartitionResult(result.body.error_code, unanswered=retry))
                return
            answer = result.body.topics[0].partitions[0]
            if answer.error_code != ErrorCode.none:
                on_done(AlterPartitionResult(answer.error_code))
                return
            new_state = PartitionState(state.topic, state.topic_id, state.partition, state.replicas, tuple(int(b) for b in answer.isr),
                                       int(answer.leader_id), int(answer.leader_epoch), int(answer.partition_epoch),
                                       bool(answer.leader_recovery_state))
            on_done(AlterPartitionResult(ErrorCode.none, new_state))

        self._send(ApiKey.ALTER_PARTITION, version, body, done)

    def create_topics(self, body: Any, api_version: int, on_done: Callable[[OutboundResult], None]) -> None:
        self._send(ApiKey.CREATE_TOPICS, api_version, body, on_done)

    def delete_topics(self, body: Any, api_version: int, on_done: Callable[[OutboundResult], None]) -> None:
        self._send(ApiKey.DELETE_TOPICS, api_version, body, on_done)

    def allocate_producer_ids(self, on_done: Callable[[ProducerIdBlock | None, str | None], None]) -> None:
        body = build(request_class(ApiKey.ALLOCATE_PRODUCER_IDS, 0), broker_id=self.config.broker_id, broker_epoch=self.broker_epoch)

        def done(result: OutboundResult) -> None:
            if not result.ok:
                on_done(None, result.error)
            elif result.body.error_code != ErrorCode.none:
                on_done(None, result.body.error_code.name)
            else:
                on_done(ProducerIdBlock(int(result.body.producer_id_start), int(result.body.producer_id_len)), None)

        self._send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, body, done)
