"""Drives the sans-I/O controller core the way its runtime does: real request frames in
(encoded by kio, decoded with the controller's own version table), real response frames
out, on a MemoryDisk with virtual time and a seeded RNG. A restart builds a new Controller
on the same disk, after a clean shutdown or a crash (timers die, unfsynced bytes are lost).

Brokers are played by the test: `register`, `heartbeat`, `keep_alive` (heartbeats while
virtual time passes), so every decision the controller takes can be provoked exactly.
"""

from __future__ import annotations

import datetime
import random
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo, Response, TimerHandle
from cluster.controller.config import ControllerConfig
from cluster.controller.core import Controller
from cluster.controller.quorum_node import quorum_versions, raft_factory
from cluster.metadata.image import PartitionState
from cluster.metadata.records import METADATA_TOPIC, MetadataRecord, decode_record
from cluster.protocol.codec import build, decode_request, decode_response, encode_request, payload_class, request_class
from cluster.protocol.records import read_records
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.storage.batch import parse_header, split_batches
from cluster.storage.disk import MemoryDisk

DATA_DIR = "/controller"
CONTROLLER_ID = 1000
HOST = "127.0.0.9"
PORT = 9093
CLUSTER_ID = "logquake-cluster"
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 500
STEP_MS = 10


def req(api_key: int, version: int, name: str) -> type:
    return payload_class(api_key, version, name, EntityType.request)


class IncarnationScheduler:
    """The scheduler of one controller process: its timers die with it."""

    def __init__(self, scheduler: VirtualScheduler) -> None:
        self._scheduler = scheduler
        self.alive = True

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        def fire() -> None:
            if self.alive:
                callback()

        return self._scheduler.call_later(delay_ms, fire)


class NoPeers:
    """The outbound of a single voter: it has no peer to send to, so any send is a bug."""

    def send(self, destination: Any, api_key: int, api_version: int, body: Any, on_done: Any, timeout_ms: int) -> None:
        raise AssertionError(f"a single voter sent API {api_key} to {destination}")

    def close(self, destination: Any) -> None:
        pass


class Answer:
    def __init__(self) -> None:
        self.response: Response | None = None

    def __call__(self, response: Response) -> None:
        assert self.response is None, "answered twice"
        self.response = response


class ControllerDriver:
    def __init__(self, properties: dict[str, str] | None = None, seed: int = 7) -> None:
        self.disk = MemoryDisk()
        self.clock = VirtualClock()
        self.scheduler = VirtualScheduler(self.clock)
        self.properties = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), **(properties or {})}
        self.seed = seed
        self._correlation = 0
        self.epochs: dict[int, int] = {}  # broker id -> its current broker epoch
        self.incarnations: dict[int, uuid.UUID] = {}
        self._node: IncarnationScheduler | None = None
        self.controller = self._start()

    # ---- process lifecycle -------------------------------------------------------------

    def _start(self) -> Controller:
        self._node = IncarnationScheduler(self.scheduler)
        config = ControllerConfig.from_properties(CONTROLLER_ID, HOST, PORT, DATA_DIR, self.properties)
        rng = random.Random(self.seed)
        # The only voter of its metadata quorum, as every single controller runs: it commits
        # what it has fsynced and never sends to a peer.
        factory = raft_factory(config, self.disk, self.clock, self._node, random.Random(rng.getrandbits(64)), NoPeers())
        controller = Controller(config, self.disk, self.clock, self._node, rng, factory, quorum_versions())
        controller.start()
        self.run_until(lambda: controller.is_active, 5_000, "the single controller leading its quorum")
        return controller

    def restart(self, crash: bool = False) -> None:
        assert self._node is not None
        if crash:
            self.disk.crash()
        else:
            self.controller.shutdown()
        self._node.alive = False
        self.seed += 1
        self.controller = self._start()

    def close(self) -> None:
        if self._node is not None and self._node.alive:
            self.controller.shutdown()
            self._node.alive = False

    # ---- requests ----------------------------------------------------------------------

    def send(self, api_key: int, version: int, body: Any) -> Answer:
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, "tester", body)
        request = decode_request(frame[4:], supported=self.controller.versions)
        answer = Answer()
        self.controller.handle(request, ClientInfo("tester", f"/{HOST}"), answer)
        return answer

    def result(self, api_key: int, version: int, answer: Answer) -> Any:
        assert answer.response is not None and answer.response.chunks is not None, f"no response to API {api_key}: {answer.response}"
        frame = b"".join(bytes(c) for c in answer.response.chunks)
        correlation, body = decode_response(api_key, version, frame[4:])
        return body

    def call(self, api_key: int, version: int, body: Any, wait_ms: float = 5000) -> Any:
        answer = self.send(api_key, version, body)
        self.run_until(lambda: answer.response is not None, wait_ms, f"an answer to API {api_key} v{version}")
        return self.result(api_key, version, answer)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        return self.call(api_key, version, build(request_class(api_key, version), **fields))

    def run_until(self, predicate: Callable[[], bool], limit_ms: float, what: str) -> None:
        waited = 0.0
        while not predicate():
            if waited >= limit_ms:
                raise AssertionError(f"{what}: not reached within {limit_ms:.0f} virtual ms")
            self.scheduler.advance(STEP_MS)
            waited += STEP_MS

    # ---- brokers -----------------------------------------------------------------------

    def register(self, broker_id: int, incarnation: uuid.UUID | None = None, version: int = 2, port: int | None = None,
                 previous_broker_epoch: int = -1) -> Any:
        incarnation = incarnation or uuid.UUID(int=random.Random(broker_id * 7919 + self._correlation).getrandbits(128), version=4)
        listener = req(ApiKey.BROKER_REGISTRATION, version, "Listener")
        body = self.request(ApiKey.BROKER_REGISTRATION, version, broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=incarnation,
                            listeners=(listener(name="PLAINTEXT", host=f"127.0.0.{10 + broker_id}", port=port or 9092, security_protocol=0),),
                            features=(), rack=None, is_migrating_zk_broker=False, log_dirs=(), previous_broker_epoch=previous_broker_epoch)
        if body.error_code == ErrorCode.none:
            self.epochs[broker_id] = int(body.broker_epoch)
            self.incarnations[broker_id] = incarnation
        return body

    def heartbeat(self, broker_id: int, *, epoch: int | None = None, offset: int | None = None, want_shut_down: bool = False,
                  want_fence: bool = False, version: int = 1) -> Any:
        return self.request(ApiKey.BROKER_HEARTBEAT, version, broker_id=broker_id,
                            broker_epoch=self.epochs[broker_id] if epoch is None else epoch,
                            current_metadata_offset=self.end_offset - 1 if offset is None else offset,
                            want_fence=want_fence, want_shut_down=want_shut_down, offline_log_dirs=())

    def start_brokers(self, broker_ids: Iterable[int]) -> None:
        """Register and unfence each broker (caught up with the whole log)."""
        for broker_id in broker_ids:
            assert self.register(broker_id).error_code == ErrorCode.none
            body = self.heartbeat(broker_id)
            assert body.error_code == ErrorCode.none and not body.is_fenced, body

    def keep_alive(self, broker_ids: Iterable[int], duration_ms: float) -> None:
        """Let `duration_ms` pass while `broker_ids` heartbeat every HEARTBEAT_INTERVAL_MS."""
        live = list(broker_ids)
        waited = 0.0
        while waited < duration_ms:
            step = min(HEARTBEAT_INTERVAL_MS, duration_ms - waited)
            self.scheduler.advance(step)
            waited += step
            for broker_id in live:
                assert self.heartbeat(broker_id).error_code == ErrorCode.none

    # ---- topics and partitions ---------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3, configs: dict[str, str] | None = None,
                     assignments: dict[int, list[int]] | None = None, version: int = 5, validate_only: bool = False) -> Any:
        topic = req(ApiKey.CREATE_TOPICS, version, "CreatableTopic")
        assignment = req(ApiKey.CREATE_TOPICS, version, "CreatableReplicaAssignment")
        config = req(ApiKey.CREATE_TOPICS, version, "CreatableTopicConfig")
        body = self.request(ApiKey.CREATE_TOPICS, version, timeout=datetime.timedelta(seconds=5), validate_only=validate_only,
                            topics=(topic(name=name, num_partitions=-1 if assignments else partitions,
                                          replication_factor=-1 if assignments else replication_factor,
                                          assignments=tuple(assignment(partition_index=i, broker_ids=tuple(b)) for i, b in (assignments or {}).items()),
                                          configs=tuple(config(name=k, value=v) for k, v in (configs or {}).items())),))
        return body.topics[0]

    def delete_topics(self, names: list[str] | None = None, topic_ids: list[uuid.UUID] | None = None, version: int = 6) -> list[Any]:
        if version >= 6:
            state = req(ApiKey.DELETE_TOPICS, version, "DeleteTopicState")
            topics = tuple(state(name=n, topic_id=uuid.UUID(int=0)) for n in names or ()) + tuple(state(name=None, topic_id=i) for i in topic_ids or ())
            body = self.request(ApiKey.DELETE_TOPICS, version, topics=topics, timeout=datetime.timedelta(seconds=5))
        else:
            body = self.request(ApiKey.DELETE_TOPICS, version, topic_names=tuple(names or ()), timeout=datetime.timedelta(seconds=5))
        return list(body.responses)

    def allocate_producer_ids(self, broker_id: int, epoch: int | None = None) -> Any:
        return self.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=broker_id, broker_epoch=self.epochs[broker_id] if epoch is None else epoch)

    def partition(self, topic: str, index: int = 0) -> PartitionState:
        state = self.controller.image.partition(topic, index)
        assert state is not None, f"no partition {topic}-{index}"
        return state

    def alter_partition(self, state: PartitionState, new_isr: list[int] | list[tuple[int, int]], *, sender: int | None = None,
                        broker_epoch: int | None = None, leader_epoch: int | None = None, partition_epoch: int | None = None,
                        recovering: bool = False, version: int = 3) -> tuple[ErrorCode, Any]:
        sender = state.leader if sender is None else sender
        members = [m if isinstance(m, tuple) else (m, self.epochs.get(m, -1)) for m in new_isr]
        data = req(ApiKey.ALTER_PARTITION, version, "PartitionData")
        member = req(ApiKey.ALTER_PARTITION, version, "BrokerState") if version >= 3 else None
        partition = build(data, partition_index=state.partition, leader_epoch=state.leader_epoch if leader_epoch is None else leader_epoch,
                          new_isr=tuple(b for b, _ in members),
                          new_isr_with_epochs=tuple(member(broker_id=b, broker_epoch=e) for b, e in members) if member else (),
                          leader_recovery_state=int(recovering),
                          partition_epoch=state.partition_epoch if partition_epoch is None else partition_epoch)
        topic = req(ApiKey.ALTER_PARTITION, version, "TopicData")
        body = self.request(ApiKey.ALTER_PARTITION, version, broker_id=sender,
                            broker_epoch=self.epochs.get(sender, -1) if broker_epoch is None else broker_epoch,
                            topics=(topic(topic_id=state.topic_id, partitions=(partition,)),))
        if body.error_code != ErrorCode.none:
            return body.error_code, body
        answer = body.topics[0].partitions[0]
        return answer.error_code, answer

    # ---- the metadata log --------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """Where the committed metadata log ends."""
        assert self.controller.quorum is not None
        return self.controller.quorum.state.high_watermark

    def fetch_body(self, offset: int, max_wait_ms: int = 0, version: int = 12, by_id: bool = False) -> Any:
        from cluster.metadata.records import METADATA_TOPIC_ID

        part = req(ApiKey.FETCH, version, "FetchPartition")
        topic = req(ApiKey.FETCH, version, "FetchTopic")
        return build(request_class(ApiKey.FETCH, version), replica_id=0, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
                     max_bytes=1 << 24, isolation_level=0, session_id=0, session_epoch=-1,
                     topics=(build(topic, topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID,
                                   partitions=(build(part, partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                                     log_start_offset=-1, partition_max_bytes=1 << 23),)),),
                     forgotten_topics_data=(), rack_id="")

    def records(self, start: int = 0) -> list[tuple[int, MetadataRecord]]:
        """Every record of the log from `start`, read through Fetch as a broker reads it."""
        body = self.call(ApiKey.FETCH, 12, self.fetch_body(start))
        return fetched_records(body)


def fetched_records(body: Any) -> list[tuple[int, MetadataRecord]]:
    partition = body.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none, partition.error_code
    out: list[tuple[int, MetadataRecord]] = []
    for _, batch in split_batches(partition.records or b""):
        if parse_header(batch).is_control:
            continue  # the quorum's own record (a leader change)
        for record in read_records(bytes(batch)):
            out.append((record.offset, decode_record(record.value, f"at offset {record.offset}")))
    return out
