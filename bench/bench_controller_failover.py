"""A partition's failover through a controller failover, in the simulator (issue 19,
Performance): three controllers on the Raft quorum and three brokers (the simulator's broker
settings: broker.session.timeout.ms 1000, heartbeats every 200 ms; the quorum's KRaft
defaults). The active controller and the broker leading a partition are SIGKILLed together;
the benchmark measures, in simulated time from the kills, until a surviving broker's image
shows the partition's next leader epoch: the next controller's election, then the grace
period it gives every broker (the dead one is fenced one session timeout after the failover,
as in KRaft), then the election of the partition's leader.

    python -m bench.bench_controller_failover [--seeds 10] [--controllers 3]

Reference (printed alongside): Kafka's defaults for the quorum, fetch timeout 2000 +
election timeout 1000, plus the broker session timeout of these settings (1000) = 4000 ms.
Simulated time is exact for a seed, whatever the machine's load; the wall time is printed.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.protocol.codec import payload_class
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCluster

REFERENCE_MS = 2000 + 1000 + 1000


def ready(sim: SimCluster) -> bool:
    return sim.controller is not None and all(b.controller_client.registered and not b.controller_client.fenced
                                              for b in sim.running_brokers())


def create_topic(sim: SimCluster, name: str) -> None:
    topic = payload_class(ApiKey.CREATE_TOPICS, 5, "CreatableTopic", EntityType.request)
    body = sim.call(0, ApiKey.CREATE_TOPICS, 5, topics=(topic(name=name, num_partitions=1, replication_factor=3, assignments=(), configs=()),),
                    timeout=datetime.timedelta(seconds=10), validate_only=False)
    assert body.topics[0].error_code == ErrorCode.none, body


def one(seed: int, controllers: int) -> float:
    sim = SimCluster(3, controllers=controllers, seed=seed)
    sim.run_until(lambda: ready(sim), 20_000, what="an active controller and every broker unfenced")
    create_topic(sim, "t")
    sim.run_for(1_000)
    state = sim.broker(0).controller_client.image.partition("t", 0)
    assert state is not None
    sim.kill_controller()
    sim.kill(state.leader)
    observer = next(b for b in sim.broker_ids if b != state.leader)

    def moved() -> bool:
        now = sim.broker(observer).controller_client.image.partition("t", 0)
        return now is not None and now.leader_epoch > state.leader_epoch

    return sim.run_until(moved, 30_000, step_ms=1, what="the partition's next leader")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--controllers", type=int, default=3, choices=(3, 5))
    args = parser.parse_args()
    started = time.monotonic()
    times = [one(seed, args.controllers) for seed in range(1, args.seeds + 1)]
    median = statistics.median(times)
    print(f"{args.controllers} controllers, seeds 1-{args.seeds}: partition re-elected after the active controller and its "
          f"leader were killed: median {median:.0f} ms (min {min(times):.0f}, max {max(times):.0f}) simulated")
    print(f"reference (quorum fetch 2000 + election 1000 + broker session 1000): {REFERENCE_MS} ms; median is {median / REFERENCE_MS:.2f}x")
    print(f"wall time {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
