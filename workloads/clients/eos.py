"""confluent-kafka clients for the eos workload (workloads/eos.py): one class for every role,
so whichever thread is free can run the verifier.

  send    an idempotent producer writes one value to an input partition
  copy    the copier: poll a batch from the input (a read_committed group consumer), then one
          transaction that produces every value to the output's same-numbered partition,
          sends the consumer offsets to the transaction and commits (txn=false: produce,
          wait for the acknowledgements, commit the offsets with the consumer)
  crash   drop the copier's consumer and producer (the consumer leaves the group)
  poll    the verifier: both topics from the beginning to their end, read_committed

Outcomes of a copy follow workloads/clients/txn.py's rule: before commit_transaction is
called nothing can commit the transaction, so an error there is a definite `fail` (we abort;
if the abort fails the coordinator aborts it when this thread's next producer fences the id
or the transaction times out). A crash inside the transaction (`extra.crash`) abandons it the
same way. Every transactional call runs bounded (workloads/clients/txn.py: librdkafka's
send_offsets_to_transaction can block past its timeout with the group coordinator down): one
that hangs abandons the producer and ends the process, the op `fail` unless the hung call was
the commit. Only the commit can leave the outcome open: retriable commit errors are retried for
COMMIT_DEADLINE_S, one that requires an abort is `fail` once the abort succeeds, anything else
is `info`. A copy that is not ok seeks the consumer back to the first offset it polled in
every partition, so those records are copied again (by this copier, or by the next owner of
the partition, which starts from the group's committed offset).
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from harness.generator import Completion, Invocation
from workloads.clients.confluent import (
    KeyMap, Sender, TopicCreator, TopicError, close_with_timeout, consume_available, consumer_config,
    producer_config, seek_to_first,
)
from workloads.clients.errors import Outcome, classify, describe
from workloads.clients.txn import BoundedTxnCalls

log = logging.getLogger("logquake.client.eos")

INIT_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 10.0
COMMIT_DEADLINE_S = 20.0
DELIVERY_DEADLINE_S = 12.0  # message.timeout.ms (10 s) and a margin: every report arrives by then
VERIFY_SETTLE_S = 30.0  # how long the verifier waits for open transactions to end
VERIFY_READ_S = 60.0  # and for the read of both topics to reach their ends
# A copy writes input value v as `v << COPY_ID_BITS | copy id` (workloads/eos.py's history
# contract; checkers/eos.py decodes it): every copy's records are distinct values.
COPY_ID_BITS = 20
_copy_ids = itertools.count(1)  # shared by every client of the run: ids unique in the run
# Consumer events about connections: librdkafka reconnects by itself.
_TRANSIENT = (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
              KafkaError.NETWORK_EXCEPTION)


class EosKeys(KeyMap):
    """Input partition p is key p; output partition p is key `partitions + p`."""

    def __init__(self, input_topic: str, output_topic: str, partitions: int):
        super().__init__(topic_prefix=input_topic, partitions_per_topic=partitions)
        object.__setattr__(self, "output_topic", output_topic)

    def topic(self, key: int) -> str:
        return self.topic_prefix if key < self.partitions_per_topic else self.output_topic  # type: ignore[attr-defined]

    def partition(self, key: int) -> int:
        return key % self.partitions_per_topic

    def key(self, topic: str, partition: int) -> int | None:
        if topic == self.topic_prefix:
            return partition
        if topic == self.output_topic:  # type: ignore[attr-defined]
            return self.partitions_per_topic + partition
        return None

    def output_key(self, input_key: int) -> int:
        return self.partitions_per_topic + input_key


class _Abort(Exception):
    """An error before commit_transaction: the transaction cannot have committed."""

    def __init__(self, outcome: Outcome):
        super().__init__(str(outcome.error))
        self.outcome = outcome


def _kafka_error(exc: BaseException) -> KafkaError | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], KafkaError) else None


class EosClient(BoundedTxnCalls):
    def __init__(self, *, bootstrap_servers: str, client_config: dict[str, str], input_topic: str,
                 output_topic: str, partitions: int, batch_size: int, poll_ms: int, topics: TopicCreator,
                 transactional_id: str | None):
        self.bootstrap_servers = bootstrap_servers
        self.client_config = client_config
        self.keys = EosKeys(input_topic, output_topic, partitions)
        self.input_topic, self.output_topic, self.partitions = input_topic, output_topic, partitions
        self.batch_size = batch_size
        self.poll_ms = poll_ms
        self.topics = topics
        self.transactional_id = transactional_id
        self._sender: Sender | None = None  # the input producer
        self._producer: Producer | None = None  # the copier's producer
        self._ready = False  # init_transactions succeeded on _producer
        self._hung = False  # a transactional call of _producer did not return
        self._consumer: Consumer | None = None
        self._rebalance_log: list[dict[str, Any]] = []

    def invoke(self, invocation: Invocation) -> Completion:
        try:
            if invocation.f == "crash":
                self.close()
                return Completion("info", None, error="crash")
            if invocation.f == "send":
                completion = self._send(invocation.value)
            elif invocation.f == "copy":
                completion = self._copy(invocation)
            elif invocation.f == "poll":
                completion = self._verify()
            else:
                return Completion("fail", invocation.value, error=["unsupported-op", invocation.f])
        except TopicError as exc:
            completion = Completion(exc.outcome.type, None, error=exc.outcome.error)
        if self._rebalance_log:
            completion = Completion(completion.type, completion.value, completion.error,
                                    {**completion.extra, "rebalance_log": self._rebalance_log}, completion.end_process)
            self._rebalance_log = []
        return completion

    # -- input producer
    def _send(self, mops: list) -> Completion:
        if self._sender is None:
            self.topics.ensure([self.input_topic])
            self._sender = Sender(self.client_config, self.bootstrap_servers, self.keys)
        (_, key, value), = mops
        outcome, offset = self._sender.send(key, value)
        if outcome is not None:
            return Completion(outcome.type, mops, error=outcome.error, end_process=outcome.end_process)
        return Completion("ok", [["send", key, [offset, value]]])

    # -- copier
    def _consumer_(self) -> Consumer:
        if self._consumer is None:
            self.topics.ensure([self.input_topic, self.output_topic])
            self._consumer = Consumer(consumer_config(self.client_config, self.bootstrap_servers))
            self._consumer.subscribe([self.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                     on_lost=self._on_lost)
        return self._consumer

    def _producer_(self) -> Producer:
        if self._producer is None:
            config = dict(self.client_config)
            if self.transactional_id is not None:
                config["transactional.id"] = self.transactional_id
            self._producer = Producer(producer_config(config, self.bootstrap_servers))
            self._ready = self.transactional_id is None
        if not self._ready:
            # Fences this thread's earlier producer and aborts the transaction it left open.
            producer = self._producer
            self._call(lambda: producer.init_transactions(INIT_TIMEOUT_S), INIT_TIMEOUT_S, "init_transactions")
            self._ready = True
        return self._producer

    def _copy(self, invocation: Invocation) -> Completion:
        completion = self._copy_(invocation)
        if self._hung:
            # The producer is stuck inside librdkafka: drop it (never touch it again) and end
            # the process; the thread's next copier fences its transactional.id.
            self._producer, self._ready, self._hung = None, False, False
            completion = Completion(completion.type, completion.value, completion.error, completion.extra, True)
        return completion

    def _copy_(self, invocation: Invocation) -> Completion:
        try:
            producer = self._producer_()
        except (KafkaException, RuntimeError) as exc:
            outcome = describe(exc)
            return Completion("fail", None, error=["init-transactions", outcome.error], end_process=outcome.end_process)
        consumer = self._consumer_()
        try:
            messages = consume_available(consumer, self.batch_size, self.poll_ms / 1000)
        except (KafkaException, RuntimeError) as exc:
            outcome = describe(exc)
            return Completion("fail", None, error=["poll", outcome.error], end_process=outcome.end_process)
        records: list[Any] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                if msg.topic() == self.input_topic:
                    records.append(msg)
            elif err.code() not in _TRANSIENT:
                self._rewind(records)
                outcome = classify(err)
                return Completion("fail", None, error=["poll", outcome.error], end_process=outcome.end_process)
        if not records:
            return Completion("ok", [])
        # The group generation whose records these are: a rebalance before the offsets are sent
        # makes the coordinator refuse them (KIP-447), and the copy aborts.
        metadata = consumer.consumer_group_metadata()
        polled: dict[int, list[list[int]]] = {}
        for msg in records:
            polled.setdefault(msg.partition(), []).append([msg.offset(), int(msg.value())])
        value: list = [["poll", polled]]
        if self.transactional_id is None:
            return self._copy_plain(producer, consumer, records, value, crash=invocation.extra.get("crash"))
        try:
            try:
                self._call(producer.begin_transaction, CALL_TIMEOUT_S, "begin_transaction")
            except (KafkaException, RuntimeError) as exc:
                raise _Abort(describe(exc)) from None
            value += self._produce(producer, records)
            offsets = self._next_offsets(records)
            stall_s = float(invocation.extra.get("stall_s", 0))
            if stall_s > 0:
                # Not polling: the consumer leaves the group after max.poll.interval.ms and the
                # partitions move on; we come back as a zombie with the old generation's metadata.
                time.sleep(stall_s)
            try:
                self._call(lambda: producer.send_offsets_to_transaction(offsets, metadata, CALL_TIMEOUT_S),
                           CALL_TIMEOUT_S, "send_offsets_to_transaction")
            except (KafkaException, RuntimeError) as exc:
                raise _Abort(describe(exc)) from None
            if invocation.extra.get("crash") == "before-commit":
                # Killed with its transaction open: never asked to commit, so it cannot commit.
                self._rewind(records)
                self.close()
                return Completion("fail", value, error=["crash", "before-commit"], end_process=True)
        except _Abort as err:
            self._rewind(records)
            return self._aborted(producer, value, err.outcome)
        return self._commit(producer, records, value)

    def _produce(self, producer: Producer, records: list[Any]) -> list:
        """Produce every record to the output and wait for every report; the sends made, in
        order. Raises _Abort on the first failed report."""
        reports: list[tuple[KafkaError | None, Any] | None] = [None] * len(records)
        copy_id = next(_copy_ids) % (1 << COPY_ID_BITS)
        values = [int(msg.value()) << COPY_ID_BITS | copy_id for msg in records]

        def on_delivery(i: int):
            return lambda err, msg: reports.__setitem__(i, (err, msg))

        for i, msg in enumerate(records):
            producer.produce(self.output_topic, value=str(values[i]).encode(), key=msg.key(),
                             partition=msg.partition(), on_delivery=on_delivery(i))
        deadline = time.monotonic() + DELIVERY_DEADLINE_S
        while any(r is None for r in reports):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Abort(Outcome("fail", "delivery-timeout"))
            producer.poll(min(remaining, 0.05))
        sends = []
        for msg, value, report in zip(records, values, reports):
            err, out = report  # type: ignore[misc]
            if err is not None:
                raise _Abort(classify(err))
            offset = out.offset()
            sends.append(["send", self.keys.output_key(msg.partition()),
                          [offset if offset is not None and offset >= 0 else None, value]])
        return sends

    def _next_offsets(self, records: list[Any]) -> list[TopicPartition]:
        nxt: dict[int, int] = {}
        for msg in records:
            nxt[msg.partition()] = max(nxt.get(msg.partition(), 0), msg.offset() + 1)
        return [TopicPartition(self.input_topic, p, o) for p, o in sorted(nxt.items())]

    def _commit(self, producer: Producer, records: list[Any], value: list) -> Completion:
        deadline = time.monotonic() + COMMIT_DEADLINE_S
        while True:
            try:
                self._call(lambda: producer.commit_transaction(CALL_TIMEOUT_S), CALL_TIMEOUT_S, "commit_transaction")
                return Completion("ok", value)
            except (KafkaException, RuntimeError) as exc:
                err = _kafka_error(exc)
                if err is not None and err.txn_requires_abort():
                    self._rewind(records)
                    return self._aborted(producer, value, classify(err), committing=True)
                if err is not None and err.retriable() and not err.fatal() and time.monotonic() < deadline:
                    log.debug("commit of %s: retriable %s", self.transactional_id, err)
                    continue
                self._rewind(records)
                return Completion("info", value, error=["commit", describe(exc).error], end_process=True)

    def _aborted(self, producer: Producer, value: list, cause: Outcome, *, committing: bool = False) -> Completion:
        try:
            if cause.end_process or self._hung:
                raise RuntimeError("the producer cannot abort: " + ("a call hung" if self._hung else "fatal error"))
            self._call(lambda: producer.abort_transaction(CALL_TIMEOUT_S), CALL_TIMEOUT_S, "abort_transaction")
        except (KafkaException, RuntimeError) as exc:
            abort_error = describe(exc).error
            # Asked to commit, and neither the commit nor the abort is known to have landed:
            # unknown. Never asked to commit: the coordinator aborts it.
            return Completion("info" if committing else "fail", value,
                              error=["abort-failed", cause.error, abort_error], end_process=True)
        return Completion("fail", value, error=["abort", cause.error])

    def _copy_plain(self, producer: Producer, consumer: Consumer, records: list[Any], value: list,
                    crash: str | None) -> Completion:
        """txn=false: produce, then commit the offsets with the consumer (at-least-once: a
        crash or a refused commit after producing copies the records again)."""
        try:
            value += self._produce(producer, records)
        except _Abort as err:
            self._rewind(records)
            # Some records may have been written before the failure: unknown, not failed.
            return Completion("info", value, error=err.outcome.error, end_process=True)
        if crash == "before-commit":
            # Killed between producing and committing the offsets: the copies are written (ok),
            # and the partition's next owner copies the records again.
            self.close()
            return Completion("ok", value, extra={"crash": "before-offset-commit"}, end_process=True)
        try:
            consumer.commit(offsets=self._next_offsets(records), asynchronous=False)
        except KafkaException as exc:
            self._rewind(records)
            # The copies are written whatever happened to the offsets: the op took effect.
            return Completion("ok", value, extra={"offset_commit": describe(exc).error})
        return Completion("ok", value)

    def _rewind(self, records: list[Any]) -> None:
        seek_to_first(self._consumer_(), self.input_topic, records)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalance_log.append({"type": "assigned", "keys": sorted(tp.partition for tp in partitions)})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalance_log.append({"type": "revoked", "keys": sorted(tp.partition for tp in partitions)})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalance_log.append({"type": "lost", "keys": sorted(tp.partition for tp in partitions)})

    # -- verifier
    def _verify(self) -> Completion:
        self.topics.ensure([self.input_topic, self.output_topic])
        tps = [TopicPartition(t, p) for t in (self.input_topic, self.output_topic) for p in range(self.partitions)]
        base = {**self.client_config, "group.id": f"{self.client_config.get('group.id', 'logquake-eos')}-verifier",
                "enable.auto.commit": "false", "enable.partition.eof": "true"}
        committed = Consumer(consumer_config({**base, "isolation.level": "read_committed"}, self.bootstrap_servers))
        uncommitted = Consumer(consumer_config({**base, "isolation.level": "read_uncommitted"}, self.bootstrap_servers))
        try:
            ends, open_txns = self._settled_ends(committed, uncommitted, tps)
            if open_txns:
                return Completion("fail", None, error=["open-transactions", open_txns])
            return self._read_to(committed, tps, ends)
        except KafkaException as exc:
            outcome = describe(exc)
            return Completion("fail", None, error=["verify", outcome.error])
        finally:
            close_with_timeout(committed.close, "verifier")
            close_with_timeout(uncommitted.close, "verifier")

    def _settled_ends(self, committed: Consumer, uncommitted: Consumer,
                      tps: list[TopicPartition]) -> tuple[dict[int, int], dict[str, list[int]]]:
        """Each partition's end once its last stable offset has reached its high watermark
        (no transaction open), or what is still open when VERIFY_SETTLE_S ran out."""
        deadline = time.monotonic() + VERIFY_SETTLE_S
        while True:
            ends: dict[int, int] = {}
            open_txns: dict[str, list[int]] = {}
            for tp in tps:
                key = self.keys.key(tp.topic, tp.partition)
                assert key is not None
                _, stable = committed.get_watermark_offsets(tp, timeout=CALL_TIMEOUT_S, cached=False)
                _, high = uncommitted.get_watermark_offsets(tp, timeout=CALL_TIMEOUT_S, cached=False)
                ends[key] = stable
                if stable != high:
                    open_txns[str(key)] = [stable, high]
            if not open_txns or time.monotonic() > deadline:
                return ends, open_txns
            time.sleep(0.5)

    def _read_to(self, consumer: Consumer, tps: list[TopicPartition], ends: dict[int, int]) -> Completion:
        consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in tps])
        read: dict[int, list[list[int]]] = {}
        reached = {key for key, end in ends.items() if end <= 0}
        deadline = time.monotonic() + VERIFY_READ_S
        while len(reached) < len(ends):
            if time.monotonic() > deadline:
                behind = {str(k): [read[k][-1][0] + 1 if read.get(k) else 0, ends[k]] for k in ends if k not in reached}
                return Completion("fail", None, error=["verify-timeout", behind])
            for msg in consume_available(consumer, 1000, 0.2):
                err = msg.error()
                key = self.keys.key(msg.topic(), msg.partition())
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and key is not None:
                        # At the end: the last records may be commit markers, which never
                        # reach the application.
                        if msg.offset() >= ends[key]:
                            reached.add(key)
                        continue
                    if err.code() in _TRANSIENT:
                        continue
                    return Completion("fail", None, error=["verify", classify(err).error])
                if key is None:
                    continue
                read.setdefault(key, []).append([msg.offset(), int(msg.value())])
                if msg.offset() + 1 >= ends[key]:
                    reached.add(key)
        return Completion("ok", [["poll", {k: read[k] for k in sorted(read)}]])

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        if self._producer is not None:
            # Dropped without an abort, as a killed process would: the next producer of this
            # transactional.id fences it.
            try:
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.flush(0)
            except Exception as exc:
                log.debug("copier producer close: %s", exc)
            self._producer = None
            self._ready = False
        if self._consumer is not None:
            close_with_timeout(self._consumer.close, "copier consumer")
            self._consumer = None
