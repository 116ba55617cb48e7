"""The queue workload's transactional client (Jepsen's `:txn?`): every op is one transaction.

One transactional producer per process (`transactional.id` unique per process, so a process
retired after an indefinite outcome comes back under a fresh id, as in Jepsen) and one
read_committed consumer. An op runs as:

    begin_transaction
    each micro-op in order: send (wait for its delivery report) or poll
        (an intentional abort before micro-op `extra.abort_at`, drawn by the generator)
    send_offsets_to_transaction(highest polled offset + 1 per key, the consumer's group metadata)
    commit_transaction

Outcomes. Before commit_transaction is called nothing can commit the transaction: an
error there (or the intentional abort) is a definite `fail` whether or not our abort call
succeeds, because a transaction the producer never asked to commit is aborted by the
coordinator (abort_transaction, the next InitProducerId of the id, or
`transaction.timeout.ms`). That is stronger than Jepsen, which calls the op indefinite when
its abort fails; it lets the aborted-read check (G1a) judge those sends too. Only the commit
can leave the outcome open: a retriable commit error (librdkafka's `retriable()`) is retried
until COMMIT_DEADLINE_S; one that `txn_requires_abort()` is aborted and is `fail` once the
abort succeeds (the coordinator refuses an abort of a transaction it began to commit);
anything else, a fatal error included, is `info`. A fatal error (`fatal()`: fenced, or
librdkafka's state machine broken) or an abort that did not succeed ends the process: its
producer can run no further transaction.

librdkafka's transactional calls can block past their own timeout (see `bounded`): a call
that does not return is abandoned with its producer, the op is completed as above (fail
before the commit, info from the commit on) and the process ends.

Consumer rollback (Jepsen's with-consumer-rollback): an op that is not ok seeks every key
it polled back to the first offset it polled there, so the next op reads those records
again, and a poll-skip between ops of a process stays an anomaly.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from harness.generator import Completion, Invocation
from workloads.clients.confluent import QueueClient, Sender, TopicError, consume_available, records_by_key
from workloads.clients.errors import Outcome, classify, describe

log = logging.getLogger("logquake.client.txn")

INIT_TIMEOUT_S = 10.0  # init_transactions: find the coordinator, bump the epoch, abort what the id left open
CALL_TIMEOUT_S = 10.0  # each begin/send_offsets/commit/abort call, as Jepsen's 10 s client timeouts
COMMIT_DEADLINE_S = 20.0  # retriable commit errors are retried this long before the op is info
# librdkafka's transactional calls can block past their own timeout (send_offsets_to_transaction
# with the group coordinator down: librdkafka issue #5456, open in 2.14; begin_transaction after a
# fatal error: #4420). Each runs on a helper thread; one still running this long after its timeout
# is abandoned with its producer, and the process ends.
HANG_GRACE_S = 5.0


class TxnCallHung(RuntimeError):
    """A librdkafka transactional call that did not return within its timeout plus HANG_GRACE_S."""


def bounded(call: Any, timeout_s: float, what: str) -> Any:
    """call() on a helper thread: its result, its exception re-raised, or TxnCallHung."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller as it is
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=f"txn-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s + HANG_GRACE_S)
    if not outcome:
        raise TxnCallHung(f"{what} did not return within {timeout_s + HANG_GRACE_S:g} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class _BodyError(Exception):
    """An error before commit_transaction: the transaction cannot have committed."""

    def __init__(self, outcome: Outcome, results: list):
        super().__init__(str(outcome.error))
        self.outcome = outcome
        self.results = results


def _kafka_error(exc: BaseException) -> KafkaError | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], KafkaError) else None


class BoundedTxnCalls:
    """For clients with a transactional producer: `_call` runs a librdkafka transactional call
    through `bounded`; one that hangs marks the client `_hung`, and the client then abandons
    its producer and ends the process (the queue and eos clients share this)."""

    transactional_id: str | None
    _hung: bool

    def _call(self, call: Any, timeout_s: float, what: str) -> Any:
        try:
            return bounded(call, timeout_s, what)
        except TxnCallHung:
            log.warning("%s: %s hung; abandoning the producer", self.transactional_id, what)
            self._hung = True
            raise


