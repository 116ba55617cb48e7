"""The queue workload's client on aiokafka, for simulated runs (`logquake test --sim`).

The same micro-ops in and Jepsen outcomes out as the confluent-kafka `QueueClient`
(workloads/clients/confluent.py), as coroutines: a lazily started idempotent producer and a
consumer per process, topics made on demand, manual assign (keeping the positions of keys
that stay) or group subscribe (committing after each poll that read something unless
auto-commit is on), a poll that returns at once when every assigned key is known to be at
its end, and a rollback of what a failed poll read. Errors go through `aiokafka_errors`.

Determinism: the record timestamp is the simulated host's wall clock (aiokafka's C record
builder would read the real one), topics of a subscription are passed sorted, and every
collection the client iterates to build requests or history values is sorted first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from harness.generator import Completion, Invocation
from workloads.clients.aiokafka_closing_rejoin import no_rejoin_while_closing
from workloads.clients.aiokafka_config import AiokafkaSettings
from workloads.clients.aiokafka_errors import classify, classify_send
from workloads.clients.aiokafka_stale_leader import refresh_metadata_on_stale_leader
from workloads.clients.confluent import KeyMap
from workloads.clients.errors import Outcome

log = logging.getLogger("logquake.client.aiokafka")

CLOSE_TIMEOUT_S = 5.0  # a close that waits on an unreachable broker must not hold the run
START_TIMEOUT_S = 10.0  # a client start (bootstrap metadata) that cannot finish is a failed op
TOPIC_ALREADY_EXISTS = 36


class TopicError(Exception):
    def __init__(self, outcome: Outcome):
        super().__init__(str(outcome.error))
        self.outcome = outcome


@dataclass
class AioTopicCreator:
    """Creates topics on demand, as Jepsen's client does before the first send to a key.
    One per simulated run: the topics it knows exist are known to every process."""

    bootstrap_servers: str
    settings: AiokafkaSettings
    partitions_per_topic: int
    replication_factor: int
    topic_config: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    _known: set[str] = field(default_factory=set)
    _admin: AIOKafkaAdminClient | None = None

    async def ensure(self, topics: Iterable[str]) -> None:
        missing = sorted(set(topics).difference(self._known))
        if not missing:
            return
        try:
            if self._admin is None:
                admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id="logquake-admin",
                                            **self.settings.admin)
                await asyncio.wait_for(admin.start(), self.timeout_s)
                self._admin = admin
            new = [NewTopic(t, self.partitions_per_topic, self.replication_factor, topic_configs=dict(self.topic_config))
                   for t in missing]
            response = await asyncio.wait_for(self._admin.create_topics(new, timeout_ms=int(self.timeout_s * 1000)),
                                              self.timeout_s + 1)
        except (KafkaError, asyncio.TimeoutError, OSError) as exc:
            # The send was never attempted, so the op definitely did not happen.
            raise TopicError(Outcome("fail", ["create-topic", f"{type(exc).__name__}: {exc}"])) from None
        for entry in response.topic_errors:
            topic, code = entry[0], entry[1]
            if code not in (0, TOPIC_ALREADY_EXISTS):
                message = entry[2] if len(entry) > 2 else ""
                raise TopicError(Outcome("fail", ["create-topic", f"{topic}: error {code} {message or ''}".strip()]))
            self._known.add(topic)

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await _close_quietly(admin.close(), "admin")


async def _close_quietly(closing: Any, what: str) -> None:
    try:
        await asyncio.wait_for(closing, CLOSE_TIMEOUT_S)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        # aiokafka 0.14: a consumer's stop() re-raises the CancelledError of a fetch task
        # that was in its retry backoff (README, the spike's known gaps); the close is done.
        log.debug("%s close: a cancelled internal task", what)
    except Exception as exc:  # closing is best effort; the outcome is already recorded
        log.debug("%s close: %s: %s", what, type(exc).__name__, exc)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, client: "AiokafkaQueueClient"):
        self.client = client

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.client._rebalanced("revoked", revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.client._rebalanced("assigned", assigned)


class AiokafkaQueueClient:
    """Jepsen's queue client on aiokafka: a producer and a consumer per process."""

    def __init__(self, *, process: int | str, bootstrap_servers: str, settings: AiokafkaSettings, keys: KeyMap,
                 topics: AioTopicCreator, wall_ms: Callable[[], int], max_poll_records: int = 500,
                 default_poll_ms: int = 100):
        self.process = process
        self.bootstrap_servers = bootstrap_servers
        self.settings = settings
        self.keys = keys
        self.topics = topics
        self.wall_ms = wall_ms
        self.max_poll_records = max_poll_records
        self.default_poll_ms = default_poll_ms
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._subscribed = False
        # Next offset per key as of the last ok poll or assign: what a kept key resumes from.
        self._positions: dict[int, int] = {}
        self._assigned: set[int] = set()
        self._rebalance_log: list[dict[str, Any]] = []
        self._auto_commit = bool(settings.consumer.get("enable_auto_commit", True))
        self._read_committed = settings.consumer.get("isolation_level") == "read_committed"
        self._request_timeout_s = settings.consumer.get("request_timeout_ms", 40_000) / 1000

    # -- lazily started halves: a process that only polls never starts a producer
    async def _producer_(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, client_id=f"logquake-{self.process}",
                                        **self.settings.producer)
            self._producer = producer  # closed by close() even if start fails half-way
            await asyncio.wait_for(producer.start(), START_TIMEOUT_S)
        return self._producer

    async def _consumer_(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap_servers, client_id=f"logquake-{self.process}",
                                        max_poll_records=self.max_poll_records, **self.settings.consumer)
            self._consumer = consumer
            await asyncio.wait_for(consumer.start(), START_TIMEOUT_S)
            refresh_metadata_on_stale_leader(consumer)  # KAFKA-9535's rule: aiokafka_stale_leader
            no_rejoin_while_closing(consumer)  # the Java consumer's: aiokafka_closing_rejoin
        return self._consumer

    def _tp(self, key: int) -> TopicPartition:
        return TopicPartition(self.keys.topic(key), self.keys.partition(key))

    async def invoke(self, invocation: Invocation) -> Completion:
        f = invocation.f
        try:
            if f == "send":
                completion = await self._send(invocation.value)
            elif f == "poll":
                completion = await self._poll(invocation)
            elif f == "assign":
                completion = await self._assign(invocation)
            elif f == "subscribe":
                completion = await self._subscribe(invocation)
            elif f == "crash":
                await self.close()
                return Completion("info", None, error="crash")
            else:
                return Completion("fail", invocation.value, error=["unsupported-op", f])
        except TopicError as exc:
            completion = Completion(exc.outcome.type, invocation.value, error=exc.outcome.error)
        except _StartFailed as exc:
            # The client never reached the cluster: nothing this op asked for was attempted.
            completion = Completion("fail", invocation.value, error=["client-start", exc.detail])
        if self._rebalance_log:
            completion = Completion(completion.type, completion.value, completion.error,
                                    {**completion.extra, "rebalance_log": self._rebalance_log}, completion.end_process)
            self._rebalance_log = []
        return completion

    async def _started(self, start: Callable[[], Any]) -> Any:
        try:
            return await start()
        except (KafkaError, asyncio.TimeoutError, OSError) as exc:
            raise _StartFailed(f"{type(exc).__name__}: {exc}") from None

    async def _send(self, mops: list) -> Completion:
        await self.topics.ensure(self.keys.topic(k) for _, k, _ in mops)
        producer = await self._started(self._producer_)
        done: list = []
        for i, (_, key, value) in enumerate(mops):
            outcome, offset = await self._send_one(producer, key, value)
            if outcome is not None:
                rest = [list(m) for m in mops[i:]]  # what was acknowledged stays recorded
                return Completion(outcome.type, done + rest, error=outcome.error, end_process=outcome.end_process)
            done.append(["send", key, [offset, value]])
        return Completion("ok", done)

    async def _send_one(self, producer: AIOKafkaProducer, key: int, value: int) -> tuple[Outcome | None, int | None]:
        delivery: asyncio.Future | None = None
        try:
            # One deadline for the whole send, as librdkafka's message.timeout.ms: aiokafka's
            # send() itself waits for the topic's metadata, with no bound while no broker
            # answers. shield: the deadline must not cancel aiokafka's own batch future.
            async with asyncio.timeout(self.settings.send_timeout_s):
                delivery = await producer.send(self.keys.topic(key), value=str(value).encode(), key=str(key).encode(),
                                               partition=self.keys.partition(key), timestamp_ms=self.wall_ms())
                metadata = await asyncio.shield(delivery)
        except TimeoutError:
            if delivery is not None:  # its outcome comes after ours: retrieve it, unreported
                delivery.add_done_callback(lambda f: f.cancelled() or f.exception())
            return Outcome("info", "timeout"), None
        except (KafkaError, OSError) as exc:
            return classify_send(exc), None
        if self.keys.key(metadata.topic, metadata.partition) != key:
            return Outcome("info", ["wrong-partition", f"{metadata.topic}/{metadata.partition}"]), None
        offset = metadata.offset
        return None, (offset if offset is not None and offset >= 0 else None)

    async def _poll(self, invocation: Invocation) -> Completion:
        consumer = await self._started(self._consumer_)
        poll_ms = int(invocation.extra.get("poll_ms", self.default_poll_ms))
        results: list = []
        first_offsets: dict[int, int] = {}
        for _ in invocation.value:
            wait_ms = 0 if self._all_at_end(consumer) else poll_ms
            try:
                # getmany waits for a group assignment without a bound (all brokers down, it
                # never returns); a librdkafka poll returns empty when its time is up.
                async with asyncio.timeout(max(wait_ms, poll_ms) / 1000):
                    batches = await consumer.getmany(timeout_ms=wait_ms, max_records=self.max_poll_records)
            except TimeoutError:
                batches = {}
            except (KafkaError, OSError) as exc:
                outcome = classify(exc)
                self._rollback(consumer, first_offsets)
                return Completion(outcome.type, results + [["poll", {}]], error=outcome.error,
                                  end_process=outcome.end_process)
            by_key, outcome = self._records_by_key(batches)
            for key, pairs in by_key.items():
                first_offsets.setdefault(key, pairs[0][0])
            results.append(["poll", by_key])
            if outcome is not None:
                self._rollback(consumer, first_offsets)
                return Completion(outcome.type, results, error=outcome.error, end_process=outcome.end_process)
        for mop in results:
            for key, pairs in mop[1].items():
                if pairs:
                    self._positions[key] = max(self._positions.get(key, -1), pairs[-1][0] + 1)
        completion = Completion("ok", results)
        if self._subscribed and not self._auto_commit and first_offsets:
            try:
                async with asyncio.timeout(self._request_timeout_s):  # aiokafka's commit retries without a bound
                    await consumer.commit()
            except (KafkaError, OSError, TimeoutError) as exc:
                # Jepsen: the poll happened; the failed commit is noted, not fatal.
                completion = Completion("ok", results, error=["consumer-commit", f"{type(exc).__name__}: {exc}"])
        return completion

    def _records_by_key(self, batches: dict[TopicPartition, list[Any]]) -> tuple[dict[int, list[list[int]]], Outcome | None]:
        out: dict[int, list[list[int]]] = {}
        outcome: Outcome | None = None
        for tp in sorted(batches):
            key = self.keys.key(tp.topic, tp.partition)
            if key is None:
                continue
            pairs: list[list[int]] = []
            for record in batches[tp]:
                try:
                    value = int(record.value)
                except (TypeError, ValueError):
                    # Not a value this harness wrote: the outcome is unknown; the records
                    # around it are kept (the consumer has moved past them).
                    if outcome is None:
                        outcome = Outcome("info", ["unparseable-value", repr(record.value)[:80]])
                    continue
                pairs.append([record.offset, value])
            if pairs:
                out[key] = pairs
        return out, outcome

    def _all_at_end(self, consumer: AIOKafkaConsumer) -> bool:
        """Whether every assigned key's next offset has reached the end the last fetch
        reported (the high watermark, or the last stable offset when reading committed)."""
        if not self._assigned:
            return False
        for key in self._assigned:
            tp = self._tp(key)
            end = consumer.last_stable_offset(tp) if self._read_committed else consumer.highwater(tp)
            position = self._positions.get(key)
            if end is None or position is None or position < end:
                return False
        return True

    def _rollback(self, consumer: AIOKafkaConsumer, first_offsets: dict[int, int]) -> None:
        """A poll that did not complete ok leaves the consumer where the last ok one did."""
        for key, offset in sorted(first_offsets.items()):
            try:
                consumer.seek(self._tp(key), offset)
            except (KafkaError, AssertionError, ValueError) as exc:  # no longer assigned
                log.debug("rollback seek of key %s to %s failed: %s", key, offset, exc)

    async def _assign(self, invocation: Invocation) -> Completion:
        keys = sorted(set(invocation.value))
        await self.topics.ensure(self.keys.topic(k) for k in keys)
        consumer = await self._started(self._consumer_)
        seek_to_beginning = bool(invocation.extra.get("seek_to_beginning"))
        # aiokafka's assign replaces everything; keys that stay keep their position, as
        # the Java client's assign does. New keys start where aiokafka finds them (the
        # group's committed offset, else auto.offset.reset).
        kept = {} if seek_to_beginning or self._subscribed else {k: p for k, p in self._positions.items() if k in keys}
        if self._subscribed:
            # A consumer that was subscribed is replaced rather than switched to a manual
            # assignment: in aiokafka 0.14, unsubscribe() ends the group heartbeat task but
            # leaves it in the list the coordination routine waits on, which with a manual
            # assignment then returns at once, forever (a busy loop; on the virtual clock a
            # hang, SimulationSpinning). Nothing is lost: no position is kept from a group.
            self._consumer = None
            self._subscribed = False
            await _close_quietly(consumer.stop(), "consumer")
            consumer = await self._started(self._consumer_)
        tps = [self._tp(k) for k in keys]
        consumer.assign(tps)
        for key, offset in sorted(kept.items()):
            consumer.seek(self._tp(key), offset)
        if seek_to_beginning:
            try:
                async with asyncio.timeout(self._request_timeout_s):  # it waits for the offset lookup
                    await consumer.seek_to_beginning(*tps)
            except (KafkaError, OSError, TimeoutError) as exc:
                # The assignment has changed; where it starts is unknown.
                return Completion("info", invocation.value, error=classify(exc).error)
        self._positions = dict(kept)
        self._assigned = set(keys)
        return Completion("ok", invocation.value)

    async def _subscribe(self, invocation: Invocation) -> Completion:
        topics = sorted({self.keys.topic(k) for k in invocation.value})
        await self.topics.ensure(topics)
        consumer = await self._started(self._consumer_)
        consumer.unsubscribe()  # aiokafka refuses a subscription over a manual assignment
        self._positions = {}
        self._assigned = set()
        consumer.subscribe(topics=topics, listener=_Listener(self))
        self._subscribed = True
        return Completion("ok", invocation.value)

    def _rebalanced(self, kind: str, partitions: Any) -> None:
        keys = sorted(k for k in (self.keys.key(tp.topic, tp.partition) for tp in partitions) if k is not None)
        self._rebalance_log.append({"type": kind, "keys": keys})
        if kind == "assigned":
            self._assigned.update(keys)
        else:
            self._assigned.difference_update(keys)
            for key in keys:
                self._positions.pop(key, None)

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        if producer is not None:
            await _close_producer(producer)
        if consumer is not None:
            await _close_quietly(consumer.stop(), "consumer")
        self._subscribed = False
        self._positions = {}
        self._assigned = set()


async def _close_producer(producer: AIOKafkaProducer) -> None:
    """stop() first delivers what is still queued; a retired process's sends are already
    recorded as indefinite, so after CLOSE_TIMEOUT_S the producer's sender and connections
    are closed without them (as the confluent client purges its queue), or its retries
    would go on for the rest of the run."""
    try:
        await asyncio.wait_for(asyncio.shield(producer.stop()), CLOSE_TIMEOUT_S)
        return
    except asyncio.TimeoutError:
        log.debug("producer stop did not finish in %.0f s: closing its sender", CLOSE_TIMEOUT_S)
    except Exception as exc:
        log.debug("producer stop: %s: %s", type(exc).__name__, exc)
    sender = getattr(producer, "_sender", None)
    if sender is not None:
        await _close_quietly(sender.close(), "producer sender")
    await _close_quietly(producer.client.close(), "producer connections")


class _StartFailed(Exception):
    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail
