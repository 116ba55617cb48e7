"""Fetch traffic and broker CPU per transaction in the simulator, with incremental fetch
sessions (KIP-227) against the same run without them (max.incremental.fetch.session.cache.slots=0:
every fetch sessionless), in the same process (issue 14, Performance).

    python -m bench.bench_fetch_sessions [--transactions 300] [--state-partitions 50] [--seed 1]

Three simulated brokers (the real cores on a virtual clock and network), a 4-partition
topic and `__transaction_state` (`--state-partitions`, Kafka's default 50) with replication
factor 3 and min ISR 2. One transactional producer speaking real frames runs `--transactions`
transactions back to back, as bench_txn's does: AddPartitionsToTxn for the 4 partitions
(retried 20 ms later on CONCURRENT_TRANSACTIONS, as librdkafka does), 10 records of 100 B over
the 4 partitions in one acks=all Produce per leader, EndTxn(commit). Prints per transaction:
the Fetch requests the brokers served, the partitions those requests named, the partitions
their responses carried, the partitions read from a log, simulated milliseconds, and the
process CPU (brokers and simulator together; it includes garbage collection, so it moves
more than the counts, which are exact for a seed).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker import fetch
from cluster.broker.partition import Partition
from cluster.protocol.codec import payload_class
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCall, SimCluster
from cluster.storage.batch import ATTR_TRANSACTIONAL
from kio.index import EntityType

TOPIC = "txn-bench"
PARTITIONS = 4
RECORDS = 10
TXN_ID = "bench-fetch-sessions"
CONCURRENT_RETRY_MS = 20  # librdkafka's backoff after CONCURRENT_TRANSACTIONS


def _req(api_key: int, version: int, name: str) -> type:
    return payload_class(api_key, version, name, EntityType.request)


@dataclass
class Figures:
    transactions: int
    fetches: int
    partitions_named: int
    partitions_answered: int
    partitions_read: int
    simulated_ms: float
    cpu_s: float
    concurrent_retries: int

    def per_txn(self, value: float) -> float:
        return value / self.transactions


class _Counting:
    """Counts what the brokers' Fetch path does (wrapping module functions, not replacing them)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> _Counting:
        counts = self.counts

        def wrap(owner: Any, name: str, count: Any) -> None:
            original = getattr(owner, name)

            def counted(*args: Any, **kwargs: Any) -> Any:
                count(*args)
                return original(*args, **kwargs)

            self._saved.append((owner, name, original))
            setattr(owner, name, counted)

        def fetch_request(broker: Any, request: Any, *_: Any) -> None:
            counts["fetches"] += 1
            counts["named"] += sum(len(t.partitions) for t in request.body.topics)

        def fetch_response(version: int, correlation_id: int, topics: Any, *_: Any) -> None:
            counts["answered"] += sum(len(t.partitions) for t in topics)

        def read(*_: Any) -> None:
            counts["read"] += 1

        wrap(fetch, "handle_fetch", fetch_request)
        wrap(fetch, "encode_fetch_response", fetch_response)
        wrap(Partition, "read", read)
        wrap(Partition, "read_for_replica", read)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)


def _wait(sim: SimCluster, call: SimCall, what: str) -> Any:
    sim.run_until(lambda: call.done, 30_000, step_ms=0.5, what=what)
    return call.body


def _leaders(sim: SimCluster) -> dict[int, int]:
    out = {}
    for p in range(PARTITIONS):
        for broker in sim.running_brokers():
            partition = broker.partition(TOPIC, p)
            if partition is not None and partition.is_leader:
                out[p] = broker.config.broker_id
    return out


def _started(slots: int, state_partitions: int, seed: int) -> tuple[SimCluster, int, int, int]:
    sim = SimCluster(3, {"min.insync.replicas": "2", "transaction.state.log.num.partitions": str(state_partitions),
                         "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
                         "max.incremental.fetch.session.cache.slots": str(slots)}, seed=seed)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers ready")
    topic_cls = _req(ApiKey.CREATE_TOPICS, 5, "CreatableTopic")
    body = _wait(sim, sim.send(0, ApiKey.CREATE_TOPICS, 5, topics=(topic_cls(name=TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                                                                assignments=(), configs=()),),
                               timeout=datetime.timedelta(seconds=10), validate_only=False), "CreateTopics")
    assert body.topics[0].error_code is ErrorCode.none, body
    sim.run_until(lambda: len(_leaders(sim)) == PARTITIONS, 10_000, what="topic leaders")

    def coordinator() -> int | None:
        for broker in sim.running_brokers():
            error, node, _, _ = broker.txn.find_coordinator(TXN_ID)
            if error is ErrorCode.none and sim.broker(node).txn.coordinator.coordinator_error(TXN_ID) is ErrorCode.none:
                return int(node)
        return None

    sim.run_until(lambda: coordinator() is not None, 30_000, what="a loaded transaction coordinator")
    node = coordinator()
    assert node is not None
    sim.run_for(2_000)  # every __transaction_state partition led and replicated
    init = _wait(sim, sim.send(node, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=TXN_ID,
                               transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1), "InitProducerId")
    assert init.error_code is ErrorCode.none, init
    return sim, node, int(init.producer_id), int(init.producer_epoch)