class TxnQueueClient(BoundedTxnCalls, QueueClient):
    """QueueClient whose send/poll/txn ops each run in one Kafka transaction."""

    def __init__(self, *, transactional_id: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.transactional_id = transactional_id
        self._ready = False  # init_transactions has succeeded on the current producer
        self._hung = False  # a transactional call did not return (see bounded)

    def _producer(self) -> Sender:
        if self._sender is None:
            config = {**self.client_config, "transactional.id": self.transactional_id}
            self._sender = Sender(config, self.bootstrap_servers, self.keys)
            self._ready = False
        if not self._ready:
            # A timed-out init may be retried on the same producer (librdkafka's doc); any
            # other error propagates, and the op fails before its transaction began.
            producer = self._sender.producer
            self._call(lambda: producer.init_transactions(INIT_TIMEOUT_S), INIT_TIMEOUT_S, "init_transactions")
            self._ready = True
        return self._sender

    def invoke(self, invocation: Invocation) -> Completion:
        if invocation.f not in ("send", "poll", "txn"):
            return super().invoke(invocation)
        try:
            completion = self._transaction(invocation)
        except TopicError as exc:
            completion = Completion(exc.outcome.type, invocation.value, error=exc.outcome.error)
        if self._hung and not completion.end_process:
            # The producer is stuck inside librdkafka: this process can run no further transaction.
            completion = Completion(completion.type, completion.value, completion.error, completion.extra, True)
        if self._rebalance_log:
            completion = Completion(completion.type, completion.value, completion.error,
                                    {**completion.extra, "rebalance_log": self._rebalance_log},
                                    completion.end_process)
            self._rebalance_log = []
        return completion

    def _transaction(self, invocation: Invocation) -> Completion:
        mops: list = invocation.value
        self.topics.ensure(self.keys.topic(m[1]) for m in mops if m[0] == "send")
        try:
            sender = self._producer()
        except (KafkaException, RuntimeError) as exc:
            outcome = describe(exc)
            # No transaction began, so nothing of this op happened.
            return Completion("fail", mops, error=["init-transactions", outcome.error],
                              end_process=outcome.end_process)
        producer = sender.producer
        first_offsets: dict[int, int] = {}
        next_offsets: dict[int, int] = {}
        results: list = []
        try:
            try:
                self._call(producer.begin_transaction, 0.0, "begin_transaction")
            except (KafkaException, RuntimeError) as exc:
                raise _BodyError(describe(exc), []) from None
            results = self._body(invocation, sender, first_offsets, next_offsets)
            if next_offsets:
                consumer = self._consumer_()
                try:
                    offsets = [self.keys.topic_partition(k, o) for k, o in sorted(next_offsets.items())]
                    group = consumer.consumer_group_metadata()
                    self._call(lambda: producer.send_offsets_to_transaction(offsets, group, CALL_TIMEOUT_S),
                            CALL_TIMEOUT_S, "send_offsets_to_transaction")
                except (KafkaException, RuntimeError) as exc:
                    raise _BodyError(describe(exc), results) from None
        except _BodyError as err:
            self._rollback(first_offsets)
            return self._aborted(mops, err.results, err.outcome)
        return self._commit(mops, results, first_offsets)

    def _body(self, invocation: Invocation, sender: Sender, first_offsets: dict[int, int],
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
                outcome, offset = sender.send(key, value)
                if outcome is not None:
                    raise _BodyError(outcome, results)
                results.append(["send", key, [offset, value]])
            else:
                results.append(self._poll_mop(poll_ms, results, first_offsets, next_offsets))
        return results

    def _poll_mop(self, poll_ms: int, results: list, first_offsets: dict[int, int],
                  next_offsets: dict[int, int]) -> list:
        consumer = self._consumer_()
        wait_s = 0.0 if self._all_at_end(consumer) else poll_ms / 1000
        try:
            messages = consume_available(consumer, self.max_poll_records, wait_s)
        except (KafkaException, RuntimeError) as exc:
            raise _BodyError(describe(exc), results + [["poll", {}]]) from None
        by_key, outcome = records_by_key(messages, self.keys, self._at_end if self._eof_events else None)
        for key, pairs in by_key.items():
            first_offsets.setdefault(key, pairs[0][0])
            next_offsets[key] = max(next_offsets.get(key, 0), pairs[-1][0] + 1)
        if outcome is not None and outcome.error == "unknown-topic-or-partition":
            outcome = None  # Jepsen: polling a topic that does not exist yet reads nothing
        if outcome is not None and outcome.type == "info" and isinstance(outcome.error, list) \
                and outcome.error[0] in ("disconnect", "network"):
            outcome = None  # consumer events about connections; librdkafka reconnects by itself
        if outcome is not None:
            raise _BodyError(outcome, results + [["poll", by_key]])
        return ["poll", by_key]

    def _commit(self, mops: list, results: list, first_offsets: dict[int, int]) -> Completion:
        producer = self._producer_handle()
        deadline = time.monotonic() + COMMIT_DEADLINE_S
        while True:
            try:
                self._call(lambda: producer.commit_transaction(CALL_TIMEOUT_S), CALL_TIMEOUT_S, "commit_transaction")
                break
            except (KafkaException, RuntimeError) as exc:
                err = _kafka_error(exc)
                if err is not None and err.txn_requires_abort():
                    self._rollback(first_offsets)
                    return self._aborted(mops, results, classify(err), committing=True)
                if err is not None and err.retriable() and not err.fatal() and time.monotonic() < deadline:
                    log.debug("commit of %s: retriable %s", self.transactional_id, err)
                    continue
                self._rollback(first_offsets)
                # The commit may or may not have landed: indefinite, and this producer is done.
                outcome = describe(exc)
                return Completion("info", results + [list(m) for m in mops[len(results):]],
                                  error=["commit", outcome.error], end_process=True)
        self._remember_positions(results)
        return Completion("ok", results)

    def _producer_handle(self) -> Any:
        assert self._sender is not None
        return self._sender.producer

    def _aborted(self, mops: list, results: list, cause: Outcome, *, committing: bool = False) -> Completion:
        """Abort the transaction after `cause`; the op's completion. What was done keeps its
        results (sends with their offsets, polls with their records); the rest stays raw."""
        value = results + [list(m) for m in mops[len(results):]]
        label = cause.error if cause.error == "intentional" else ["error", cause.error]
        producer = self._producer_handle()
        try:
            if cause.end_process or self._hung:
                raise RuntimeError("the producer cannot abort: " + ("a call hung" if self._hung else "fatal error"))
            self._call(lambda: producer.abort_transaction(CALL_TIMEOUT_S), CALL_TIMEOUT_S, "abort_transaction")
        except (KafkaException, RuntimeError) as exc:
            abort_error = describe(exc).error
            if committing:
                # The commit was asked for and neither it nor the abort is known to have landed.
                return Completion("info", value, error=["abort-failed", label, abort_error], end_process=True)
            # Never asked to commit, the transaction cannot commit: the coordinator aborts it
            # (transaction.timeout.ms, or the next InitProducerId of this id).
            return Completion("fail", value, error=["abort-failed", label, abort_error], end_process=True)
        return Completion("fail", value, error=["abort", label])

    def _rollback(self, first_offsets: dict[int, int]) -> None:
        super()._rollback(first_offsets)
        # A key sought back is no longer known to be read to its end.
        self._at_end.difference_update(first_offsets)

    def _remember_positions(self, results: list) -> None:
        if self._subscribed:
            return
        for mop in results:
            if mop[0] == "poll":
                for key, pairs in mop[1].items():
                    if pairs:
                        self._positions[key] = max(self._positions.get(key, -1), pairs[-1][0] + 1)

    def close(self) -> None:
        self._ready = False
        super().close()


