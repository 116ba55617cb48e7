"""Snapshots (KIP-630): every node snapshots its state machine after enough new committed
bytes and drops the log below it; a node behind the leader's log start fetches the snapshot
with FetchSnapshot, loads it and follows from there; restarts load the newest snapshot."""

from __future__ import annotations

from cluster.sim.quorum_harness import QuorumSim

SMALL_SNAPSHOTS = {"metadata.log.max.record.bytes.between.snapshots": "64", "controller.quorum.fetch.max.bytes": "1"}


def values(sim: QuorumSim, node_id: int) -> list[bytes]:
    return [v for _, _, v in sim.machine(node_id).values]


def test_a_node_behind_the_log_start_catches_up_from_the_leaders_snapshot() -> None:
    sim = QuorumSim(3, seed=21, properties=SMALL_SNAPSHOTS)
    sim.run_until(lambda: sim.leader() is not None, 20_000)
    leader = sim.leader()
    assert leader is not None
    behind = next(n for n in sim.node_ids if n != leader.node_id)
    sim.kill(behind)
    for i in range(60):
        sim.propose(f"value-{i:03d}".encode())
        sim.run_for(5)
    sim.run_for(500)
    snapshot = leader.log.snapshots.latest_id
    assert snapshot is not None and leader.log.start_offset == snapshot.end_offset > 0
    sim.start(behind)
    sim.run_until(lambda: sim.node(behind).high_watermark == leader.high_watermark, 10_000, what="the restarted node caught up")
    node = sim.node(behind)
    assert node.snapshots_installed == 1  # fetched from the leader rather than replayed from offset 0
    assert node.log.start_offset > 0
    assert values(sim, behind) == values(sim, leader.node_id) == [f"value-{i:03d}".encode() for i in range(60)]
    assert sim.check() == []


def test_a_restart_loads_the_newest_snapshot_and_applies_only_what_follows() -> None:
    sim = QuorumSim(3, seed=22, properties=SMALL_SNAPSHOTS)
    sim.run_until(lambda: sim.leader() is not None, 20_000)
    for i in range(30):
        sim.propose(f"r{i}".encode())
        sim.run_for(5)
    sim.run_for(300)
    for node_id in sim.node_ids:
        sim.restart(node_id)
    sim.run_until(lambda: sim.leader() is not None, 20_000)
    for i in range(30, 40):
        sim.propose(f"r{i}".encode())
        sim.run_for(5)
    sim.run_for(500)
    for node_id in sim.node_ids:
        assert values(sim, node_id) == [f"r{i}".encode() for i in range(40)]
        # on_commit after the restart began at the snapshot, not at offset 0
        assert sim.machine(node_id).delivered[0][0] > 0
    assert sim.check() == []
