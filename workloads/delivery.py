"""Group consumers and their delivery guarantee: at-most-once or at-least-once.

Producer threads (the first `producers` threads) send unique values to the partitions of
one topic; key k is partition k. Every other thread is a consumer in one group, subscribed
to the topic, so consumer crashes and restarts move partitions between them (rebalances).
The commit mode decides when offsets are committed relative to processing, as in the
usual descriptions of Kafka's delivery semantics:

  after   manual commit after processing (enable.auto.commit=false): at-least-once; a
          crash between processing and committing redelivers, so duplicates are allowed.
  before  manual commit before processing: at-most-once; a crash between committing and
          processing loses those records, never duplicates them.
  auto    enable.auto.commit=true with a short interval: offsets of polled records are
          committed in the background whether or not they were processed (at-most-once).

History (contract with the checkers):
  {"f": "process", "value": [["process", k, [offset, v]], ...]}  ok = processed
  {"f": "commit", "value": {"<k>": next_offset}, "group": ...}     ok = committed
  {"f": "crash"}                                                   info = consumer killed
  producers record send ops exactly like the queue workload.

In `before` mode the commit op polls the batch it commits; the next process op processes
that batch. The final phase keeps consumers processing (without crashes) until every
partition's acknowledged writes have been consumed.

Options: commit_mode after, partitions 4, replication_factor min(3, brokers), producers 1,
crash_p 0.02 (per consumer op), batch_size 100, poll_ms 100, topic "delivery".
"""

from __future__ import annotations

import random
from typing import Any, Iterator

from harness.generator import Context, EachThread, Generator, Invocation, Observe, Stream, derive_seed
from harness.generator.core import Event, OpResult
from harness.spec import RunSpec
from workloads.base import JEPSEN_CLIENT_CONFIG, Workload, option
from workloads.keys import unique_value

NAME = "delivery"
COMMIT_MODES = ("after", "before", "auto")
GROUP = "logquake-delivery"

BASE_CLIENT_CONFIG: dict[str, str] = {
    **JEPSEN_CLIENT_CONFIG,
    "group.id": GROUP,
    "enable.auto.offset.store": "true",
}


def default_client_config(options: dict[str, Any]) -> dict[str, str]:
    mode = options.get("commit_mode", "after")
    config = dict(BASE_CLIENT_CONFIG)
    if mode == "auto":
        config.update({"enable.auto.commit": "true", "auto.commit.interval.ms": "15"})
    else:
        config["enable.auto.commit"] = "false"
    return config


