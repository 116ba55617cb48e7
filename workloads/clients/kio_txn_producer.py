"""A transactional producer on the project's protocol layer (kio requests and responses, the
cluster's record-batch builder) over asyncio streams: on the simulation's event loop it
speaks through the virtual network (`SimEventLoop.create_connection`), on a real loop
through sockets. The simulated transactional workloads use it instead of aiokafka's
producer because aiokafka 0.14 cannot produce two interleavings real clients do (see
README "Deterministic simulation: the client inside it"): it never ends a transaction
while a Produce of it may still land, and it sends TxnOffsetCommit v0.

What it does, modelled on librdkafka 2.x's transaction manager (rdkafka_txnmgr.c) and
idempotent producer (rdkafka_idempotence.c):

- bootstrap: Metadata (v9) from the bootstrap servers, then from known brokers; leaders
  are looked up again after a leadership or transport error;
- `init_transactions`: FindCoordinator (v3, key type 1: transaction), InitProducerId (v4);
  a coordinator that moved or is loading is looked up again and retried;
- a partition's first record in a transaction adds it with AddPartitionsToTxn (v3);
  CONCURRENT_TRANSACTIONS (the previous transaction's markers still being written) is
  retried after 20 ms, as librdkafka does;
- Produce (v9, acks=all) of one transactional idempotent batch per send, with its
  partition's next sequence number; each attempt is bounded by `request_timeout_ms`
  (capped by what is left of `message_timeout_ms`), and a timed-out request disconnects
  (librdkafka's socket.max.fails=1: "N request(s) timed out: disconnect"). What was sent
  on that connection is still delivered by TCP (a close is not a reset). Retriable errors
  are retried with the same sequence until `message_timeout_ms`;
- a message that times out (possibly persisted) makes the transaction abortable and
  requires an epoch bump (KIP-360; librdkafka: "message(s) timed out" -> drain epoch bump
  -> abortable error with bump). `abort_transaction` then sends EndTxn(abort) and, once it
  is answered, InitProducerId(producer id, epoch) for the bump, without waiting for the
  timed-out Produce's answer: librdkafka's abort flushes only what is still in flight, and
  a timed-out request is no longer in flight (its answer is ignored when it comes);
- `send_offsets_to_transaction`: AddOffsetsToTxn (v3) to the transaction coordinator, then
  FindCoordinator (key type 0) for the group and TxnOffsetCommit (v3) with the consumer's
  group metadata (member id, generation id, group instance id), which the group
  coordinator checks (KIP-447); UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and
  FENCED_INSTANCE_ID make the transaction abortable, as in librdkafka;
- `commit_transaction`: EndTxn(commit), retried on retriable errors; PRODUCER_FENCED,
  INVALID_PRODUCER_EPOCH and TRANSACTIONAL_ID_AUTHORIZATION_FAILED are fatal (the
  producer is unusable), as is an INVALID_TXN_STATE answer to EndTxn.

Errors are raised as confluent_kafka.KafkaException carrying librdkafka's KafkaError (its
codes: Kafka's, plus the local `_MSG_TIMED_OUT`, `_TIMED_OUT`, `_TRANSPORT`, `_FENCED`,
`_STATE`, `_FATAL`), with its fatal / retriable / txn_requires_abort flags, so the
confluent client's error table (workloads/clients/errors.py) classifies them.

Where it differs from librdkafka:
- one record per Produce, and a send waits for its answer (the workloads send one record
  at a time and wait for each): no batching, no linger, one request in flight per producer;
- no ApiVersions exchange: the versions are fixed at what librdkafka 2.x sends to a broker
  of Kafka 3.x, which the bundled cluster serves;
- the coordinator and metadata requests are retried within the caller's deadline (the
  workloads bound every call), not librdkafka's per-API timers;
- no compression, no headers, no SASL/SSL, no KIP-890 part 2 (EndTxn v5 epoch bumps).
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.protocol.codec import build, decode_response, encode_request, payload_class, request_class
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import ATTR_TRANSACTIONAL

log = logging.getLogger("logquake.client.kio_txn")

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")

METADATA_V, FIND_COORDINATOR_V, INIT_PRODUCER_ID_V, PRODUCE_V = 9, 3, 4, 9
ADD_PARTITIONS_V, ADD_OFFSETS_V, END_TXN_V, TXN_OFFSET_COMMIT_V = 3, 3, 3, 3
CONCURRENT_TXN_BACKOFF_MS = 20  # librdkafka's retry for CONCURRENT_TRANSACTIONS
CONNECT_TIMEOUT_MS = 10_000  # a connection's setup (librdkafka's socket.connection.setup.timeout.ms is 30 s; our calls are bounded by 10 s)
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1

# Answers that mean "ask again, maybe elsewhere" (the coordinator moved, is loading, or a
# leader changed); the request had no effect.
_COORDINATOR_RETRY = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions})
_FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch,
                     ErrorCode.transactional_id_authorization_failed})
_PRODUCE_RETRY = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                            ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                            ErrorCode.request_timed_out, ErrorCode.unknown_topic_or_partition, ErrorCode.kafka_storage_error,
                            ErrorCode.network_exception, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                            ErrorCode.concurrent_transactions})
_GROUP_METADATA_STALE = frozenset({ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id})


def kafka_error(code: int, reason: str, *, fatal: bool = False, retriable: bool = False,
                abortable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, reason, fatal=fatal, retriable=retriable, txn_requires_abort=abortable))


class TxnState(enum.Enum):
    INIT = "init"
    READY = "ready"
    IN_TRANSACTION = "in-transaction"
    ABORTABLE_ERROR = "abortable-error"
    FATAL_ERROR = "fatal-error"


@dataclass(frozen=True)
class GroupMetadata:
    """What librdkafka's `consumer_group_metadata()` carries into TxnOffsetCommit v3."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class _Connection:
    """One connection to one broker: requests matched to answers by correlation id."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._next_correlation = 1
        self.closed = False

    async def open(self, timeout_ms: float) -> None:
        try:
            reader, self._writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                          max(timeout_ms, 1) / 1000)
        except (OSError, asyncio.TimeoutError) as exc:
            self.closed = True
            raise kafka_error(KafkaError._TRANSPORT, f"connect to {self.host}:{self.port}: {exc!r}", retriable=True) from None
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        reason = "connection closed by the broker"
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                payload = await reader.readexactly(size)
                (correlation_id,) = _CORRELATION.unpack_from(payload, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # the answer to a request we gave up on (librdkafka logs and drops it)
                api_key, api_version, future = entry
                if future.done():
                    continue
                try:
                    _, body = decode_response(api_key, api_version, payload)
                except ValueError as exc:
                    future.set_exception(kafka_error(KafkaError._BAD_MSG, str(exc)))
                    continue
                future.set_result(body)
        except (asyncio.IncompleteReadError, OSError) as exc:
            reason = f"connection lost: {exc!r}"
        except asyncio.CancelledError:
            reason = "connection closed"
        self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for _, _, future in pending.values():
            if not future.done():
                future.set_exception(kafka_error(KafkaError._TRANSPORT, f"{self.host}:{self.port}: {reason}", retriable=True))

    async def request(self, api_key: int, api_version: int, body: Any, timeout_ms: float) -> Any:
        if self.closed or self._writer is None:
            raise kafka_error(KafkaError._TRANSPORT, f"{self.host}:{self.port}: not connected", retriable=True)
        correlation_id = self._next_correlation
        self._next_correlation += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api_key, api_version, future)
        self._writer.write(encode_request(api_key, api_version, correlation_id, self.client_id, body))
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(timeout_ms, 1) / 1000)
        except asyncio.TimeoutError:
            self._pending.pop(correlation_id, None)  # its answer, if any, is dropped unread
            future.cancel()
            # librdkafka (socket.max.fails=1): a timed-out request takes the connection down.
            # A close, not a reset: what was written is still delivered and served.
            self.close(f"request timed out after {timeout_ms:.0f} ms: disconnect")
            raise kafka_error(KafkaError._TIMED_OUT, f"{self.host}:{self.port}: API {api_key} v{api_version} timed out "
                                                    f"after {timeout_ms:.0f} ms", retriable=True) from None

    def close(self, reason: str = "closed by the client") -> None:
        if self._writer is not None and not self.closed:
            # A socket's close() sends what was written before its FIN; the simulated transport
            # does so only when asked (close_after_sent), so that a request this client gave
            # up on still reaches the broker, as over TCP.
            transport = self._writer.transport
            getattr(transport, "close_after_sent", transport.close)()
        self._fail_all(reason)
        if self._reader_task is not None:
            self._reader_task.cancel()


@dataclass
class _Txn:
    partitions: set[tuple[str, int]] = field(default_factory=set)
    offsets_added: bool = False
    # An AddPartitionsToTxn or AddOffsetsToTxn was sent (librdkafka's txn_req_cnt): the
    # coordinator may have a transaction open, so an abort sends EndTxn.
    requests_sent: bool = False
    requires_epoch_bump: bool = False
    error: KafkaException | None = None


class KioTxnProducer:
    """A transactional producer (see the module docstring); one transaction at a time."""

    def __init__(self, *, bootstrap_servers: str, transactional_id: str, client_id: str = "logquake-kio",
                 request_timeout_ms: int = 30_000, message_timeout_ms: int = 300_000,
                 transaction_timeout_ms: int = 60_000, retry_backoff_ms: int = 100) -> None:
        self.bootstrap = [_host_port(s) for s in bootstrap_servers.split(",") if s.strip()]
        if not self.bootstrap:
            raise ValueError(f"bootstrap_servers {bootstrap_servers!r} names no host:port")
        self.transactional_id = transactional_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.message_timeout_ms = message_timeout_ms
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = TxnState.INIT
        self.producer_id, self.producer_epoch = -1, -1
        self._sequences: dict[tuple[str, int], int] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._coordinators: dict[tuple[str, int], tuple[str, int]] = {}  # (key, key type) -> address
        self._txn = _Txn()
        self.requests_timed_out = 0

    # -- connections, metadata, coordinators -------------------------------------------

    async def _connection(self, address: tuple[str, int], timeout_ms: float) -> _Connection:
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            connection = self._connections[address] = _Connection(*address, self.client_id)
            await connection.open(timeout_ms)
        return connection

    async def _request_to(self, address: tuple[str, int], api_key: int, api_version: int, timeout_ms: float,
                          **fields: Any) -> Any:
        """One request; a connection to set up first shares `timeout_ms` with it (a Produce's
        is what is left of its message's time: librdkafka times out a queued message while
        its broker connection is still being set up, and such a message was never sent)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        connection = await self._connection(address, min(timeout_ms, CONNECT_TIMEOUT_MS))
        timeout_ms -= (loop.time() - start) * 1000
        if timeout_ms <= 0:
            raise kafka_error(KafkaError._TIMED_OUT, f"{address[0]}:{address[1]}: no time left after connecting",
                              retriable=True)
        return await connection.request(api_key, api_version, build(request_class(api_key, api_version), **fields),
                                        timeout_ms)

    async def _backoff(self, ms: float | None = None) -> None:
        await asyncio.sleep((self.retry_backoff_ms if ms is None else ms) / 1000)

    async def _any_broker_request(self, api_key: int, api_version: int, **fields: Any) -> Any:
        """One request to the first broker (known ones, then the bootstrap servers) that answers."""
        last: KafkaException | None = None
        for address in [*self._brokers.values(), *self.bootstrap]:
            try:
                return await self._request_to(address, api_key, api_version, self.request_timeout_ms, **fields)
            except KafkaException as exc:
                last = exc
        raise last or kafka_error(KafkaError._ALL_BROKERS_DOWN, "no broker answered", retriable=True)

    async def _refresh_metadata(self, topics: list[str]) -> None:
        topic_cls = payload_class(ApiKey.METADATA, METADATA_V, "MetadataRequestTopic", EntityType.request)
        body = await self._any_broker_request(ApiKey.METADATA, METADATA_V, topics=tuple(topic_cls(name=t) for t in topics),
                                              allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                              include_topic_authorized_operations=False)
        self._brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
        for topic in body.topics:
            for partition in topic.partitions:
                key = (topic.name, int(partition.partition_index))
                if partition.error_code is ErrorCode.none and int(partition.leader_id) >= 0:
                    self._leaders[key] = int(partition.leader_id)
                else:
                    self._leaders.pop(key, None)

    async def _leader(self, topic: str, partition: int) -> tuple[str, int] | None:
        leader = self._leaders.get((topic, partition))
        if leader is None or leader not in self._brokers:
            await self._refresh_metadata([topic])
            leader = self._leaders.get((topic, partition))
        return None if leader is None else self._brokers.get(leader)

    async def _find_coordinator(self, key: str, key_type: int) -> tuple[int, tuple[str, int]]:
        while True:
            body = await self._any_broker_request(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_V, key=key, key_type=key_type)
            if body.error_code is ErrorCode.none:
                return int(body.node_id), (body.host, int(body.port))
            if body.error_code not in _COORDINATOR_RETRY:
                raise self._fatal(body.error_code, f"FindCoordinator({key!r}, type {key_type})")
            await self._backoff()

    async def _coordinator_request(self, what: str, api_key: int, api_version: int, error_of: Any,
                                   key: str | None = None, key_type: int = KEY_TYPE_TRANSACTION, **fields: Any) -> Any:
        """A request to the transaction coordinator (or to the group coordinator of `key` when
        key_type is the group's), retried while the answer or the connection says to ask again.
        Returns the answer whose error `error_of` reads is not one to retry."""
        while True:
            coordinator_key = (key or self.transactional_id, key_type)
            try:
                address = self._coordinators.get(coordinator_key)
                if address is None:
                    _, address = await self._find_coordinator(*coordinator_key)
                    self._coordinators[coordinator_key] = address
                body = await self._request_to(address, api_key, api_version, self.request_timeout_ms, **fields)
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                self._coordinators.pop(coordinator_key, None)
                await self._backoff()
                continue
            error = error_of(body)
            if error is ErrorCode.concurrent_transactions:
                await self._backoff(CONCURRENT_TXN_BACKOFF_MS)
            elif error in _COORDINATOR_RETRY:
                if error is not ErrorCode.coordinator_load_in_progress:
                    self._coordinators.pop(coordinator_key, None)  # moved: look it up again
                await self._backoff()
            else:
                return body

    # -- errors and states --------------------------------------------------------------

    def _fatal(self, code: ErrorCode, what: str) -> KafkaException:
        local = KafkaError._FENCED if code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch) else int(code.value)
        exc = kafka_error(local, f"{what}: {code.name}", fatal=True)
        self.state = TxnState.FATAL_ERROR
        self._txn.error = exc
        return exc

    def _abortable(self, code: int, reason: str, *, bump: bool) -> KafkaException:
        exc = kafka_error(code, reason, abortable=True)
        if self.state is TxnState.IN_TRANSACTION:
            self.state = TxnState.ABORTABLE_ERROR
            self._txn.error = exc
        self._txn.requires_epoch_bump |= bump
        return exc

    def _require(self, *states: TxnState) -> None:
        if self.state in states:
            return
        if self.state is TxnState.FATAL_ERROR:
            raise kafka_error(KafkaError._FATAL, f"fatal error: {self._txn.error}", fatal=True)
        if self.state is TxnState.ABORTABLE_ERROR:
            raise kafka_error(KafkaError._STATE, f"transaction needs an abort: {self._txn.error}", abortable=True)
        raise kafka_error(KafkaError._STATE, f"operation not valid in state {self.state.value}")

    # -- the transactional API ----------------------------------------------------------

    async def init_transactions(self) -> None:
        self._require(TxnState.INIT)
        await self._init_producer_id(-1, -1)
        self.state = TxnState.READY

    async def _init_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        body = await self._coordinator_request(
            "InitProducerId", ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_V, lambda b: b.error_code,
            transactional_id=self.transactional_id, transaction_timeout=datetime.timedelta(milliseconds=self.transaction_timeout_ms),
            producer_id=producer_id, producer_epoch=producer_epoch)
        if body.error_code is not ErrorCode.none:
            raise self._fatal(body.error_code, "InitProducerId")
        self.producer_id, self.producer_epoch = int(body.producer_id), int(body.producer_epoch)
        self._sequences.clear()  # a new epoch starts every partition's sequence at 0

    def begin_transaction(self) -> None:
        self._require(TxnState.READY)
        self._txn = _Txn()
        self.state = TxnState.IN_TRANSACTION

    async def _add_partition(self, topic: str, partition: int) -> None:
        if (topic, partition) in self._txn.partitions:
            return
        topic_cls = payload_class(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, "AddPartitionsToTxnTopic", EntityType.request)

        def error_of(body: Any) -> ErrorCode:
            return next(p.partition_error_code for t in body.results_by_topic_v3_and_below for p in t.results_by_partition)

        self._txn.requests_sent = True
        body = await self._coordinator_request(
            "AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, error_of,
            v3_and_below_transactional_id=self.transactional_id, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=(topic_cls(name=topic, partitions=(partition,)),))
        error = error_of(body)
        if error is ErrorCode.none:
            self._txn.partitions.add((topic, partition))
            return
        if error in _FENCED or error in (ErrorCode.invalid_txn_state, ErrorCode.unknown_producer_id,
                                         ErrorCode.invalid_producer_id_mapping):
            raise self._fatal(error, "AddPartitionsToTxn")
        raise self._abortable(int(error.value), f"AddPartitionsToTxn {topic}/{partition}: {error.name}", bump=False)

    async def send(self, topic: str, partition: int, key: bytes | None, value: bytes | None, timestamp_ms: int) -> int:
        """Produce one record in the current transaction; its offset once acknowledged (-1 when
        the broker says it is a duplicate of one it has). Raises KafkaException."""
        self._require(TxnState.IN_TRANSACTION)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.message_timeout_ms / 1000
        try:
            # The message's time runs while its partition is being added (librdkafka queues
            # it meanwhile, and times it out there).
            await asyncio.wait_for(self._add_partition(topic, partition), self.message_timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise self._abortable(KafkaError._MSG_TIMED_OUT, f"{topic}/{partition}: message timed out while its "
                                  "partition was added to the transaction", bump=True) from None
        sequence = self._sequences.get((topic, partition), 0)
        self._sequences[(topic, partition)] = sequence + 1
        batch = build_batch([Record(key, value)], base_offset=0, timestamp_ms=timestamp_ms, attributes=ATTR_TRANSACTIONAL,
                            producer_id=self.producer_id, producer_epoch=self.producer_epoch, base_sequence=sequence)
        topic_cls = payload_class(ApiKey.PRODUCE, PRODUCE_V, "TopicProduceData", EntityType.request)
        partition_cls = payload_class(ApiKey.PRODUCE, PRODUCE_V, "PartitionProduceData", EntityType.request)
        topic_data = (topic_cls(name=topic, partition_data=(partition_cls(index=partition, records=batch),)),)
        possibly_persisted = False
        last = "not sent"
        while True:
            left_ms = (deadline - loop.time()) * 1000
            if left_ms <= 0:
                # librdkafka: timed-out messages leave a gap in the sequence: the transaction
                # must be aborted with an epoch bump (KIP-360).
                raise self._abortable(KafkaError._MSG_TIMED_OUT, f"{topic}/{partition}: message timed out ({last})",
                                      bump=True)
            try:
                address = await self._leader(topic, partition)
                if address is None:
                    last = "no leader"
                    await self._backoff(min(self.retry_backoff_ms, left_ms))
                    continue
                possibly_persisted = True
                body = await self._request_to(address, ApiKey.PRODUCE, PRODUCE_V, min(self.request_timeout_ms, left_ms),
                                              transactional_id=self.transactional_id, acks=-1,
                                              timeout=datetime.timedelta(milliseconds=self.request_timeout_ms),
                                              topic_data=topic_data)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._TIMED_OUT:
                    self.requests_timed_out += 1
                if not exc.args[0].retriable():
                    raise
                last = exc.args[0].str()
                self._leaders.pop((topic, partition), None)
                await self._backoff(min(self.retry_backoff_ms, max(left_ms, 1)))
                continue
            answer = body.responses[0].partition_responses[0]
            error = answer.error_code
            if error is ErrorCode.none:
                return int(answer.base_offset)
            if error is ErrorCode.duplicate_sequence_number:
                return -1
            if error in _FENCED:
                raise self._fatal(error, f"Produce {topic}/{partition}")
            if error in _PRODUCE_RETRY:
                last = error.name
                self._leaders.pop((topic, partition), None)
                await self._backoff(min(self.retry_backoff_ms, max(left_ms, 1)))
                continue
            # Refused outright (verification, sequence, size...): the transaction cannot go on.
            raise self._abortable(int(error.value), f"Produce {topic}/{partition}: {error.name}",
                                  bump=possibly_persisted and error is ErrorCode.out_of_order_sequence_number)

    async def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int], group: GroupMetadata) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit v3 with the consumer's group metadata."""
        self._require(TxnState.IN_TRANSACTION)
        if not offsets:
            return
        self._txn.requests_sent = True
        body = await self._coordinator_request(
            "AddOffsetsToTxn", ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_V, lambda b: b.error_code,
            transactional_id=self.transactional_id, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            group_id=group.group_id)
        if body.error_code in _FENCED:
            raise self._fatal(body.error_code, "AddOffsetsToTxn")
        if body.error_code is not ErrorCode.none:
            raise self._abortable(int(body.error_code.value), f"AddOffsetsToTxn: {body.error_code.name}", bump=False)
        self._txn.offsets_added = True
        topic_cls = payload_class(ApiKey.TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_V, "TxnOffsetCommitRequestTopic", EntityType.request)
        part_cls = payload_class(ApiKey.TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_V, "TxnOffsetCommitRequestPartition", EntityType.request)
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(part_cls(partition_index=partition, committed_offset=offset,
                                                           committed_leader_epoch=-1, committed_metadata=""))

        def error_of(answer: Any) -> ErrorCode:
            errors = [p.error_code for t in answer.topics for p in t.partitions if p.error_code is not ErrorCode.none]
            return errors[0] if errors else ErrorCode.none

        answer = await self._coordinator_request(
            "TxnOffsetCommit", ApiKey.TXN_OFFSET_COMMIT, TXN_OFFSET_COMMIT_V, error_of, key=group.group_id,
            key_type=KEY_TYPE_GROUP, transactional_id=self.transactional_id, group_id=group.group_id,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch, generation_id=group.generation_id,
            member_id=group.member_id, group_instance_id=group.group_instance_id,
            topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        error = error_of(answer)
        if error is ErrorCode.none:
            return
        if error in _FENCED:
            raise self._fatal(error, "TxnOffsetCommit")
        # KIP-447: the consumer's group metadata is stale (it lost its partitions).
        raise self._abortable(int(error.value), f"TxnOffsetCommit: {error.name}", bump=False)

    async def _end_txn(self, committed: bool) -> None:
        what = "EndTxn(commit)" if committed else "EndTxn(abort)"
        body = await self._coordinator_request(
            what, ApiKey.END_TXN, END_TXN_V, lambda b: b.error_code, transactional_id=self.transactional_id,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch, committed=committed)
        if body.error_code is not ErrorCode.none:
            raise self._fatal(body.error_code, what)

    async def commit_transaction(self) -> None:
        self._require(TxnState.IN_TRANSACTION)
        if self._txn.requests_sent:
            await self._end_txn(True)
        self.state = TxnState.READY

    async def abort_transaction(self) -> None:
        """EndTxn(abort) (when anything was registered), then the epoch bump if a timed-out
        message requires it. Nothing is in flight here: sends are awaited, and a timed-out
        request is no longer the client's."""
        self._require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)
        if self._txn.requests_sent:
            await self._end_txn(False)
        if self._txn.requires_epoch_bump:
            await self._init_producer_id(self.producer_id, self.producer_epoch)
        self._txn = _Txn()
        self.state = TxnState.READY

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            connection.close()
        await asyncio.sleep(0)  # let the reader tasks see their cancellation


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bootstrap server {server!r} is not host:port")
    return host, int(port)
