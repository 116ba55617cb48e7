"""Pins an aiokafka 0.14 bug the simulated transactional and eos clients work around
(workloads/clients/aiokafka_txn.py, `txn_settings`): a consumer configured with several
assignors sends one JoinGroup per assignor every time it joins (the send sits inside its loop
over the assignors; aio-libs/aiokafka#1168), the first with one protocol, the next with two.
The coordinator rightly treats the second as a member whose protocols changed and rebalances
again. One consumer on one simulated broker, counted from the client's request trace: when
an upgrade fixes it, this test fails, and the workaround (one assignor) can go."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from cluster.protocol.versions import ApiKey
from cluster.sim.aio_runtime import SimAsyncio
from cluster.sim.cluster import BROKER_PORT, SimCluster, broker_host


def _join_groups(assignors: tuple[type, ...]) -> tuple[int, int]:
    """(JoinGroup requests, generation reached) for one consumer's first join."""
    sim = SimCluster(1, seed=4)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers ready")
    bootstrap = f"{broker_host(0)}:{BROKER_PORT}"
    with SimAsyncio(sim) as runtime:
        async def main() -> int:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            await admin.create_topics([NewTopic("t", 2, 1)])
            await admin.close()
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="g", partition_assignment_strategy=assignors)
            await consumer.start()
            consumer.subscribe(["t"])
            while not consumer.assignment():
                await asyncio.sleep(0.1)
            await asyncio.sleep(1)  # any further rejoin would have happened by now
            generation = consumer._coordinator.generation  # noqa: SLF001 - aiokafka keeps it there
            await consumer.stop()
            return int(generation)

        generation = runtime.run(main(), timeout_s=60)
        joins = sum(1 for entry in runtime.trace if entry.api_key == ApiKey.JOIN_GROUP)
    return joins, generation


def test_aiokafka_sends_one_join_group_per_assignor_and_so_rebalances_twice() -> None:
    one_joins, one_generation = _join_groups((RangePartitionAssignor,))
    two_joins, two_generation = _join_groups((RangePartitionAssignor, RoundRobinPartitionAssignor))
    assert two_joins == one_joins + 1, (one_joins, two_joins)
    assert (one_generation, two_generation) == (1, 2)
