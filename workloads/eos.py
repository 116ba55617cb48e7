"""Consume-transform-produce with transactions: the exactly-once claim (KIP-98, KIP-447).

Modelled on Kafka's own exactly-once system test (a transactional copier): producer threads
(the first `producers` threads) send unique values to the partitions of an input topic
(idempotent, acks=all); key k is input partition k. Every other thread is a copier. The
copiers are one consumer group subscribed to the input topic with read_committed, and each
copier process has a transactional producer whose `transactional.id` belongs to its thread
(so the process that replaces a crashed one fences it and aborts what it left open, as a
restarted copier does in Kafka's test). One copy op is one transaction:

    poll a batch (up to batch_size records) from the input
    begin_transaction
    produce every record's value to the output topic's same-numbered partition
    send_offsets_to_transaction(next offset per input partition, the group's metadata)
    commit_transaction

Output partition p is key `partitions + p`. Input values are unique across the input (one
count per producer thread), and a copy writes input value v as `v << 20 | copy id`
(COPY_ID_BITS in workloads/clients/eos.py; the id is unique per copy op), so "exactly once"
reads as: every input value appears once in the output, decoded; and the per-key checks of an
output partition still mean what they say (a value twice is a duplicate append, not two
copies). Copier crashes (crash_p per copy op) come in two kinds, drawn evenly: a crash
between transactions (the consumer leaves the group, its partitions move: a rebalance) and a
crash inside one, after producing and sending the offsets but before committing (the
transaction stays open until the next process of that thread fences it; with txn=false the
crash falls between producing and committing the offsets, and the copy is ok). With stall_p a
copy stalls STALL_S between producing and sending its offsets, long enough to be removed from
the group (max.poll.interval.ms) while its partitions move to another copier: a zombie, which
KIP-447's generation check must fence when it sends the offsets. Broker faults add fencing of zombies (a copier that lost its partitions
in a rebalance cannot commit offsets for them: KIP-447's generation check).

The final phase keeps copiers copying (without crashes) until every acknowledged input record
has been copied by a committed copy and a round of copies found nothing more (or the copy
window has passed: a lost input record is never copied; `copy_window_s`), then one
verifier op reads both topics from the beginning to their end with read_committed. It waits
first until no transaction is open on any partition (last stable offset = high watermark),
since records behind an open one are not yet readable.

History (contract with the checkers, checkers/eos.py):
  {"f": "send", "value": [["send", k, [offset, v]]]}          a producer's input write,
                                                              exactly like the queue workload
  {"f": "copy", "value": [["poll", {"<k>": [[offset, v], ...]}],
                          ["send", k', [offset, v << 20 | id]], ...]}  one copy transaction: the input
        records it consumed and the output records it produced (offset null if unknown).
        ok = committed; fail = definitely not committed (aborted, or never asked to commit:
        the coordinator aborts it); info = the commit's outcome is unknown. An ok copy that
        polled nothing ran no transaction and has the value [].
  {"f": "crash"}                                               info: a copier killed between
                                                              transactions
  {"f": "poll", "value": [["poll", {"<k>": [[offset, v], ...]}]]}  the verifier's read of
        both topics to their end (ok only when complete); the only polls of an eos run, so
        the per-key checks judge the input topic's log and the output's with it.

Options: partitions 4, replication_factor min(3, brokers), producers 1 (the other threads
are copiers; concurrency 5 by default), crash_p 0.02 (per copy op), batch_size 20 (records
per copy), poll_ms 100, topics "eos-input,eos-output", txn true (false: copiers commit their
consumer offsets after producing, outside any transaction: at-least-once, so duplicates are
expected and exactly-once is not claimed), stall_p 0 (per copy op).
"""

from __future__ import annotations

import random
from typing import Any, Iterator

from harness.generator import Context, EachThread, Generator, Invocation, Observe, Seq, Stream, Synchronize, derive_seed
from harness.generator.core import PENDING, Event, OpResult, fill_in
from harness.spec import RunSpec
from workloads.base import JEPSEN_CLIENT_CONFIG, Workload, option
from workloads.keys import unique_value

