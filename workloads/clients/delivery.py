"""confluent-kafka clients for the delivery workload: a producer, or a group consumer that
processes batches and commits according to the commit mode."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from harness.generator import Completion, Invocation
from workloads.clients.confluent import (
    KeyMap, Sender, TopicCreator, close_with_timeout, consume_available, consumer_config, seek_to_first,
)
from workloads.clients.errors import classify, describe

log = logging.getLogger("logquake.client")


class DeliveryClient:
    def __init__(self, *, role: str, bootstrap_servers: str, client_config: dict[str, str], topic: str,
                 partitions: int, commit_mode: str, batch_size: int, poll_ms: int, topics: TopicCreator):
        self.role = role
        self.bootstrap_servers = bootstrap_servers
        self.client_config = client_config
        self.topic = topic
        self.commit_mode = commit_mode
        self.batch_size = batch_size
        self.poll_ms = poll_ms
        self.topics = topics
        # One topic: key k is partition k. KeyMap expects "<prefix><n>"; the delivery topic
        # has a fixed name, so keys are mapped directly.
        self._sender: Sender | None = None
        self._consumer: Consumer | None = None
        self._held: list[Any] = []  # polled messages not yet processed ("before" mode)
        self._processed_next: dict[int, int] = {}  # partition -> next offset after processed records
        self._rebalance_log: list[dict[str, Any]] = []
        self._partitions = partitions

    def invoke(self, invocation: Invocation) -> Completion:
        try:
            if invocation.f == "crash":
                self.close()
                return Completion("info", None, error="crash")
            if invocation.f == "send":
                return self._send(invocation.value)
            if invocation.f == "process":
                completion = self._process()
            elif invocation.f == "commit":
                completion = self._commit()
            else:
                return Completion("fail", invocation.value, error=["unsupported-op", invocation.f])
        except KafkaException as exc:
            outcome = describe(exc)
            completion = Completion(outcome.type, None, error=outcome.error, end_process=outcome.end_process)
        if self._rebalance_log:
            completion = Completion(completion.type, completion.value, completion.error,
                                    {**completion.extra, "rebalance_log": self._rebalance_log}, completion.end_process)
            self._rebalance_log = []
        return completion

    # -- producer
    def _send(self, mops: list) -> Completion:
        if self._sender is None:
            self.topics.ensure([self.topic])
            self._sender = Sender(self.client_config, self.bootstrap_servers, _SingleTopic(self.topic))
        done: list = []
        for i, (_, key, value) in enumerate(mops):
            outcome, offset = self._sender.send(key, value)
            if outcome is not None:
                return Completion(outcome.type, done + [list(m) for m in mops[i:]], error=outcome.error,
                                  end_process=outcome.end_process)
            done.append(["send", key, [offset, value]])
        return Completion("ok", done)

    # -- consumer
    def _consumer_(self) -> Consumer:
        if self._consumer is None:
            self.topics.ensure([self.topic])
            self._consumer = Consumer(consumer_config(self.client_config, self.bootstrap_servers))
            self._consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                     on_lost=self._on_lost)
        return self._consumer

    def _poll(self) -> tuple[list[Any], Completion | None]:
        messages = consume_available(self._consumer_(), self.batch_size, self.poll_ms / 1000)
        good = []
        for msg in messages:
            err = msg.error()
            if err is None:
                if msg.topic() == self.topic:
                    good.append(msg)
                continue
            if err.code() in (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                              KafkaError._RESOLVE, KafkaError.NETWORK_EXCEPTION):
                continue  # connection trouble librdkafka recovers from by itself
            outcome = classify(err)
            return good, Completion(outcome.type, None, error=outcome.error, end_process=outcome.end_process)
        return good, None

    def _process(self) -> Completion:
        if self.commit_mode == "before":
            batch, self._held = self._held, []
        else:
            batch, failure = self._poll()
            if failure is not None:
                self._rewind(batch)
                return failure
        processed = []
        for msg in batch:
            processed.append(["process", msg.partition(), [msg.offset(), int(msg.value())]])
            self._processed_next[msg.partition()] = msg.offset() + 1
        return Completion("ok", processed)

    def _commit(self) -> Completion:
        if self.commit_mode == "before":
            batch, failure = self._poll()
            if failure is not None:
                self._rewind(batch)
                return failure
            offsets = {}
            for msg in batch:
                offsets[msg.partition()] = msg.offset() + 1
            if not offsets:
                return Completion("ok", {})
            try:
                self._commit_offsets(offsets)
            except KafkaException as exc:
                # Not committed: put the consumer back so these records are not silently skipped.
                self._rewind(batch)
                raise exc
            self._held = batch
            return Completion("ok", {str(k): v for k, v in sorted(offsets.items())})
        offsets, self._processed_next = self._processed_next, {}
        if not offsets:
            return Completion("ok", {})
        self._commit_offsets(offsets)
        return Completion("ok", {str(k): v for k, v in sorted(offsets.items())})

    def _commit_offsets(self, offsets: dict[int, int]) -> None:
        self._consumer_().commit(offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())],
                                 asynchronous=False)

    def _rewind(self, batch: list[Any]) -> None:
        seek_to_first(self._consumer_(), self.topic, batch)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalance_log.append({"type": "assigned", "keys": sorted(tp.partition for tp in partitions)})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalance_log.append({"type": "revoked", "keys": sorted(tp.partition for tp in partitions)})
        # Records processed from revoked partitions can no longer be committed by us.
        for tp in partitions:
            self._processed_next.pop(tp.partition, None)
        self._held = [m for m in self._held if m.partition() not in {tp.partition for tp in partitions}]

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_revoke(consumer, partitions)
        self._rebalance_log[-1]["type"] = "lost"

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        if self._consumer is not None:
            close_with_timeout(self._consumer.close, "consumer")
            self._consumer = None
        self._held = []
        self._processed_next = {}


class _SingleTopic(KeyMap):
    """Key k is partition k of one named topic."""

    def __init__(self, topic: str):
        super().__init__(topic_prefix=topic, partitions_per_topic=1)

    def topic(self, key: int) -> str:
        return self.topic_prefix

    def partition(self, key: int) -> int:
        return key

    def key(self, topic: str, partition: int) -> int | None:
        return partition if topic == self.topic_prefix else None
