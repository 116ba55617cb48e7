"""Jepsen's Kafka queue workload: send and poll over rotating keys, with assign/subscribe.

Each client thread runs its own seeded stream of ops (so the same seed gives every thread
the same invocations whatever the timing): mostly `send [[send k v]]` and `poll [[poll]]`
in equal measure, with an `assign` or `subscribe` to the op's keys inserted with
probability `sub_p` (Jepsen's interleave-subscribes), optionally `crash` (the client is
torn down and its thread continues as a new process). `poll_unseen` widens about a third
of the assign/subscribe ops to keys with acknowledged but not yet polled writes, so
rotating keys are not starved; it depends on results, so with it on the key sets of those
ops are not a function of the seed alone.

The final phase, per thread: crash, assign every key written with seek-to-beginning, then
poll (1 s each, 5 a second) until this thread has read up to the highest acknowledged
offset of every key.

Options (workload_options): key_count 10, max_writes_per_key 256, partitions_per_topic 2,
replication_factor min(3, brokers), sub_via "assign" (comma list of assign, subscribe),
sub_p 1/64, poll_unseen true, crash_clients false, crash_p 0.01, poll_ms 100,
max_poll_records 500, topic_prefix "t".

Transactions (Jepsen's `:txn?`): with `txn=true` every send/poll/txn op runs in one Kafka
transaction of its process's transactional producer (workloads/clients/txn.py). An op is
`max_txn_length` micro-ops (default 4 with txn, else 1; the length is uniform in
[1, max_txn_length]), each a send or a poll with equal probability, tagged as Jepsen's
tag-rw does: all sends `send`, all polls `poll`, a mix `txn`. Before each micro-op an
intentional abort is drawn with probability `abort_p` (default 0.1, Jepsen's CLI default);
the draw is made here, not in the client, so it is part of the seeded invocation
(`extra.abort_at`, the index of the micro-op the client aborts before).
"""

from __future__ import annotations

import random
from typing import Any, Iterator

from harness.generator import (
    PENDING, Context, EachThread, Generator, Invocation, Observe, Rand, Stream, derive_seed,
)
from harness.generator.core import Event, OpResult, fill_in
from harness.spec import RunSpec
from workloads.base import JEPSEN_CLIENT_CONFIG, Workload, option
from workloads.keys import KeyPool, unique_value

NAME = "queue"
FINAL_POLL_MS = 1000
FINAL_POLL_INTERVAL_NS = 200_000_000

# Effective client defaults (librdkafka names): Jepsen's, one consumer group, manual commits,
# and end-of-partition events, so a poll of keys known to be at their end returns at once.
DEFAULT_CLIENT_CONFIG: dict[str, str] = {
    **JEPSEN_CLIENT_CONFIG,
    "linger.ms": "0",
    "group.id": "jepsen-group",
    "enable.auto.commit": "false",
    "enable.partition.eof": "true",
}


# With txn=true: Jepsen's transaction.timeout.ms (1 s), so a transaction a crashed or
# partitioned client leaves open stops holding back read_committed consumers (the last stable
# offset) soon. librdkafka refuses a producer whose message.timeout.ms exceeds
# transaction.timeout.ms (Jepsen's Java client keeps its 10 s delivery timeout), so sends time
# out with the transaction, which then aborts: a definite fail.
TXN_CLIENT_CONFIG: dict[str, str] = {
    "transaction.timeout.ms": "1000",
    "message.timeout.ms": "1000",
    "socket.timeout.ms": "1100",
}


def default_client_config(options: dict[str, Any]) -> dict[str, str]:
    if option(dict(options), "txn", False, bool):
        return {**DEFAULT_CLIENT_CONFIG, **TXN_CLIENT_CONFIG}
    return dict(DEFAULT_CLIENT_CONFIG)