NAME = "eos"
GROUP = "logquake-eos"
TXN_ID_PREFIX = "logquake-eos-copier"
CRASH_KINDS = ("between", "before-commit")
STALL_S = 9.0  # a stalled copier: past max.poll.interval.ms (STALL_CLIENT_CONFIG), within its transaction's timeout
VERIFY_ATTEMPTS = 5  # verifier ops (each waits for open transactions to end) before giving up
# The final phase's copy window (`copy_window_s`). A copier that died without leaving the group
# (its LeaveGroup refused by a coordinator that moved while the brokers were paused; clients do
# not retry it) keeps its partitions until its session times out, which a coordinator that
# (re)loads the group counts from the load, so up to session.timeout.ms after the heal; then
# the survivors rejoin, sync and fetch (HANDOVER_MARGIN_S). The verifier must still start
# inside the phase (VERIFY_RESERVE_S: its read, once started, may run past the phase's limit).
HANDOVER_MARGIN_S = 1.0
VERIFY_RESERVE_S = 0.5
LIBRDKAFKA_SESSION_TIMEOUT_MS = 45000  # librdkafka's default session.timeout.ms

# The copier's transactions: a transaction a copier left open (a crash inside one) holds back
# read_committed readers of its output partitions until the thread's next process fences it or
# the coordinator times it out. 10 s covers a copy under faults (Jepsen's 10 s client
# timeouts); librdkafka refuses message.timeout.ms above transaction.timeout.ms and wants
# socket.timeout.ms above it too.
TXN_CLIENT_CONFIG: dict[str, str] = {
    "transaction.timeout.ms": "10000",
    "message.timeout.ms": "10000",
    "socket.timeout.ms": "10100",
}
# With stalls (stall_p > 0): a copier that does not poll for 6 s leaves the group (librdkafka's
# max.poll.interval.ms, at its floor, session.timeout.ms), and its transaction, open for the
# STALL_S stall, must not time out first.
STALL_CLIENT_CONFIG: dict[str, str] = {
    "max.poll.interval.ms": "6000",
    "transaction.timeout.ms": "20000",
}
BASE_CLIENT_CONFIG: dict[str, str] = {
    **JEPSEN_CLIENT_CONFIG,
    "group.id": GROUP,
    "enable.auto.commit": "false",  # the copier commits offsets itself, in its transaction
    "isolation.level": "read_committed",
}


def default_client_config(options: dict[str, Any]) -> dict[str, str]:
    config = dict(BASE_CLIENT_CONFIG)
    if option(dict(options), "txn", True, bool):
        config.update(TXN_CLIENT_CONFIG)
    if option(dict(options), "stall_p", 0.0, float) > 0:
        config.update(STALL_CLIENT_CONFIG)
    return config


def _topic_name(v: str) -> bool:
    return bool(v) and all(c.isalnum() or c in "._-" for c in v)


