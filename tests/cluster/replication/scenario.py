"""Shared steps for the replication tests: a SimCluster (the real controller and broker cores
on a virtual clock and network) with one topic, and direct views of each broker's replica."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.partition import Partition, TopicPartition
from cluster.sim.cluster import SimCluster, SimCall
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, send_produce

TOPIC = "replicated"
TP = TopicPartition(TOPIC, 0)


def start(min_isr: int = 2, seed: int = 3, **props: str) -> SimCluster:
    """Three brokers, `TOPIC` with one partition on all three, every replica in sync."""
    sim = SimCluster(3, {"min.insync.replicas": str(min_isr), **props}, seed=seed)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    result = create_topic(sim, 0, TOPIC, 1, 3)
    assert result.error_code == ErrorCode.none, result
    wait_isr(sim, {0, 1, 2})
    return sim


def replica(sim: SimCluster, broker_id: int) -> Partition:
    partition = sim.broker(broker_id).partition(TOPIC, 0)
    assert partition is not None, f"broker {broker_id} has no replica of {TP}"
    return partition


def leads(sim: SimCluster, broker_id: int) -> bool:
    """Whether `broker_id` runs and leads `TP` in its own view (False before it has the metadata)."""
    partition = sim.broker(broker_id).partition(TOPIC, 0) if sim.is_running(broker_id) else None
    return partition is not None and partition.is_leader


def leader(sim: SimCluster) -> int:
    """The running broker that leads `TP` in its own view (run until there is one)."""
    found: list[int] = []

    def one() -> bool:
        found[:] = [b for b in sim.broker_ids if leads(sim, b)]
        return len(found) == 1

    sim.run_until(one, 20_000, step_ms=10, what=f"one leader of {TP}")
    return found[0]


def followers(sim: SimCluster, leader_id: int) -> list[int]:
    return [b for b in sim.broker_ids if b != leader_id]


def wait_isr(sim: SimCluster, isr: set[int], ask: int | None = None, timeout_ms: float = 30_000) -> None:
    """Until the ISR in the metadata (as broker `ask`, or any running broker, reports it) is `isr`."""
    def reached() -> bool:
        broker = ask if ask is not None else next(b for b in sim.broker_ids if sim.is_running(b))
        info = partition_info(sim, broker, TOPIC)
        return info is not None and set(info.isr) == isr

    sim.run_until(reached, timeout_ms, step_ms=50, what=f"ISR {sorted(isr)}")


def produce(sim: SimCluster, broker_id: int, value: bytes, acks: int = -1, timeout_ms: int = 5000, **idempotence: int) -> SimCall:
    return send_produce(sim, broker_id, TOPIC, 0, [value], acks=acks, timeout_ms=timeout_ms, **idempotence)


def answer(sim: SimCluster, call: SimCall, within_ms: float = 20_000) -> tuple[ErrorCode, int]:
    """Run until the produce is answered; (error, base offset)."""
    sim.run_until(lambda: call.done, within_ms, step_ms=1, what="a produce answer")
    return produce_result(call)


def log_entries(partition: Partition) -> list[tuple[int, int, int]]:
    """(base offset, last offset, leader epoch) of every batch in the replica's log."""
    return [(h.base_offset, h.next_offset - 1, h.partition_leader_epoch)
            for h in partition.log.batch_headers(from_offset=partition.log_start_offset)]
