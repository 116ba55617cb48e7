"""The eos workload's client on aiokafka, for simulated runs (`--sim --workload eos`): the same
roles, op values and outcomes as the confluent-kafka `EosClient` (workloads/clients/eos.py),
as coroutines.

  send    the idempotent input producer writes one value to an input partition
  copy    the copier: poll a batch (a read_committed group consumer subscribed to the input),
          then one transaction: every value to the output's same-numbered partition,
          send_offsets_to_transaction, commit (txn=false: produce, then commit the offsets
          with the consumer)
  crash   drop the copier (its consumer leaves the group: a rebalance)
  poll    the verifier: both topics from the beginning to their end, read_committed, once
          no transaction is open (last stable offset = high watermark)

Outcomes follow workloads/clients/aiokafka_txn.py's rules (before the commit: `fail`; an
unknown commit outcome: `info`, and the process ends).

Transactions. With txn=true a copier's producer is `KioTxnProducer`
(workloads/clients/kio_txn_producer.py), and its offsets go with TxnOffsetCommit v3 carrying
the consumer's group metadata as the copy polled it (member id, generation and static id read
from aiokafka's coordinator right after the poll, as the confluent client calls
consumer_group_metadata()): a copier that lost its partitions meanwhile is refused by the
group coordinator (UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, KIP-447) and aborts, unless
`transaction.offset.commit.skip.generation.check=true`. Rebalances that run through the copier
still wait for its copy: a copy holds `_copy_lock` from its poll to the end of its transaction,
and the rebalance listener's `on_partitions_revoked` (which aiokafka awaits before rejoining
the group, so before anyone else is given the partitions) waits for it, then until the group's
committed offsets show this copier's last committed copy (aiokafka's OffsetFetch does not ask
for stable offsets, so the next owner could otherwise start from the offsets before it; a
librdkafka consumer rejoins only from its poll, and asks for stable offsets). A copier removed
from the group without a rebalance through it (`stall_p`: past `max.poll.interval.ms`) is the
zombie KIP-447 fences. txn=false copiers stay aiokafka producers.

Copy ids (the low COPY_ID_BITS of an output value) come from a counter per run, not per
process as in the confluent client: two simulated runs in one process (a hunt) must number
their copies alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition
from aiokafka.errors import IllegalOperation, KafkaError
from confluent_kafka import KafkaException

from harness.generator import Completion, Invocation
from workloads.clients.aiokafka_queue import (
    START_TIMEOUT_S, AiokafkaQueueClient, TopicError, _close_producer, _close_quietly, _StartFailed,
)
from workloads.clients.aiokafka_txn import (
    CALL_TIMEOUT_S, COMMIT_TIMEOUT_S, INIT_TIMEOUT_S, group_metadata, kio_classify, kio_producer,
)
from workloads.clients.aiokafka_errors import classify
from workloads.clients.aiokafka_stale_leader import refresh_metadata_on_stale_leader
from workloads.clients.eos import COPY_ID_BITS, DELIVERY_DEADLINE_S, VERIFY_READ_S, VERIFY_SETTLE_S, EosKeys
from workloads.clients.errors import Outcome
from workloads.clients.kio_txn_producer import KioTxnProducer, TxnState

log = logging.getLogger("logquake.client.aiokafka.eos")

REVOKE_SETTLE_S = 5.0  # how long a revoked copier waits for its last commit's offsets to become visible
_CLIENT_ERRORS = (KafkaError, OSError, asyncio.TimeoutError)
_TXN_ERRORS = (KafkaException, KafkaError, OSError, asyncio.TimeoutError)  # the kio producer's, and our deadlines


class _Abort(Exception):
    """An error before commit_transaction: the transaction cannot have committed."""

    def __init__(self, outcome: Outcome):
        super().__init__(str(outcome.error))
        self.outcome = outcome


class _CopierListener(ConsumerRebalanceListener):
    def __init__(self, client: "AiokafkaEosClient"):
        self.client = client

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.client._log_rebalance("revoked", revoked)
        await self.client._settle(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.client._log_rebalance("assigned", assigned)


class AiokafkaEosClient(AiokafkaQueueClient):
    """Every role of the eos workload; `keys` is an EosKeys (input partition p is key p,
    output partition p is key partitions + p)."""

    def __init__(self, *, transactional_id: str | None, batch_size: int, copy_ids: Iterator[int], **kwargs: Any):
        super().__init__(max_poll_records=batch_size, **kwargs)
        self.transactional_id = transactional_id
        self.batch_size = batch_size
        self.copy_ids = copy_ids
        self.eos_keys: EosKeys = self.keys  # type: ignore[assignment]
        self.group_id: str = self.settings.consumer["group_id"]
        self._copier: AIOKafkaProducer | KioTxnProducer | None = None
        self._copy_lock = asyncio.Lock()
        self._closing = False
        self._committed: dict[int, int] = {}  # input partition -> next offset of our last committed copy

    @property
    def input_topic(self) -> str:
        return self.eos_keys.topic_prefix

    @property
    def output_topic(self) -> str:
        return self.eos_keys.topic(self.eos_keys.partitions_per_topic)

    async def invoke(self, invocation: Invocation) -> Completion:
        f = invocation.f
        try:
            if f == "crash":
                await self.close()
                return Completion("info", None, error="crash")
            if f == "send":
                completion = await self._send(invocation.value)
            elif f == "copy":
                completion = await self._copy(invocation)
            elif f == "poll":
                completion = await self._verify()
            else:
                return Completion("fail", invocation.value, error=["unsupported-op", f])
        except TopicError as exc:
            completion = Completion(exc.outcome.type, None, error=exc.outcome.error)
        except _StartFailed as exc:
            completion = Completion("fail", None, error=["client-start", exc.detail])
        if self._rebalance_log:
            completion = Completion(completion.type, completion.value, completion.error,
                                    {**completion.extra, "rebalance_log": self._rebalance_log}, completion.end_process)
            self._rebalance_log = []
        return completion

    # -- the copier's halves
    async def _consumer_(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            await self.topics.ensure([self.input_topic, self.output_topic])
            try:
                consumer = await super()._consumer_()
            except BaseException:
                half, self._consumer = self._consumer, None  # a start that failed is not kept
                if half is not None:
                    await _close_quietly(half.stop(), "copier consumer")
                raise
            consumer.subscribe(topics=[self.input_topic], listener=_CopierListener(self))
            self._subscribed = True
        return self._consumer  # type: ignore[return-value]

    async def _copier_(self) -> AIOKafkaProducer | KioTxnProducer:
        if self._copier is None:
            if self.transactional_id is not None:
                txn = kio_producer(self.bootstrap_servers, self.transactional_id, f"logquake-{self.process}-copier",
                                   self.settings)
                try:
                    # InitProducerId fences this thread's earlier copier and aborts the
                    # transaction it left open.
                    await asyncio.wait_for(txn.init_transactions(), INIT_TIMEOUT_S)
                except BaseException:
                    await txn.close()
                    raise
                self._copier = txn
                return txn
            params = dict(self.settings.producer)
            params.pop("transaction_timeout_ms", None)
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, client_id=f"logquake-{self.process}-copier",
                                        **params)
            try:
                await asyncio.wait_for(producer.start(), INIT_TIMEOUT_S)
            except BaseException:
                await _close_producer(producer)
                raise
            self._copier = producer
        return self._copier

    def _log_rebalance(self, kind: str, partitions: Any) -> None:
        self._rebalance_log.append({"type": kind, "keys": sorted(tp.partition for tp in partitions
                                                                 if tp.topic == self.input_topic)})

    async def _settle(self, revoked: Any) -> None:
        """Before the partitions move on: the copy in progress ends (commit or abort), and
        the group's committed offsets show our last committed copy of each revoked one."""
        if self._closing:
            return  # the copier is being dropped (a crash): nothing of ours runs any more
        async with self._copy_lock:
            consumer = self._consumer
            mine = {tp: self._committed[tp.partition] for tp in sorted(revoked)
                    if tp.topic == self.input_topic and tp.partition in self._committed}
            if consumer is None or not mine:
                return
            try:
                async with asyncio.timeout(REVOKE_SETTLE_S):
                    for tp, offset in mine.items():
                        while True:
                            committed = await consumer.committed(tp)
                            if committed is not None and committed >= offset:
                                break
                            await asyncio.sleep(0.05)
            except (TimeoutError, KafkaError, OSError) as exc:
                log.debug("%s: committed offsets not seen before the revocation: %s", self.transactional_id, exc)

    async def _copy(self, invocation: Invocation) -> Completion:
        try:
            producer = await self._copier_()
        except _TXN_ERRORS as exc:
            outcome = kio_classify(exc)
            return Completion("fail", None, error=["init-transactions", outcome.error], end_process=outcome.end_process)
        consumer = await self._started(self._consumer_)
        async with self._copy_lock:
            try:
                async with asyncio.timeout(self.default_poll_ms / 1000):  # getmany waits for an assignment unbounded
                    batches = await consumer.getmany(timeout_ms=self.default_poll_ms, max_records=self.batch_size)
            except TimeoutError:
                batches = {}
            except (KafkaError, OSError) as exc:
                outcome = classify(exc)
                return Completion("fail", None, error=["poll", outcome.error], end_process=outcome.end_process)
            records = [(tp, record) for tp in sorted(batches) if tp.topic == self.input_topic for record in batches[tp]]
            if not records:
                return Completion("ok", [])
            polled: dict[int, list[list[int]]] = {}
            for tp, record in records:
                polled.setdefault(tp.partition, []).append([record.offset, int(record.value)])
            value: list = [["poll", polled]]
            crash = invocation.extra.get("crash")
            if self.transactional_id is None:
                return await self._copy_plain(producer, consumer, records, value, crash)
            # The group generation whose records these are (librdkafka's
            # consumer_group_metadata() after the poll, as the confluent client takes it): a
            # rebalance before the offsets are sent makes the coordinator refuse them (KIP-447).
            metadata = group_metadata(consumer, self.group_id)
            try:
                if producer.state is not TxnState.READY:
                    raise _Abort(Outcome("fail", ["illegal-transition", producer.state.value], end_process=True))
                producer.begin_transaction()
                value += await self._produce_txn(producer, records)
                stall_s = float(invocation.extra.get("stall_s", 0))
                if stall_s > 0:
                    # Not polling: aiokafka leaves the group after max.poll.interval.ms and the
                    # partitions move on; we come back as a zombie, which KIP-447 fences.
                    await asyncio.sleep(stall_s)
                offsets = {(tp.topic, tp.partition): o.offset for tp, o in self._next_offsets(records).items()}
                try:
                    await asyncio.wait_for(producer.send_offsets_to_transaction(offsets, metadata), CALL_TIMEOUT_S)
                except _TXN_ERRORS as exc:
                    raise _Abort(kio_classify(exc)) from None
                if crash == "before-commit":
                    # Killed with its transaction open: never asked to commit, so it cannot commit.
                    self._rewind(consumer, records)
                    await self._drop()
                    return Completion("fail", value, error=["crash", "before-commit"], end_process=True)
            except _Abort as err:
                self._rewind(consumer, records)
                return await self._aborted(producer, value, err.outcome)
            return await self._commit(producer, consumer, records, value)

    async def _produce_txn(self, producer: KioTxnProducer, records: list[tuple[TopicPartition, Any]]) -> list:
        """Every record's value to the output in the transaction, one acknowledged send after
        another; the sends, in order. Raises _Abort on the first failure or after
        DELIVERY_DEADLINE_S."""
        copy_id = next(self.copy_ids) % (1 << COPY_ID_BITS)
        values = [int(record.value) << COPY_ID_BITS | copy_id for _, record in records]
        offsets: list[int] = []
        try:
            async with asyncio.timeout(DELIVERY_DEADLINE_S):
                for (tp, record), value in zip(records, values):
                    offsets.append(await producer.send(self.output_topic, tp.partition, record.key, str(value).encode(),
                                                       self.wall_ms()))
        except TimeoutError:
            raise _Abort(Outcome("fail", "delivery-timeout")) from None
        except _TXN_ERRORS as exc:
            raise _Abort(kio_classify(exc)) from None
        return [["send", self.eos_keys.output_key(tp.partition), [offset if offset >= 0 else None, value]]
                for (tp, _), value, offset in zip(records, values, offsets)]

    async def _produce(self, producer: AIOKafkaProducer, records: list[tuple[TopicPartition, Any]]) -> list:
        """Every record's value to the output, each acknowledged; the sends, in order. Raises
        _Abort on the first failure or after DELIVERY_DEADLINE_S."""
        copy_id = next(self.copy_ids) % (1 << COPY_ID_BITS)
        values = [int(record.value) << COPY_ID_BITS | copy_id for _, record in records]
        deliveries: list[asyncio.Future] = []
        try:
            async with asyncio.timeout(DELIVERY_DEADLINE_S):
                for (tp, record), value in zip(records, values):
                    deliveries.append(await producer.send(self.output_topic, value=str(value).encode(), key=record.key,
                                                          partition=tp.partition, timestamp_ms=self.wall_ms()))
                results = [await asyncio.shield(d) for d in deliveries]
        except TimeoutError:
            for delivery in deliveries:  # their outcomes come after ours: retrieved, unreported
                delivery.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise _Abort(Outcome("fail", "delivery-timeout")) from None
        except (KafkaError, OSError) as exc:
            raise _Abort(classify(exc)) from None
        except IllegalOperation as exc:
            raise _Abort(Outcome("fail", ["illegal-operation", str(exc)], end_process=True)) from None
        return [["send", self.eos_keys.output_key(tp.partition),
                 [meta.offset if meta.offset is not None and meta.offset >= 0 else None, value]]
                for (tp, _), value, meta in zip(records, values, results)]

    def _next_offsets(self, records: list[tuple[TopicPartition, Any]]) -> dict[TopicPartition, OffsetAndMetadata]:
        nxt: dict[int, int] = {}
        for tp, record in records:
            nxt[tp.partition] = max(nxt.get(tp.partition, 0), record.offset + 1)
        return {TopicPartition(self.input_topic, p): OffsetAndMetadata(o, "") for p, o in sorted(nxt.items())}

    async def _commit(self, producer: KioTxnProducer, consumer: AIOKafkaConsumer,
                      records: list[tuple[TopicPartition, Any]], value: list) -> Completion:
        if producer.state is TxnState.ABORTABLE_ERROR:
            self._rewind(consumer, records)
            return await self._aborted(producer, value, Outcome("fail", "abortable-error"))
        try:
            await asyncio.wait_for(producer.commit_transaction(), COMMIT_TIMEOUT_S)
        except _TXN_ERRORS as exc:
            self._rewind(consumer, records)
            return Completion("info", value, error=["commit", kio_classify(exc).error], end_process=True)
        for tp, offset_and_metadata in self._next_offsets(records).items():
            self._committed[tp.partition] = offset_and_metadata.offset
        return Completion("ok", value)

    async def _aborted(self, producer: KioTxnProducer, value: list, cause: Outcome) -> Completion:
        """Abort after `cause` (never asked to commit): `fail` whatever becomes of the abort."""
        state = producer.state
        if cause.end_process or state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            return Completion("fail", value, error=["abort-failed", cause.error, f"producer in state {state.value}"],
                              end_process=True)
        try:
            await asyncio.wait_for(producer.abort_transaction(), CALL_TIMEOUT_S)
        except _TXN_ERRORS as exc:
            # The coordinator aborts it: this thread's next copier fences the id, or it times out.
            return Completion("fail", value, error=["abort-failed", cause.error, kio_classify(exc).error], end_process=True)
        return Completion("fail", value, error=["abort", cause.error])

    async def _copy_plain(self, producer: AIOKafkaProducer, consumer: AIOKafkaConsumer,
                          records: list[tuple[TopicPartition, Any]], value: list, crash: str | None) -> Completion:
        """txn=false: produce, then commit the offsets with the consumer (at-least-once)."""
        try:
            value += await self._produce(producer, records)
        except _Abort as err:
            self._rewind(consumer, records)
            # Some records may have been written before the failure: unknown, not failed.
            return Completion("info", value, error=err.outcome.error, end_process=True)
        if crash == "before-commit":
            await self._drop()
            return Completion("ok", value, extra={"crash": "before-offset-commit"}, end_process=True)
        try:
            async with asyncio.timeout(self._request_timeout_s):
                await consumer.commit(self._next_offsets(records))
        except (KafkaError, OSError, TimeoutError) as exc:
            self._rewind(consumer, records)
            return Completion("ok", value, extra={"offset_commit": classify(exc).error})
        return Completion("ok", value)

    def _rewind(self, consumer: AIOKafkaConsumer, records: list[tuple[TopicPartition, Any]]) -> None:
        """An op that is not ok leaves the consumer where it found it: those records are
        copied again (by this copier, or by the partition's next owner)."""
        first: dict[TopicPartition, int] = {}
        for tp, record in records:
            first.setdefault(tp, record.offset)
        for tp, offset in sorted(first.items()):
            try:
                consumer.seek(tp, offset)
            except (KafkaError, AssertionError, ValueError) as exc:  # no longer assigned
                log.debug("rewind of %s to %s failed: %s", tp, offset, exc)

    # -- the verifier
    async def _verify(self) -> Completion:
        await self.topics.ensure([self.input_topic, self.output_topic])
        parts = self.eos_keys.partitions_per_topic
        tps = [TopicPartition(self.eos_keys.topic(k), k % parts) for k in range(2 * parts)]
        base = {k: v for k, v in self.settings.consumer.items()
                if k not in ("group_id", "group_instance_id", "isolation_level", "enable_auto_commit")}
        committed = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, client_id=f"logquake-{self.process}-verifier",
                                     isolation_level="read_committed", enable_auto_commit=False, max_poll_records=1000,
                                     **base)
        uncommitted = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers,
                                       client_id=f"logquake-{self.process}-verifier-hw", isolation_level="read_uncommitted",
                                       enable_auto_commit=False, **base)
        try:
            for consumer in (committed, uncommitted):
                await asyncio.wait_for(consumer.start(), START_TIMEOUT_S)
                refresh_metadata_on_stale_leader(consumer)
            ends, open_txns = await self._settled_ends(committed, uncommitted, tps)
            if open_txns:
                return Completion("fail", None, error=["open-transactions", open_txns])
            return await self._read_to(committed, tps, ends)
        except _CLIENT_ERRORS as exc:
            return Completion("fail", None, error=["verify", classify(exc).error])
        finally:
            await _close_quietly(committed.stop(), "verifier")
            await _close_quietly(uncommitted.stop(), "verifier")

    async def _settled_ends(self, committed: AIOKafkaConsumer, uncommitted: AIOKafkaConsumer,
                            tps: list[TopicPartition]) -> tuple[dict[int, int], dict[str, list[int]]]:
        """Each partition's end once its last stable offset has reached its high watermark,
        or what is still open when VERIFY_SETTLE_S ran out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + VERIFY_SETTLE_S
        while True:
            stable = await asyncio.wait_for(committed.end_offsets(tps), CALL_TIMEOUT_S)
            high = await asyncio.wait_for(uncommitted.end_offsets(tps), CALL_TIMEOUT_S)
            ends: dict[int, int] = {}
            open_txns: dict[str, list[int]] = {}
            for tp in tps:
                key = self.eos_keys.key(tp.topic, tp.partition)
                assert key is not None
                ends[key] = stable[tp]
                if stable[tp] != high[tp]:
                    open_txns[str(key)] = [stable[tp], high[tp]]
            if not open_txns or loop.time() > deadline:
                return ends, open_txns
            await asyncio.sleep(0.5)

    async def _read_to(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: dict[int, int]) -> Completion:
        consumer.assign(tps)
        await asyncio.wait_for(consumer.seek_to_beginning(*tps), CALL_TIMEOUT_S)
        read: dict[int, list[list[int]]] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + VERIFY_READ_S
        while True:
            behind = {}
            for tp in tps:
                key = self.eos_keys.key(tp.topic, tp.partition)
                assert key is not None
                position = await asyncio.wait_for(consumer.position(tp), CALL_TIMEOUT_S)
                if position < ends[key]:  # the last records may be markers, which the position passes
                    behind[key] = position
            if not behind:
                break
            if loop.time() > deadline:
                return Completion("fail", None, error=["verify-timeout", {str(k): [p, ends[k]] for k, p in behind.items()}])
            try:
                async with asyncio.timeout(0.2):
                    batches = await consumer.getmany(timeout_ms=200, max_records=1000)
            except TimeoutError:
                batches = {}
            for tp in sorted(batches):
                key = self.eos_keys.key(tp.topic, tp.partition)
                if key is None:
                    continue
                read.setdefault(key, []).extend([record.offset, int(record.value)] for record in batches[tp]
                                                if record.offset < ends[key])
        return Completion("ok", [["poll", {k: read[k] for k in sorted(read)}]])

    async def _drop(self) -> None:
        """A copier killed: its consumer leaves the group, its producer is dropped without an
        abort (the thread's next copier fences the id)."""
        self._closing = True
        copier, self._copier = self._copier, None
        if isinstance(copier, KioTxnProducer):
            await copier.close()  # no abort: the thread's next copier fences the id
        elif copier is not None:
            await _close_producer(copier)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await _close_quietly(consumer.stop(), "copier consumer")
        self._subscribed = False
        self._closing = False

    async def close(self) -> None:
        await self._drop()
        await super().close()
