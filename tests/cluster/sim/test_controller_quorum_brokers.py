"""Brokers follow the active controller among controller.quorum.voters: a voter that cannot
be reached is passed over for the next one, and the whole broker lifecycle (registration,
unfencing, forwarded CreateTopics, the metadata fetch) then runs against the one that
answers."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.sim.cluster import CONTROLLER_HOST, CONTROLLER_ID, CONTROLLER_PORT, SimCluster
from tests.cluster.sim.sim_requests import create_topic

# A first voter nobody runs (no node at that address): every broker starts by asking it.
VOTERS = f"1001@127.0.0.8:9093,{CONTROLLER_ID}@{CONTROLLER_HOST}:{CONTROLLER_PORT}"


def test_brokers_pass_over_an_unreachable_voter_and_serve() -> None:
    sim = SimCluster(3, broker_properties={b: {"controller.quorum.voters": VOTERS} for b in range(3)}, seed=3)
    sim.run_until(lambda: all(b.controller_client.registered and not b.controller_client.fenced for b in sim.running_brokers()),
                  10_000, what="every broker registered and unfenced")
    for broker in sim.running_brokers():
        assert broker.controller_client.controller.node_id == CONTROLLER_ID
        assert broker.controller_client.controller_moves == 1
        assert [v.node_id for v in broker.controller_client.voters] == [1001, CONTROLLER_ID]
    # A forwarded admin request and the metadata it produces reach every broker.
    assert create_topic(sim, 0, "t", partitions=3, replication_factor=3).error_code == ErrorCode.none
    sim.run_until(lambda: all(b.controller_client.image.topic("t") is not None for b in sim.running_brokers()), 5_000,
                  what="topic t in every broker's image")
