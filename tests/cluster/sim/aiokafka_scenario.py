"""The issue-15 spike's scenario: unmodified aiokafka (idempotent acks=all producer, group
consumer) against three simulated brokers, the leader of a partition killed mid-way.

`run(seed)` returns the outcome and a text trace (every client request's virtual time, node
and API, then every consumed record) that must be byte-identical for one seed, in any
process. Run as a module it prints that trace, for the cross-process check:

    python -m tests.cluster.sim.aiokafka_scenario SEED [RECORDS [RATE_PER_S]]

(and its speed on stderr).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from kio.schema.errors import ErrorCode

from cluster.sim.aio_runtime import SimAsyncio, SimSpeed
from cluster.sim.cluster import BROKER_PORT, SimCluster, broker_host
from tests.cluster.sim.sim_requests import create_topic, partition_info

TOPIC = "spike"
PARTITIONS = 3
GROUP = "spike-readers"


@dataclass
class Outcome:
    acked: list[tuple[int, int, bytes]]     # (partition, offset, value) as the producer was told
    consumed: list[tuple[int, int, bytes]]  # (partition, offset, value) in the order polled
    committed: dict[int, int]               # partition -> committed offset, read back
    killed: int                             # the broker that led partition 0 and was killed
    sim_running: dict[int, bool]            # broker -> running at the end
    trace: str
    speed: SimSpeed
    client_requests: int


def _started(seed: int) -> SimCluster:
    sim = SimCluster(3, {"min.insync.replicas": "2"}, seed=seed)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    result = create_topic(sim, 0, TOPIC, PARTITIONS, 3)
    assert result.error_code == ErrorCode.none, result

    def in_sync() -> bool:
        infos = [partition_info(sim, 0, TOPIC, p) for p in range(PARTITIONS)]
        return all(i is not None and i.leader >= 0 and len(i.isr) == 3 for i in infos)

    sim.run_until(in_sync, 30_000, step_ms=50, what="every replica of the topic in sync")
    return sim


def _leader_of(sim: SimCluster, partition: int) -> int:
    """The broker whose core leads `partition` now (read from the cores, not the wire: the
    simulation must not be advanced from inside the loop)."""
    for broker in sim.running_brokers():
        p = broker.partition(TOPIC, partition)
        if p is not None and p.is_leader:
            return broker.config.broker_id
    raise AssertionError(f"no running broker leads {TOPIC}-{partition}")


async def _stop(consumer: AIOKafkaConsumer) -> None:
    """consumer.stop(), through an aiokafka 0.14 bug: Fetcher.close() cancels its pending
    fetch tasks and awaits them, and one that was in its retry backoff (after a fetch to a
    dead broker failed) re-raises the CancelledError out of stop() (seed 3 of this scenario
    reproduces it every time; compare aio-libs/aiokafka#647). Our own cancellation still
    propagates."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        STOP_CANCELLED.append(consumer)


STOP_CANCELLED: list[AIOKafkaConsumer] = []


def run(seed: int, records: int = 200, rate_per_s: float = 500) -> Outcome:
    sim = _started(seed)
    bootstrap = ",".join(f"{broker_host(b)}:{BROKER_PORT}" for b in sim.broker_ids)
    acked: list[tuple[int, int, bytes]] = []
    consumed: list[tuple[int, int, bytes]] = []
    committed: dict[int, int] = {}
    killed: list[int] = []

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, client_id="spike-producer",
                                    linger_ms=5, request_timeout_ms=10_000, retry_backoff_ms=100)
        await producer.start()
        try:
            pending = []
            for i in range(records):
                if i == records // 2:
                    # Mid-way, with sends in flight: SIGKILL partition 0's leader.
                    killed.append(_leader_of(sim, 0))
                    sim.kill(killed[0])
                value = f"v{i:05d}".encode()
                pending.append((value, await producer.send(TOPIC, value, timestamp_ms=runtime.wall_ms())))
                if i % 10 == 9:
                    await asyncio.sleep(10 / rate_per_s)  # a steady rate, in tens
            for value, future in pending:
                metadata = await future
                acked.append((metadata.partition, metadata.offset, value))
        finally:
            await producer.stop()

    async def consume(assigned: asyncio.Event, produced: asyncio.Event) -> None:
        # The group forms before the kill (three brokers are needed to create
        # __consumer_offsets with replication factor 3), then reads through it.
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, client_id="spike-consumer",
                                    auto_offset_reset="earliest", enable_auto_commit=False, request_timeout_ms=10_000,
                                    session_timeout_ms=6_000, heartbeat_interval_ms=1_000)
        await consumer.start()
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=500)
                if consumer.assignment():
                    assigned.set()
                for tp in sorted(batches):
                    consumed.extend((tp.partition, m.offset, m.value) for m in batches[tp])
                if batches:
                    await consumer.commit()
                if produced.is_set() and {v for _, _, v in acked} <= {v for _, _, v in consumed}:
                    break
            for p in range(PARTITIONS):
                committed[p] = await consumer.committed(TopicPartition(TOPIC, p))
        finally:
            await _stop(consumer)

    async def main() -> None:
        assigned, produced = asyncio.Event(), asyncio.Event()
        reader = asyncio.create_task(consume(assigned, produced))
        await assigned.wait()
        await produce()
        produced.set()
        await reader

    with SimAsyncio(sim) as runtime:
        runtime.run(main(), timeout_s=300)
    lines = [f"{e.time_ns} node={e.node_id} api={e.api_key} v{e.api_version} conn={e.connection} crc={e.crc32:08x}" for e in runtime.trace]
    lines += [f"record {p} {o} {v.decode()}" for p, o, v in consumed]
    lines += [f"committed {p} {o}" for p, o in sorted(committed.items())]
    lines.append(f"end {sim.clock.monotonic_ns()}")
    return Outcome(acked, consumed, committed, killed[0], {b: sim.is_running(b) for b in sim.broker_ids}, "\n".join(lines) + "\n",
                   runtime.speed, len(runtime.trace))


if __name__ == "__main__":
    outcome = run(int(sys.argv[1]), *(int(a) for a in sys.argv[2:3]), *(float(a) for a in sys.argv[3:4]))
    sys.stdout.write(outcome.trace)
    sys.stderr.write(f"{outcome.speed.simulated_s:.2f} simulated s in {outcome.speed.wall_s:.2f} wall s of the loop "
                     f"({outcome.speed.ratio:.1f}x), {outcome.client_requests} client requests\n")