class EosOptions:
    def __init__(self, raw: dict[str, Any], brokers: int, concurrency: int):
        self.partitions = option(raw, "partitions", 4, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.replication_factor = option(raw, "replication_factor", min(3, brokers), int,
                                         check=lambda v: 1 <= v <= brokers, expect=f"must be in [1, brokers={brokers}]")
        self.producers = option(raw, "producers", 1, int, check=lambda v: 1 <= v < concurrency,
                                expect=f"must be ≥ 1 and leave at least one copier (concurrency={concurrency})")
        self.crash_p = option(raw, "crash_p", 0.02, float, check=lambda v: 0 <= v <= 1, expect="must be in [0, 1]")
        self.batch_size = option(raw, "batch_size", 20, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.poll_ms = option(raw, "poll_ms", 100, int, check=lambda v: v >= 0, expect="must be ≥ 0")
        self.topics = option(raw, "topics", "eos-input,eos-output", list,
                             check=lambda v: len(v) == 2 and v[0] != v[1] and all(_topic_name(t) for t in v),
                             expect="must be two different topic names (input,output) of letters, digits, . _ -")
        self.txn = option(raw, "txn", True, bool)
        self.stall_p = option(raw, "stall_p", 0.0, float, check=lambda v: 0 <= v <= 1, expect="must be in [0, 1]")
        known = {"partitions", "replication_factor", "producers", "crash_p", "batch_size", "poll_ms", "topics", "txn",
                 "stall_p"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown eos workload option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")

    @property
    def input_topic(self) -> str:
        return self.topics[0]

    @property
    def output_topic(self) -> str:
        return self.topics[1]


def producer_ops(seed: int, thread: int, concurrency: int, opts: EosOptions) -> Iterator[Invocation]:
    rng = random.Random(derive_seed(seed, "eos", "producer", thread))
    count = 0
    while True:
        # One count per thread, not per key: values are unique across partitions too, so a
        # value names its input record wherever a copy puts it.
        key = rng.randrange(opts.partitions)
        value = unique_value(count, thread, concurrency)
        count += 1
        yield Invocation(f="send", value=[["send", key, value]])


def copier_ops(seed: int, thread: int, opts: EosOptions, *, crashes: bool) -> Iterator[Invocation]:
    rng = random.Random(derive_seed(seed, "eos", "copier", thread))
    while True:
        # Drawn only when on, so runs without stalls keep their seeded schedule.
        if crashes and opts.stall_p > 0 and rng.random() < opts.stall_p:
            yield Invocation(f="copy", extra={"stall_s": STALL_S})
            continue
        if crashes and rng.random() < opts.crash_p:
            kind = CRASH_KINDS[rng.randrange(len(CRASH_KINDS))]
            if kind == "between":
                yield Invocation(f="crash")
                continue
            yield Invocation(f="copy", extra={"crash": kind})
            continue
        yield Invocation(f="copy")


class EosObserver:
    """Highest acknowledged input offset per partition, how far committed copies have got,
    and whether the verifier has read both topics."""

    def __init__(self, copiers: int) -> None:
        self.sent: dict[int, int] = {}  # input key -> highest acknowledged offset
        self.copied: dict[int, int] = {}  # input key -> next offset after committed copies
        self.empty_streak = 0  # consecutive ok copies that found nothing to copy
        self.copiers = copiers
        self.verified = False
        self.verify_attempts = 0

    def observe(self, event: Event) -> None:
        if event.f == "poll" and event.type != "invoke":
            self.verify_attempts += 1
            self.verified = self.verified or event.type == "ok"
        if event.type != "ok":
            return
        if event.f == "send":
            for _, key, (offset, _) in event.value:
                if offset is not None and offset > self.sent.get(key, -1):
                    self.sent[key] = offset
        elif event.f == "copy":
            polled = [m for m in (event.value or []) if m[0] == "poll"]
            self.empty_streak = 0 if any(pairs for m in polled for pairs in m[1].values()) else self.empty_streak + 1
            for mop in polled:
                for key, pairs in mop[1].items():
                    if pairs and pairs[-1][0] + 1 > self.copied.get(int(key), 0):
                        self.copied[int(key)] = pairs[-1][0] + 1

    def drained(self, targets: dict[int, int]) -> bool:
        """Every target offset copied, and a round of copies (one per copier) found nothing
        more: records whose send's outcome was unknown may sit past the acknowledged ones."""
        return (all(self.copied.get(k, 0) > offset for k, offset in targets.items())
                and self.empty_streak >= self.copiers)


def copy_window_s(final_time_limit_s: float, session_timeout_ms: int) -> float:
    """How long the final phase copies at most: half the phase (the rest for the verifier's
    attempts), but at least the time the group takes to hand a dead copier's partitions to a
    live one (session.timeout.ms and HANDOVER_MARGIN_S) where the phase has room for it.
    With less, a run whose copiers all died in a fault (seeds 1 and 2 of the generation check's
    safe hunt, tests/harness/test_eos_safe_replay.py) ended copying before Kafka's group
    protocol had given their partitions to anyone, and the records it had not yet copied
    were judged eos-missing."""
    handover_s = session_timeout_ms / 1000 + HANDOVER_MARGIN_S
    return max(final_time_limit_s / 2, min(handover_s, final_time_limit_s - VERIFY_RESERVE_S))


class UntilCopied(Generator):
    """Run `gen` until committed copies have consumed past every target offset (frozen when
    first asked: the acknowledged input writes of the main phase), or for `limit_s` at most:
    an acknowledged record the input lost can never be copied, and the verifier must still
    read what is there (the checks then name what is missing)."""

    __slots__ = ("gen", "observer", "limit_s", "targets", "deadline_ns")

    def __init__(self, gen: Generator, observer: EosObserver, limit_s: float, targets: dict | None = None,
                 deadline_ns: int | None = None):
        self.gen, self.observer, self.limit_s = gen, observer, limit_s
        self.targets, self.deadline_ns = targets, deadline_ns

    def op(self, ctx: Context) -> OpResult:
        targets = self.targets if self.targets is not None else dict(self.observer.sent)
        deadline_ns = self.deadline_ns if self.deadline_ns is not None else ctx.time_ns + int(self.limit_s * 1e9)
        if self.observer.drained(targets) or ctx.time_ns >= deadline_ns:
            return None
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        return op, UntilCopied(nxt, self.observer, self.limit_s, targets, deadline_ns)

    def update(self, ctx: Context, event: Event) -> Generator:
        return UntilCopied(self.gen.update(ctx, event), self.observer, self.limit_s, self.targets, self.deadline_ns)


class VerifyOnce(Generator):
    """The verifier: one read of both topics at a time, again after a failed one, until one
    succeeds or VERIFY_ATTEMPTS have been made."""

    __slots__ = ("observer", "outstanding")

    def __init__(self, observer: EosObserver, outstanding: bool = False):
        self.observer, self.outstanding = observer, outstanding

    def op(self, ctx: Context) -> OpResult:
        if self.observer.verified or self.observer.verify_attempts >= VERIFY_ATTEMPTS:
            return None
        if self.outstanding:
            return PENDING, self
        filled = fill_in(Invocation(f="poll"), ctx)
        if filled is PENDING:
            return PENDING, self
        return filled, VerifyOnce(self.observer, True)

    def update(self, ctx: Context, event: Event) -> Generator:
        if event.f == "poll" and event.type != "invoke":
            return VerifyOnce(self.observer, False)
        return self


def build(spec: RunSpec, bootstrap_servers: str) -> Workload:
    from workloads.clients.confluent import TopicCreator
    from workloads.clients.eos import EosClient
    from workloads.topic_settings import requested_topic_config

    opts = EosOptions(dict(spec.workload_options), spec.brokers, spec.concurrency)
    observer = EosObserver(copiers=spec.concurrency - opts.producers)
    seed, concurrency = spec.seed, spec.concurrency
    client_config = dict(spec.client_config)
    topic_config = requested_topic_config(spec)

    def main_thread(thread: int) -> Generator:
        if thread < opts.producers:
            return Stream(producer_ops(seed, thread, concurrency, opts))
        return Stream(copier_ops(seed, thread, opts, crashes=True))

    def final_thread(thread: int) -> Generator | None:
        if thread < opts.producers:
            return None
        return Stream(copier_ops(seed, thread, opts, crashes=False))

    def topics() -> TopicCreator:
        return TopicCreator(bootstrap_servers, client_config, opts.partitions, opts.replication_factor,
                            topic_config=dict(topic_config))

    def open_client(process: int) -> EosClient:
        thread = process % concurrency
        return EosClient(bootstrap_servers=bootstrap_servers, client_config=client_config,
                         input_topic=opts.input_topic, output_topic=opts.output_topic, partitions=opts.partitions,
                         batch_size=opts.batch_size, poll_ms=opts.poll_ms, topics=topics(),
                         transactional_id=f"{TXN_ID_PREFIX}-{thread}" if opts.txn else None)

    # Copying until drained or the copy window has passed, the rest of the final phase for the
    # verifier (it waits up to 30 s for open transactions to end, then reads).
    session_timeout_ms = int(client_config.get("session.timeout.ms", LIBRDKAFKA_SESSION_TIMEOUT_MS))
    final = Seq(UntilCopied(EachThread(final_thread), observer, copy_window_s(spec.final_time_limit_s, session_timeout_ms)),
                Synchronize(VerifyOnce(observer)))
    return Workload(
        name=NAME,
        generator=Observe(observer, EachThread(main_thread)),
        final_generator=Observe(observer, final),
        open_client=open_client,
        setup=lambda: topics().ensure(list(opts.topics)),
        topics=tuple(opts.topics),
        owns_topic=lambda topic: topic in opts.topics,
    )


def validate_options(options: dict[str, Any], brokers: int, concurrency: int) -> None:
    EosOptions(dict(options), brokers, concurrency)