class QueueOptions:
    def __init__(self, raw: dict[str, Any], brokers: int):
        self.key_count = option(raw, "key_count", 10, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.max_writes_per_key = option(raw, "max_writes_per_key", 256, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.partitions_per_topic = option(raw, "partitions_per_topic", 2, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.replication_factor = option(raw, "replication_factor", min(3, brokers), int,
                                         check=lambda v: 1 <= v <= brokers, expect=f"must be in [1, brokers={brokers}]")
        self.sub_via = option(raw, "sub_via", "assign", list,
                              check=lambda v: bool(v) and set(v) <= {"assign", "subscribe"},
                              expect="must be a comma list of assign, subscribe")
        self.sub_p = option(raw, "sub_p", 1 / 64, float, check=lambda v: 0 <= v <= 1, expect="must be in [0, 1]")
        self.poll_unseen = option(raw, "poll_unseen", True, bool)
        self.crash_clients = option(raw, "crash_clients", False, bool)
        self.crash_p = option(raw, "crash_p", 0.01, float, check=lambda v: 0 <= v <= 1, expect="must be in [0, 1]")
        self.poll_ms = option(raw, "poll_ms", 100, int, check=lambda v: v >= 0, expect="must be ≥ 0")
        self.max_poll_records = option(raw, "max_poll_records", 500, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.topic_prefix = option(raw, "topic_prefix", "t", str,
                                   check=lambda v: bool(v) and all(c.isalnum() or c in "._-" for c in v) and not v[-1].isdigit(),
                                   expect="must be letters, digits, . _ - and not end in a digit")
        self.txn = option(raw, "txn", False, bool)
        self.max_txn_length = option(raw, "max_txn_length", 4 if self.txn else 1, int,
                                     check=lambda v: v >= 1 and (self.txn or v == 1),
                                     expect="must be ≥ 1, and 1 without txn=true (ops of several micro-ops run "
                                            "only as transactions here)")
        self.abort_p = option(raw, "abort_p", 0.1, float, check=lambda v: 0 <= v <= 1, expect="must be in [0, 1]")
        known = {"key_count", "max_writes_per_key", "partitions_per_topic", "replication_factor", "sub_via", "sub_p",
                 "poll_unseen", "crash_clients", "crash_p", "poll_ms", "max_poll_records", "topic_prefix",
                 "txn", "max_txn_length", "abort_p"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown queue workload option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")


def thread_ops(seed: int, thread: int, concurrency: int, opts: QueueOptions) -> Iterator[Invocation]:
    """The endless, seeded op stream of one client thread."""
    if opts.txn:
        yield from txn_thread_ops(seed, thread, concurrency, opts)
        return
    rng = random.Random(derive_seed(seed, "queue", "thread", thread))
    pool = KeyPool(rng, key_count=opts.key_count, max_writes_per_key=opts.max_writes_per_key)
    writes: dict[int, int] = {}
    # Start with the thread's initial pool assigned, so early polls have something to read.
    yield Invocation(f=rng.choice(opts.sub_via), value=sorted(pool.active))
    while True:
        key = pool.pick()
        if rng.random() < 0.5:
            count = writes.get(key, 0)
            writes[key] = count + 1
            op = Invocation(f="send", value=[["send", key, unique_value(count, thread, concurrency)]])
            pool.wrote(key)
        else:
            op = Invocation(f="poll", value=[["poll"]], extra={"poll_ms": opts.poll_ms})
        if opts.crash_clients and rng.random() < opts.crash_p:
            yield Invocation(f="crash")
        if rng.random() < opts.sub_p:
            yield Invocation(f=rng.choice(opts.sub_via), value=[key])
        yield op


def txn_thread_ops(seed: int, thread: int, concurrency: int, opts: QueueOptions) -> Iterator[Invocation]:
    """The op stream of one client thread with transactions: Elle's write/read transactions
    (a uniform length, each micro-op a send or a poll with equal probability, each on a key of
    the pool) tagged send/poll/txn, with the intentional abort drawn per micro-op. A poll
    names no key, but its key still counts among the op's keys, which an inserted
    assign/subscribe covers (Jepsen's interleave-subscribes uses the op's keys the same way)."""
    rng = random.Random(derive_seed(seed, "queue", "txn-thread", thread))
    pool = KeyPool(rng, key_count=opts.key_count, max_writes_per_key=opts.max_writes_per_key)
    writes: dict[int, int] = {}
    yield Invocation(f=rng.choice(opts.sub_via), value=sorted(pool.active))
    while True:
        mops: list[list[Any]] = []
        keys: set[int] = set()
        for _ in range(rng.randint(1, opts.max_txn_length)):
            key = pool.pick()
            keys.add(key)
            if rng.random() < 0.5:
                count = writes.get(key, 0)
                writes[key] = count + 1
                mops.append(["send", key, unique_value(count, thread, concurrency)])
                pool.wrote(key)
            else:
                mops.append(["poll"])
        kinds = {m[0] for m in mops}
        f = "txn" if len(kinds) > 1 else mops[0][0]
        extra: dict[str, Any] = {}
        if "poll" in kinds:
            extra["poll_ms"] = opts.poll_ms
        abort_at = next((i for i in range(len(mops)) if rng.random() < opts.abort_p), None)
        if abort_at is not None:
            extra["abort_at"] = abort_at
        op = Invocation(f=f, value=mops, extra=extra)
        if opts.crash_clients and rng.random() < opts.crash_p:
            yield Invocation(f="crash")
        if rng.random() < opts.sub_p:
            yield Invocation(f=rng.choice(opts.sub_via), value=sorted(keys))
        yield op


class QueueObserver:
    """The highest acknowledged send and the highest ok poll per key, and every key written."""

    def __init__(self) -> None:
        self.sent: dict[int, int] = {}
        self.polled: dict[int, int] = {}
        self.keys: set[int] = set()

    def observe(self, event: Event) -> None:
        # Micro-ops are told apart by their own tag: a txn op mixes sends and polls.
        if event.f not in ("send", "poll", "txn") or event.type not in ("invoke", "ok"):
            return
        for mop in event.value:
            if mop[0] == "send":
                if event.type == "invoke":
                    self.keys.add(mop[1])
                else:
                    offset = mop[2][0]
                    if offset is not None and offset > self.sent.get(mop[1], -1):
                        self.sent[mop[1]] = offset
            elif mop[0] == "poll" and event.type == "ok":
                for key, pairs in mop[1].items():
                    if pairs:
                        top = max(o for o, _ in pairs)
                        if top > self.polled.get(int(key), -1):
                            self.polled[int(key)] = top

    def unseen(self) -> dict[int, dict[str, int]]:
        return {k: {"polled": self.polled.get(k, -1), "sent": s}
                for k, s in sorted(self.sent.items()) if self.polled.get(k, -1) < s}


class PollUnseen(Generator):
    """About a third of assign/subscribe ops also cover keys with unpolled writes."""

    __slots__ = ("gen", "observer", "rand")

    def __init__(self, gen: Generator, observer: QueueObserver, rand: Rand):
        self.gen, self.observer, self.rand = gen, observer, rand

    def op(self, ctx: Context) -> OpResult:
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        if op is PENDING or op.f not in ("assign", "subscribe"):
            return op, PollUnseen(nxt, self.observer, self.rand)
        draw, rand = self.rand.random()
        if draw < 1 / 3:
            unseen = self.observer.unseen()
            if unseen:
                keys = sorted(set(op.value) | set(unseen))
                op = op.with_(value=keys, extra={**op.extra, "unseen": {str(k): v for k, v in unseen.items()}})
        return op, PollUnseen(nxt, self.observer, rand)

    def update(self, ctx: Context, event: Event) -> Generator:
        nxt = self.gen.update(ctx, event)
        return self if nxt is self.gen else PollUnseen(nxt, self.observer, self.rand)


class FinalPolls(Generator):
    """One thread's drain: crash, assign everything from the beginning, poll to the end."""

    __slots__ = ("observer", "stage", "targets", "reached", "next_ns")

    def __init__(self, observer: QueueObserver, stage: str = "crash", targets: dict | None = None,
                 reached: dict | None = None, next_ns: int = 0):
        self.observer, self.stage, self.targets = observer, stage, targets
        self.reached = reached if reached is not None else {}
        self.next_ns = next_ns

    def _with(self, **changes: Any) -> "FinalPolls":
        state = {"stage": self.stage, "targets": self.targets, "reached": self.reached, "next_ns": self.next_ns}
        state.update(changes)
        return FinalPolls(self.observer, **state)

    def done(self) -> bool:
        return self.targets is not None and all(self.reached.get(k, -1) >= t for k, t in self.targets.items())

    def op(self, ctx: Context) -> OpResult:
        targets = self.targets if self.targets is not None else dict(self.observer.sent)
        me = self._with(targets=targets)
        if me.stage == "crash":
            inv = fill_in(Invocation(f="crash"), ctx)
            return (PENDING, me) if inv is PENDING else (inv, me._with(stage="assign-sent" if self.observer.keys else "done"))
        if me.stage == "assign":
            inv = fill_in(Invocation(f="assign", value=sorted(self.observer.keys), extra={"seek_to_beginning": True}), ctx)
            return (PENDING, me) if inv is PENDING else (inv, me._with(stage="assigning"))
        if me.stage == "assign-sent":
            return me._with(stage="assign").op(ctx)
        if me.stage == "assigning":
            return PENDING, me
        if me.stage == "done" or me.done():
            return None
        inv = fill_in(Invocation(f="poll", value=[["poll"]], extra={"poll_ms": FINAL_POLL_MS},
                                 time_ns=max(ctx.time_ns, me.next_ns)), ctx)
        if inv is PENDING:
            return PENDING, me
        return inv, me._with(next_ns=inv.time_ns + FINAL_POLL_INTERVAL_NS)

    def update(self, ctx: Context, event: Event) -> Generator:
        if event.type == "invoke":
            return self
        if event.f == "assign":
            return self._with(stage="polling" if event.type == "ok" else "assign")
        if event.f == "poll":
            if event.type == "ok":
                reached = dict(self.reached)
                for mop in event.value:
                    if mop[0] != "poll":
                        continue
                    for key, pairs in mop[1].items():
                        for offset, _ in pairs:
                            if offset > reached.get(int(key), -1):
                                reached[int(key)] = offset
                return self._with(reached=reached)
            if event.type == "info":  # a fresh client has no assignment
                return self._with(stage="assign")
        return self


def build(spec: RunSpec, bootstrap_servers: str) -> Workload:
    from workloads.clients.confluent import KeyMap, QueueClient, TopicCreator
    from workloads.topic_settings import requested_topic_config

    opts = QueueOptions(dict(spec.workload_options), spec.brokers)
    observer = QueueObserver()
    seed, concurrency = spec.seed, spec.concurrency

    def thread_gen(thread: int) -> Generator:
        gen: Generator = Stream(thread_ops(seed, thread, concurrency, opts))
        if opts.poll_unseen:
            gen = PollUnseen(gen, observer, Rand.from_seed(seed, "queue", "unseen", thread))
        return gen

    keys = KeyMap(opts.topic_prefix, opts.partitions_per_topic)
    client_config = dict(spec.client_config)
    topic_config = requested_topic_config(spec)

    def creator() -> TopicCreator:
        return TopicCreator(bootstrap_servers, client_config, opts.partitions_per_topic, opts.replication_factor,
                            topic_config=dict(topic_config))

    def open_client(process: int) -> QueueClient:
        topics = creator()
        if opts.txn:
            from workloads.clients.txn import TxnQueueClient

            # One transactional id per process (a retired process's successor gets a fresh
            # one, as in Jepsen); the topic prefix keeps runs sharing a cluster apart.
            return TxnQueueClient(transactional_id=f"logquake-txn-{opts.topic_prefix}-{process}",
                                  bootstrap_servers=bootstrap_servers, client_config=client_config, keys=keys,
                                  topics=topics, max_poll_records=opts.max_poll_records, default_poll_ms=opts.poll_ms)
        return QueueClient(bootstrap_servers=bootstrap_servers, client_config=client_config, keys=keys,
                           topics=topics, max_poll_records=opts.max_poll_records, default_poll_ms=opts.poll_ms)

    def setup() -> None:
        creator().ensure(keys.topic(k) for k in range(opts.key_count))

    return Workload(
        name=NAME,
        generator=Observe(observer, EachThread(thread_gen)),
        final_generator=Observe(observer, EachThread(lambda thread: FinalPolls(observer))),
        open_client=open_client,
        setup=setup,
        topics=tuple(sorted({keys.topic(k) for k in range(opts.key_count)})),
        owns_topic=lambda topic: keys.key(topic, 0) is not None,
    )


def validate_options(options: dict[str, Any], brokers: int, concurrency: int) -> None:
    QueueOptions(dict(options), brokers)