def run(transactions: int, slots: int, state_partitions: int, seed: int) -> Figures:
    sim, coordinator, pid, epoch = _started(slots, state_partitions, seed)
    leaders = _leaders(sim)
    add_topic = _req(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic")
    data_cls = _req(ApiKey.PRODUCE, 9, "PartitionProduceData")
    topic_cls = _req(ApiKey.PRODUCE, 9, "TopicProduceData")
    sequences = [0] * PARTITIONS
    payload = b"x" * 100
    retries = 0
    gc.collect()
    started_ns = sim.clock.monotonic_ns()
    cpu_before = time.process_time()
    with _Counting() as counting:
        for _ in range(transactions):
            while True:
                added = _wait(sim, sim.send(coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=TXN_ID,
                                            v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                                            v3_and_below_topics=(add_topic(name=TOPIC, partitions=tuple(range(PARTITIONS))),)),
                              "AddPartitionsToTxn")
                errors = {p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition}
                if errors == {ErrorCode.none}:
                    break
                assert errors == {ErrorCode.concurrent_transactions}, errors
                retries += 1
                sim.run_for(CONCURRENT_RETRY_MS)
            by_leader: dict[int, list[Any]] = {}
            for p in range(PARTITIONS):
                count = len(range(p, RECORDS, PARTITIONS))
                batch = build_batch([Record(None, payload)] * count, base_offset=0, timestamp_ms=sim.clock.wall_ms(),
                                    attributes=ATTR_TRANSACTIONAL, producer_id=pid, producer_epoch=epoch, base_sequence=sequences[p])
                sequences[p] += count
                by_leader.setdefault(leaders[p], []).append(data_cls(index=p, records=batch))
            calls = [sim.send(leader, ApiKey.PRODUCE, 9, transactional_id=TXN_ID, acks=-1, timeout=datetime.timedelta(seconds=5),
                              topic_data=(topic_cls(name=TOPIC, partition_data=tuple(parts)),)) for leader, parts in by_leader.items()]
            for call in calls:
                body = _wait(sim, call, "Produce")
                assert all(p.error_code is ErrorCode.none for t in body.responses for p in t.partition_responses), body
            ended = _wait(sim, sim.send(coordinator, ApiKey.END_TXN, 3, transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch,
                                        committed=True), "EndTxn")
            assert ended.error_code is ErrorCode.none, ended
    cpu_s = time.process_time() - cpu_before
    c = counting.counts
    return Figures(transactions, c["fetches"], c["named"], c["answered"], c["read"], (sim.clock.monotonic_ns() - started_ns) / 1e6,
                   cpu_s, retries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--state-partitions", type=int, default=50, help="transaction.state.log.num.partitions (default 50)")
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args(argv)
    if opts.transactions <= 0 or opts.state_partitions <= 0:
        parser.error("--transactions and --state-partitions must be positive")
    print(f"{opts.transactions} transactions of {RECORDS} x 100 B over {PARTITIONS} partitions, 3 simulated brokers, RF 3, min ISR 2, "
          f"__transaction_state {opts.state_partitions} partitions; seed {opts.seed}")
    rows = [("sessionless (cache slots 0)", run(opts.transactions, 0, opts.state_partitions, opts.seed)),
            ("fetch sessions (KIP-227)", run(opts.transactions, 1000, opts.state_partitions, opts.seed))]
    print(f"{'per transaction':30}{'fetches':>9}{'named':>9}{'answered':>10}{'reads':>8}{'sim ms':>8}{'CPU ms':>8}{'retries':>9}")
    for label, f in rows:
        print(f"{label:30}{f.per_txn(f.fetches):>9.1f}{f.per_txn(f.partitions_named):>9.1f}{f.per_txn(f.partitions_answered):>10.1f}"
              f"{f.per_txn(f.partitions_read):>8.1f}{f.per_txn(f.simulated_ms):>8.1f}{f.per_txn(f.cpu_s) * 1000:>8.2f}"
              f"{f.per_txn(f.concurrent_retries):>9.2f}")
    base, sessions = rows[0][1], rows[1][1]
    print(f"sessions/sessionless: partitions named {sessions.partitions_named / base.partitions_named:.2f}x, answered "
          f"{sessions.partitions_answered / base.partitions_answered:.2f}x, read {sessions.partitions_read / base.partitions_read:.2f}x, "
          f"CPU {sessions.cpu_s / base.cpu_s:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