class DeliveryOptions:
    def __init__(self, raw: dict[str, Any], brokers: int, concurrency: int):
        self.commit_mode = option(raw, "commit_mode", "after", str, check=lambda v: v in COMMIT_MODES,
                                  expect=f"must be one of {', '.join(COMMIT_MODES)}")
        self.partitions = option(raw, "partitions", 4, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.replication_factor = option(raw, "replication_factor", min(3, brokers), int,
                                         check=lambda v: 1 <= v <= brokers, expect=f"must be in [1, brokers={brokers}]")
        self.producers = option(raw, "producers", 1, int, check=lambda v: 1 <= v < concurrency,
                                expect=f"must be ≥ 1 and leave at least one consumer (concurrency={concurrency})")
        self.crash_p = option(raw, "crash_p", 0.02, float, check=lambda v: 0 <= v <= 1, expect="must be in [0, 1]")
        self.batch_size = option(raw, "batch_size", 100, int, check=lambda v: v >= 1, expect="must be ≥ 1")
        self.poll_ms = option(raw, "poll_ms", 100, int, check=lambda v: v >= 0, expect="must be ≥ 0")
        self.topic = option(raw, "topic", "delivery", str,
                            check=lambda v: bool(v) and all(c.isalnum() or c in "._-" for c in v),
                            expect="must be letters, digits, . _ -")
        known = {"commit_mode", "partitions", "replication_factor", "producers", "crash_p", "batch_size", "poll_ms", "topic"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown delivery workload option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")


def producer_ops(seed: int, thread: int, concurrency: int, opts: DeliveryOptions) -> Iterator[Invocation]:
    rng = random.Random(derive_seed(seed, "delivery", "producer", thread))
    counts = [0] * opts.partitions
    while True:
        key = rng.randrange(opts.partitions)
        value = unique_value(counts[key], thread, concurrency)
        counts[key] += 1
        yield Invocation(f="send", value=[["send", key, value]])


def consumer_step(mode: str, group: str) -> list[Invocation]:
    process = Invocation(f="process", value=None)
    commit = Invocation(f="commit", value=None, extra={"group": group})
    if mode == "after":
        return [process, commit]
    if mode == "before":
        return [commit, process]
    return [process]


def consumer_ops(seed: int, thread: int, opts: DeliveryOptions, group: str, *, crashes: bool) -> Iterator[Invocation]:
    rng = random.Random(derive_seed(seed, "delivery", "consumer", thread))
    step = consumer_step(opts.commit_mode, group)
    while True:
        for op in step:
            # A crash may fall between any two steps: between processing and committing
            # (at-least-once redelivers) or between committing and processing (at-most-once loses).
            if crashes and rng.random() < opts.crash_p:
                yield Invocation(f="crash")
            yield op


class DeliveryObserver:
    """Highest acknowledged offset per partition, and how far consumers have got."""

    def __init__(self, *, drain_by_commit: bool = False) -> None:
        self.sent: dict[int, int] = {}
        self.consumed: dict[int, int] = {}  # partition -> next offset known consumed
        self.committed: dict[int, int] = {}  # partition -> highest next offset committed
        # Commit-after-processing consumers have drained only once their processing is
        # committed too; otherwise the run ends with the group's offsets behind its work.
        self.drain_by_commit = drain_by_commit

    def observe(self, event: Event) -> None:
        if event.type != "ok":
            return
        if event.f == "send":
            for _, key, (offset, _) in event.value:
                if offset is not None and offset > self.sent.get(key, -1):
                    self.sent[key] = offset
        elif event.f == "process":
            for _, key, (offset, _) in event.value:
                if offset + 1 > self.consumed.get(key, 0):
                    self.consumed[key] = offset + 1
        elif event.f == "commit" and isinstance(event.value, dict):
            for key, next_offset in event.value.items():
                if next_offset > self.consumed.get(int(key), 0):
                    self.consumed[int(key)] = next_offset
                if next_offset > self.committed.get(int(key), 0):
                    self.committed[int(key)] = next_offset

    def drained(self, targets: dict[int, int]) -> bool:
        reached = self.committed if self.drain_by_commit else self.consumed
        return all(reached.get(k, 0) > offset for k, offset in targets.items())


class UntilDrained(Generator):
    """Run `gen` until consumers have consumed past every target offset (frozen when first
    asked: the acknowledged writes of the main phase)."""

    __slots__ = ("gen", "observer", "targets")

    def __init__(self, gen: Generator, observer: DeliveryObserver, targets: dict | None = None):
        self.gen, self.observer, self.targets = gen, observer, targets

    def op(self, ctx: Context) -> OpResult:
        targets = self.targets if self.targets is not None else dict(self.observer.sent)
        if self.observer.drained(targets):
            return None
        result = self.gen.op(ctx)
        if result is None:
            return None
        op, nxt = result
        return op, UntilDrained(nxt, self.observer, targets)

    def update(self, ctx: Context, event: Event) -> Generator:
        return UntilDrained(self.gen.update(ctx, event), self.observer, self.targets)


def build(spec: RunSpec, bootstrap_servers: str) -> Workload:
    from workloads.clients.confluent import TopicCreator
    from workloads.clients.delivery import DeliveryClient
    from workloads.topic_settings import requested_topic_config

    opts = DeliveryOptions(dict(spec.workload_options), spec.brokers, spec.concurrency)
    observer = DeliveryObserver(drain_by_commit=opts.commit_mode == "after")
    seed, concurrency = spec.seed, spec.concurrency
    client_config = dict(spec.client_config)
    group = client_config.get("group.id", GROUP)
    topic_config = requested_topic_config(spec)

    def main_thread(thread: int) -> Generator:
        if thread < opts.producers:
            return Stream(producer_ops(seed, thread, concurrency, opts))
        return Stream(consumer_ops(seed, thread, opts, group, crashes=True))

    def final_thread(thread: int) -> Generator | None:
        if thread < opts.producers:
            return None
        return Stream(consumer_ops(seed, thread, opts, group, crashes=False))

    def topics() -> TopicCreator:
        return TopicCreator(bootstrap_servers, client_config, opts.partitions, opts.replication_factor,
                            topic_config=dict(topic_config))

    def open_client(process: int) -> DeliveryClient:
        role = "producer" if process % concurrency < opts.producers else "consumer"
        return DeliveryClient(role=role, bootstrap_servers=bootstrap_servers, client_config=client_config,
                              topic=opts.topic, partitions=opts.partitions, commit_mode=opts.commit_mode,
                              batch_size=opts.batch_size, poll_ms=opts.poll_ms, topics=topics())

    return Workload(
        name=NAME,
        generator=Observe(observer, EachThread(main_thread)),
        final_generator=Observe(observer, UntilDrained(EachThread(final_thread), observer)),
        open_client=open_client,
        setup=lambda: topics().ensure([opts.topic]),
        topics=(opts.topic,),
        owns_topic=lambda topic: topic == opts.topic,
    )


def validate_options(options: dict[str, Any], brokers: int, concurrency: int) -> None:
    DeliveryOptions(dict(options), brokers, concurrency)
