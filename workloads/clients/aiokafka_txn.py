"""The queue workload's transactional client for simulated runs (`--sim --workload-option
txn=true`): every send/poll/txn op is one transaction, recorded exactly as the confluent-kafka
`TxnQueueClient` (workloads/clients/txn.py) records it, so the checkers judge both histories
with the same meaning.

The transactional producer is `KioTxnProducer` (workloads/clients/kio_txn_producer.py: a
librdkafka-like transaction manager on the project's protocol layer), one per process with
the real run's transactional id per process (so a retired process's successor comes back
under a fresh id, as in Jepsen); the consumer is the queue client's aiokafka read_committed
consumer. aiokafka 0.14's own transactional producer is no longer used: it never ends a
transaction while one of its Produce requests may still land (it waits for every batch, even
to abort, and never bumps its epoch) and sends TxnOffsetCommit v0, so the simulated runs
could not show `transaction.partition.verification.enable=false` or the KIP-447 generation
check. An op runs as:

    begin_transaction
    each micro-op in order: send (wait for its acknowledgement) or poll
        (an intentional abort before micro-op `extra.abort_at`, drawn by the generator)
    send_offsets_to_transaction(highest polled offset + 1 per key, the consumer's group
        metadata: member id and generation from aiokafka's coordinator, TxnOffsetCommit v3)
    commit_transaction

Outcomes, as txn.py's: before commit_transaction nothing can commit the transaction, so an
error there (or the intentional abort) is a definite `fail` whether or not our abort
succeeds (a transaction never asked to commit is aborted by the coordinator: our abort, the
id's next InitProducerId, or `transaction.timeout.ms`). Only the commit can leave the outcome
open: a commit that fails or passes COMMIT_TIMEOUT_S (txn.py's COMMIT_DEADLINE_S) is `info`
and ends the process. Errors are librdkafka's (KafkaException), classified by the confluent
client's table (errors.py). A send is bounded by `message.timeout.ms` in the producer; one
that times out makes the transaction abortable with an epoch bump, as in librdkafka; an abort
that cannot finish within CALL_TIMEOUT_S ends the process.

Consumer rollback (Jepsen's with-consumer-rollback): an op that is not ok seeks every key it
polled back to the first offset it polled there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.errors import KafkaError
from confluent_kafka import KafkaException

from harness.generator import Completion, Invocation
from workloads.clients.aiokafka_config import AiokafkaSettings, UnsupportedClientSetting, aiokafka_settings
from workloads.clients.aiokafka_errors import classify
from workloads.clients.aiokafka_queue import AiokafkaQueueClient, TopicError, _StartFailed
from workloads.clients.errors import Outcome, describe
from workloads.clients.kio_txn_producer import GroupMetadata, KioTxnProducer, TxnState

log = logging.getLogger("logquake.client.aiokafka.txn")

INIT_TIMEOUT_S = 10.0  # start: bootstrap, find the coordinator, InitProducerId (fences the id's earlier producer)
CALL_TIMEOUT_S = 10.0  # send_offsets_to_transaction and abort_transaction, as Jepsen's 10 s client timeouts
COMMIT_TIMEOUT_S = 20.0  # commit_transaction with aiokafka's own retries (txn.py's COMMIT_DEADLINE_S)
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # librdkafka's and aiokafka's default
_CLIENT_ERRORS = (KafkaError, KafkaException, OSError, asyncio.TimeoutError)


def txn_settings(effective: Mapping[str, str], overrides: Mapping[str, str]) -> AiokafkaSettings:
    """The aiokafka parameters of a transactional run: `aiokafka_settings` for every key but
    `transaction.timeout.ms`, which becomes the transactional producer's
    `transaction_timeout_ms`. Raises UnsupportedClientSetting naming what cannot be honoured:
    a `transactional.id` (the workload gives each process its own) and acks other than all
    (a transactional producer is idempotent, which needs acks=all, as librdkafka requires)."""
    if "transactional.id" in effective:
        raise UnsupportedClientSetting("--client-config transactional.id: the workload gives each process its own "
                                       "transactional id")
    raw_timeout = effective.get("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
    try:
        timeout_ms = int(raw_timeout)
    except ValueError:
        raise UnsupportedClientSetting(f"--client-config transaction.timeout.ms={raw_timeout!r} is not an integer") from None
    if timeout_ms <= 0:
        raise UnsupportedClientSetting(f"--client-config transaction.timeout.ms={timeout_ms} must be positive")
    settings = aiokafka_settings({k: v for k, v in effective.items() if k != "transaction.timeout.ms"},
                                 {k: v for k, v in overrides.items() if k != "transaction.timeout.ms"})
    if settings.producer.get("acks", "all") != "all":
        raise UnsupportedClientSetting(f"--client-config acks={settings.producer['acks']}: a transactional producer "
                                       "needs acks=all")
    notes = {**settings.notes, "transaction.timeout.ms": "producer transaction_timeout_ms"}
    consumer = settings.consumer
    if "partition.assignment.strategy" not in overrides:
        # aiokafka 0.14 sends one JoinGroup per configured assignor on every rejoin (the send
        # sits inside its loop over the assignors; aio-libs/aiokafka#1168, open): the second,
        # with more protocols than the first, makes the coordinator start another rebalance,
        # and a group of several copiers can rebalance for ever (a seeded eos run copied
        # nothing after its brokers came back). One assignor sends one JoinGroup.
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor

        consumer = {**consumer, "partition_assignment_strategy": (RangePartitionAssignor,)}
        notes["partition.assignment.strategy"] = ("consumer partition_assignment_strategy range only: aiokafka 0.14 "
                                                  "sends one JoinGroup per assignor (aio-libs/aiokafka#1168)")
    return dataclasses.replace(settings, producer={**settings.producer, "transaction_timeout_ms": timeout_ms},
                               consumer=consumer, notes=notes)


class _BodyError(Exception):
    """An error before commit_transaction: the transaction cannot have committed."""

    def __init__(self, outcome: Outcome, results: list):
        super().__init__(str(outcome.error))
        self.outcome = outcome
        self.results = results


def kio_producer_parameters(settings: AiokafkaSettings) -> dict[str, int]:
    """What the transactional producer of a simulated run gets from the run's librdkafka
    settings as mapped for aiokafka: request.timeout.ms, message.timeout.ms (the send
    deadline), transaction.timeout.ms and retry.backoff.ms."""
    producer = settings.producer
    return {"request_timeout_ms": int(producer.get("request_timeout_ms", 30_000)),
            "message_timeout_ms": int(settings.send_timeout_s * 1000),
            "transaction_timeout_ms": int(producer.get("transaction_timeout_ms", DEFAULT_TRANSACTION_TIMEOUT_MS)),
            "retry_backoff_ms": int(producer.get("retry_backoff_ms", 100))}


def kio_producer(bootstrap_servers: str, transactional_id: str, client_id: str, settings: AiokafkaSettings) -> KioTxnProducer:
    """The transactional producer of a simulated run (workloads/clients/kio_txn_producer.py)."""
    return KioTxnProducer(bootstrap_servers=bootstrap_servers, transactional_id=transactional_id, client_id=client_id,
                          **kio_producer_parameters(settings))


def kio_classify(exc: BaseException) -> Outcome:
    """The outcome of an exception from the kio producer (confluent_kafka.KafkaException with
    librdkafka's error, classified by the confluent client's table) or of our own deadline."""
    if isinstance(exc, KafkaException):
        return describe(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return Outcome("info", "kafka-timeout")
    return classify(exc)


def group_metadata(consumer: Any, group_id: str) -> GroupMetadata:
    """librdkafka's consumer_group_metadata() of an aiokafka consumer: its coordinator's member
    id and generation (read, not changed: aiokafka has no public accessor), and its static
    member id; a consumer outside a group (manual assignment) has generation -1, member ''."""
    coordinator = getattr(consumer, "_coordinator", None)  # noqa: SLF001 - the glue pins aiokafka 0.14
    generation = getattr(coordinator, "generation", -1)
    member_id = getattr(coordinator, "member_id", "")
    instance = getattr(coordinator, "_group_instance_id", None)
    return GroupMetadata(group_id, -1 if generation is None else int(generation), member_id or "", instance)


class AiokafkaTxnQueueClient(AiokafkaQueueClient):
    """AiokafkaQueueClient whose send/poll/txn ops each run in one Kafka transaction of a
    KioTxnProducer (the consumer stays aiokafka's)."""

    def __init__(self, *, transactional_id: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.transactional_id = transactional_id
        self.group_id: str | None = self.settings.consumer.get("group_id")
        self._txn_producer: KioTxnProducer | None = None

    async def _txn_producer_(self) -> KioTxnProducer:
        if self._txn_producer is None:
            producer = kio_producer(self.bootstrap_servers, self.transactional_id, f"logquake-{self.process}",
                                    self.settings)
            try:
                # InitProducerId from the id's coordinator (fences the id's earlier producer).
                await asyncio.wait_for(producer.init_transactions(), INIT_TIMEOUT_S)
            except BaseException:
                await producer.close()
                raise
            self._txn_producer = producer
        return self._txn_producer

    async def close(self) -> None:
        producer, self._txn_producer = self._txn_producer, None
        if producer is not None:
            await producer.close()
        await super().close()

    async def invoke(self, invocation: Invocation) -> Completion:
        if invocation.f not in ("send", "poll", "txn"):
            return await super().invoke(invocation)
        try:
            completion = await self._transaction(invocation)
        except TopicError as exc:
            completion = Completion(exc.outcome.type, invocation.value, error=exc.outcome.error)
        except _StartFailed as exc:
            completion = Completion("fail", invocation.value, error=["client-start", exc.detail])
        if self._rebalance_log:
            completion = Completion(completion.type, completion.value, completion.error,
                                    {**completion.extra, "rebalance_log": self._rebalance_log}, completion.end_process)
            self._rebalance_log = []
        return completion

    async def _transaction(self, invocation: Invocation) -> Completion:
        mops: list = invocation.value
        await self.topics.ensure(self.keys.topic(m[1]) for m in mops if m[0] == "send")
        try:
            producer = await self._txn_producer_()
        except _CLIENT_ERRORS as exc:
            outcome = kio_classify(exc)
            # No transaction began, so nothing of this op happened.
            return Completion("fail", mops, error=["init-transactions", outcome.error], end_process=outcome.end_process)
        first_offsets: dict[int, int] = {}
        results: list = []
        try:
            if producer.state is not TxnState.READY:
                # Every path that leaves the producer in another state ends the process.
                raise _BodyError(Outcome("fail", ["illegal-transition", producer.state.value], end_process=True), [])
            producer.begin_transaction()
            next_offsets: dict[int, int] = {}
            results = await self._body(invocation, producer, first_offsets, next_offsets)
            if next_offsets and self.group_id is not None:
                offsets = {(self.keys.topic(k), self.keys.partition(k)): o for k, o in sorted(next_offsets.items())}
                try:
                    await asyncio.wait_for(producer.send_offsets_to_transaction(
                        offsets, group_metadata(self._consumer, self.group_id)), CALL_TIMEOUT_S)
                except _CLIENT_ERRORS as exc:
                    raise _BodyError(kio_classify(exc), results) from None
        except _BodyError as err:
            await self._rollback_consumer(first_offsets)
            return await self._aborted(producer, mops, err.results, err.outcome)
        return await self._commit(producer, mops, results, first_offsets)

    async def _body(self, invocation: Invocation, producer: KioTxnProducer, first_offsets: dict[int, int],
                    next_offsets: dict[int, int]) -> list:
        mops: list = invocation.value
        abort_at = invocation.extra.get("abort_at")
        poll_ms = int(invocation.extra.get("poll_ms", self.default_poll_ms))
        results: list = []
        for i, mop in enumerate(mops):
            if abort_at is not None and i == abort_at:
                raise _BodyError(Outcome("fail", "intentional"), results)
            if mop[0] == "send":
                _, key, value = mop
                try:
                    # The producer bounds the send by message.timeout.ms itself; this bound
                    # only guards against a bug leaving it waiting.
                    offset = await asyncio.wait_for(
                        producer.send(self.keys.topic(key), self.keys.partition(key), str(key).encode(),
                                      str(value).encode(), self.wall_ms()),
                        self.settings.send_timeout_s + CALL_TIMEOUT_S)
                except _CLIENT_ERRORS as exc:
                    raise _BodyError(kio_classify(exc), results) from None
                results.append(["send", key, [offset if offset >= 0 else None, value]])
            else:
                results.append(await self._poll_mop(poll_ms, results, first_offsets, next_offsets))
        return results

    async def _poll_mop(self, poll_ms: int, results: list, first_offsets: dict[int, int],
                        next_offsets: dict[int, int]) -> list:
        try:
            consumer = await self._started(self._consumer_)
        except _StartFailed as exc:
            raise _BodyError(Outcome("fail", ["client-start", exc.detail]), results + [["poll", {}]]) from None
        wait_ms = 0 if self._all_at_end(consumer) else poll_ms
        try:
            async with asyncio.timeout(max(wait_ms, poll_ms) / 1000):  # see AiokafkaQueueClient._poll
                batches = await consumer.getmany(timeout_ms=wait_ms, max_records=self.max_poll_records)
        except TimeoutError:
            batches = {}
        except (KafkaError, OSError) as exc:
            outcome = classify(exc)
            if outcome.error == "unknown-topic-or-partition":
                return ["poll", {}]  # Jepsen: polling a topic that does not exist yet reads nothing
            raise _BodyError(outcome, results + [["poll", {}]]) from None
        by_key, outcome = self._records_by_key(batches)
        for key, pairs in by_key.items():
            first_offsets.setdefault(key, pairs[0][0])
            next_offsets[key] = max(next_offsets.get(key, 0), pairs[-1][0] + 1)
        if outcome is not None:
            raise _BodyError(outcome, results + [["poll", by_key]])
        return ["poll", by_key]

    async def _commit(self, producer: KioTxnProducer, mops: list, results: list,
                      first_offsets: dict[int, int]) -> Completion:
        if producer.state is TxnState.ABORTABLE_ERROR:
            # The commit is never asked for, so this is an abort (librdkafka's txn_requires_abort).
            await self._rollback_consumer(first_offsets)
            return await self._aborted(producer, mops, results, Outcome("fail", "abortable-error"))
        try:
            await asyncio.wait_for(producer.commit_transaction(), COMMIT_TIMEOUT_S)
        except _CLIENT_ERRORS as exc:
            await self._rollback_consumer(first_offsets)
            # The commit may or may not have landed: indefinite, and this producer is done.
            return Completion("info", results + [list(m) for m in mops[len(results):]],
                              error=["commit", kio_classify(exc).error], end_process=True)
        for mop in results:
            if mop[0] == "poll":
                for key, pairs in mop[1].items():
                    if pairs:
                        self._positions[key] = max(self._positions.get(key, -1), pairs[-1][0] + 1)
        return Completion("ok", results)

    async def _aborted(self, producer: KioTxnProducer, mops: list, results: list, cause: Outcome) -> Completion:
        """Abort the transaction after `cause` (never asked to commit): the op's completion,
        `fail` whatever becomes of the abort. What was done keeps its results (sends with
        their offsets, polls with their records); the rest stays raw."""
        value = results + [list(m) for m in mops[len(results):]]
        label = cause.error if cause.error == "intentional" else ["error", cause.error]
        state = producer.state
        if cause.end_process or state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            return Completion("fail", value, error=["abort-failed", label, f"producer in state {state.value}"],
                              end_process=True)
        try:
            await asyncio.wait_for(producer.abort_transaction(), CALL_TIMEOUT_S)
        except _CLIENT_ERRORS as exc:
            # Never asked to commit, the transaction cannot commit: the coordinator aborts it
            # (transaction.timeout.ms, or the next InitProducerId of this id).
            return Completion("fail", value, error=["abort-failed", label, kio_classify(exc).error], end_process=True)
        return Completion("fail", value, error=["abort", label])

    async def _rollback_consumer(self, first_offsets: dict[int, int]) -> None:
        if self._consumer is not None and first_offsets:
            self._rollback(self._consumer, first_offsets)
