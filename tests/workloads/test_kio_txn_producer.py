"""The kio transactional producer (workloads/clients/kio_txn_producer.py) against three
simulated brokers, over the simulated network:

- a Produce held up on the client's link to its leader times out, the transaction becomes
  abortable, and the abort (EndTxn, then InitProducerId with the producer id and epoch)
  bumps the epoch without waiting for the held request; the held Produce then reaches the
  leader after its transaction ended: refused with partition verification, appended without
  it (KIP-890, the hanging transaction of KAFKA-14402);
- TxnOffsetCommit v3 carries the group metadata: a member the group coordinator does not
  know is refused (the transaction becomes abortable) unless the KIP-447 check is skipped."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode

from cluster.sim.aio_runtime import SimAsyncio
from cluster.sim.cluster import BROKER_PORT, SimCluster, broker_host
from cluster.sim.link_fault import LinkFault
from tests.cluster.sim.sim_requests import create_topic, partition_info, read_all
from workloads.clients.kio_txn_producer import GroupMetadata, KioTxnProducer, TxnState

TOPIC, PARTITIONS = "txn", 3
HOLD_MS = 400  # the held Produce's extra delay, past the 100-ms request and 150-ms message timeouts


def _started(seed: int, config: dict[str, str]) -> SimCluster:
    sim = SimCluster(3, {"min.insync.replicas": "2", **config}, seed=seed)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    assert create_topic(sim, 0, TOPIC, PARTITIONS, 3).error_code == ErrorCode.none

    def in_sync() -> bool:
        infos = [partition_info(sim, 0, TOPIC, p) for p in range(PARTITIONS)]
        return all(i is not None and i.leader >= 0 and len(i.isr) == 3 for i in infos)

    sim.run_until(in_sync, 30_000, step_ms=50, what="every replica in sync")
    return sim


def _leaders(sim: SimCluster) -> dict[int, int]:
    out = {}
    for broker in sim.running_brokers():
        for p in range(PARTITIONS):
            partition = broker.partition(TOPIC, p)
            if partition is not None and partition.is_leader:
                out[p] = broker.config.broker_id
    return out


def _producer(sim: SimCluster, txn_id: str) -> KioTxnProducer:
    bootstrap = ",".join(f"{broker_host(b)}:{BROKER_PORT}" for b in sim.broker_ids)
    return KioTxnProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, request_timeout_ms=100,
                          message_timeout_ms=150, transaction_timeout_ms=10_000, retry_backoff_ms=20)


def late_produce(verification: str) -> tuple[list[bytes], tuple[int, int], float]:
    """The partition's values after the scenario, the producer's (epoch before, after) the
    abort, and the simulated seconds the abort took."""
    sim = _started(7, {"transaction.partition.verification.enable": verification})
    leaders = _leaders(sim)
    found: dict[str, object] = {}

    async def scenario() -> None:
        producer = _producer(sim, "late")
        loop = asyncio.get_running_loop()
        try:
            await producer.init_transactions()
            producer.begin_transaction()
            coordinator = next(iter(producer._coordinators.values()))  # noqa: SLF001 - which broker answers EndTxn
            # A partition led by another broker than the coordinator: the abort's EndTxn and
            # markers do not wait behind the held Produce.
            partition = next(p for p, b in sorted(leaders.items()) if (broker_host(b), BROKER_PORT) != coordinator)
            leader = leaders[partition]
            await producer.send(TOPIC, partition, None, b"1", 0)
            sim.set_link_fault("client", leader, LinkFault(delay_ms=HOLD_MS), tag="hold")
            with pytest.raises(KafkaException) as raised:
                await producer.send(TOPIC, partition, None, b"2", 0)
            error: KafkaError = raised.value.args[0]
            assert error.code() == KafkaError._MSG_TIMED_OUT and error.txn_requires_abort(), error
            assert producer.state is TxnState.ABORTABLE_ERROR
            sim.clear_link_faults("hold")
            epoch, start = producer.producer_epoch, loop.time()
            await producer.abort_transaction()
            found["abort_s"] = loop.time() - start
            found["epochs"] = (epoch, producer.producer_epoch)
            await asyncio.sleep(1.0)  # the held Produce lands
            found["partition"], found["leader"] = partition, leader
        finally:
            await producer.close()

    with SimAsyncio(sim, packages=()) as runtime:
        runtime.run(scenario(), timeout_s=60)
    values = [v for _, v in read_all(sim, found["leader"], TOPIC, found["partition"]) if v in (b"1", b"2")]  # type: ignore[arg-type]
    return values, found["epochs"], found["abort_s"]  # type: ignore[return-value]


@pytest.mark.parametrize("verification", ["true", "false"])
def test_a_timed_out_produce_is_aborted_with_an_epoch_bump_and_lands_late(verification: str) -> None:
    values, (before, after), abort_s = late_produce(verification)
    assert after == before + 1, "the abort bumped the epoch (KIP-360)"
    assert abort_s < HOLD_MS / 1000, f"the abort waited {abort_s:.3f} s: for the held Produce"
    # 1 was acknowledged; 2 arrives after its transaction was aborted.
    assert values == ([b"1"] if verification == "true" else [b"1", b"2"]), values


@pytest.mark.parametrize("skip_check", ["false", "true"])
def test_txn_offset_commit_v3_carries_the_group_metadata(skip_check: str) -> None:
    sim = _started(11, {"transaction.offset.commit.skip.generation.check": skip_check})
    outcome: dict[str, object] = {}

    async def scenario() -> None:
        producer = _producer(sim, "offsets")
        try:
            await producer.init_transactions()
            producer.begin_transaction()
            # No member of the group: a copier outside the group (generation -1, no member id)
            # may commit, one that claims membership may not.
            await producer.send_offsets_to_transaction({(TOPIC, 0): 1}, GroupMetadata("copiers"))
            try:
                await producer.send_offsets_to_transaction({(TOPIC, 0): 2}, GroupMetadata("copiers", 3, "ghost"))
                outcome["ghost"] = "ok"
            except KafkaException as exc:
                outcome["ghost"] = (exc.args[0].code(), exc.args[0].txn_requires_abort(), producer.state)
        finally:
            await producer.close()

    with SimAsyncio(sim, packages=()) as runtime:
        runtime.run(scenario(), timeout_s=60)
    if skip_check == "true":
        assert outcome["ghost"] == "ok"
    else:
        assert outcome["ghost"] == (ErrorCode.unknown_member_id.value, True, TxnState.ABORTABLE_ERROR), outcome
