"""Simulated quorums of 3 and 5 nodes under fault schedules (kills with and without power
loss, graceful stops, pauses, partitions of every shape the partition nemesis knows, link
loss, delay, duplication and reordering) while a client appends all along; after each run
the safety checks (at most one leader per epoch, epochs monotonic, committed records never
lost or changed, every acknowledged append on a majority) and liveness after healing.

Seeded schedules for each shape, and a Hypothesis search over schedules (bounded, derandomized
so CI runs the same examples)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.sim.link_fault import LinkFault
from cluster.sim.quorum_harness import QuorumSim
from nemeses.targets import partition_topology

# The partition nemesis's shapes, and one-way-in (nothing reaches one node, which still
# sends: its pre-votes arrive and are granted, the grants never reach it).
SHAPES = ["one", "majority", "minority-third", "majorities-ring", "bridge", "one-way", "one-way-in"]
KINDS = ["kill", "power-loss", "stop", "pause", "partition", "link"]


@dataclass(frozen=True)
class Fault:
    kind: str
    at_ms: int  # after the previous fault began
    duration_ms: int
    target: int  # a node index (mod n) or a shape index
    seed: int


def apply_partition(sim: QuorumSim, shape: str, rng: random.Random) -> None:
    sim.heal()
    if shape == "one-way-in":
        deaf = rng.choice(sim.node_ids)
        for node in sim.node_ids:
            if node != deaf:
                sim.block(node, deaf)
        return
    topology = partition_topology(shape, sim.node_ids, rng)
    for src, dst in topology.blocked | topology.blocked_data:
        sim.block(src, dst)


def run_schedule(n: int, seed: int, faults: list[Fault]) -> QuorumSim:
    sim = QuorumSim(n, seed)
    sim.run_until(lambda: sim.leader() is not None, 20_000, what="a first leader")
    counter = [0]

    def client_steps(duration_ms: float) -> None:
        """Append one record every 25 ms for `duration_ms`."""
        elapsed = 0.0
        while elapsed < duration_ms:
            sim.propose(f"c{counter[0]}".encode())
            counter[0] += 1
            sim.run_for(25)
            elapsed += 25

    for fault in faults:
        client_steps(fault.at_ms)
        node = sim.node_ids[fault.target % n]
        rng = random.Random(fault.seed)
        undo = None
        if fault.kind in ("kill", "power-loss", "stop") and sim.is_running(node):
            if fault.kind == "stop":
                sim.stop(node)
            else:
                sim.kill(node, lose_unflushed=fault.kind == "power-loss")

            def undo(node: int = node) -> None:
                if not sim.is_running(node):
                    sim.start(node)
        elif fault.kind == "pause":
            sim.pause(node)

            def undo(node: int = node) -> None:
                sim.resume(node)
        elif fault.kind == "partition":
            apply_partition(sim, SHAPES[fault.target % len(SHAPES)], rng)
            undo = sim.heal
        elif fault.kind == "link":
            sim.set_node_fault(node, LinkFault(delay_ms=rng.choice([5, 50]), jitter_ms=rng.choice([0, 20]), loss=rng.choice([0.0, 0.1, 0.3]),
                                               duplicate=rng.choice([0.0, 0.3]), reorder=rng.choice([0.0, 0.2])))
            undo = sim.clear_link_faults
        client_steps(fault.duration_ms)
        if undo is not None:
            sim.run_for(10)  # a stopped node's process ends a moment after its shutdown
            undo()
    # heal everything and let the quorum settle: it must elect and agree again
    sim.heal()
    sim.clear_link_faults()
    for node in sim.node_ids:
        sim.resume(node)
        if not sim.is_running(node):
            sim.start(node)
    sim.run_until(lambda: sim.leader() is not None, 30_000, what="a leader after healing")
    client_steps(200)
    sim.run_until(lambda: len({q.high_watermark for q in sim.running()}) == 1 and sim.leader() is not None
                  and all(q.high_watermark == q.log.end_offset for q in sim.running()), 30_000, what="every node caught up")
    return sim


def assert_safe_and_live(sim: QuorumSim) -> None:
    violations = sim.check()
    assert violations == [], "\n".join(map(str, violations))
    values = {tuple(v for _, _, v in sim.machine(n).values) for n in sim.node_ids}
    assert len(values) == 1, "the state machines disagree after healing"
    assert sim.acknowledged, "nothing was acknowledged"


# Every shape on 5 nodes; on 3 the shapes that differ there (the others reduce to these).
@pytest.mark.parametrize(("n", "shape"), [(5, s) for s in range(len(SHAPES))] + [(3, SHAPES.index(s)) for s in ("one", "bridge", "one-way")],
                         ids=[f"{SHAPES[s]}-5" for s in range(len(SHAPES))] + ["one-3", "bridge-3", "one-way-3"])
def test_every_partition_shape_with_kills_keeps_the_quorum_safe(n: int, shape: int) -> None:
    faults = [Fault("partition", 300, 3_000, shape, seed=shape), Fault("kill", 100, 2_500, shape + 1, seed=0),
              Fault("partition", 200, 2_500, shape + 2, seed=shape + 7)]
    assert_safe_and_live(run_schedule(n, seed=100 + 10 * n + shape, faults=faults))


@pytest.mark.parametrize("n", [3, 5])
def test_pauses_power_loss_stops_and_lossy_links_keep_the_quorum_safe(n: int) -> None:
    faults = [Fault("pause", 200, 3_000, 0, 1), Fault("power-loss", 200, 2_500, 1, 2), Fault("link", 100, 1_500, 2, 3),
              Fault("stop", 100, 1_000, 0, 4), Fault("link", 100, 1_000, 1, 5)]
    assert_safe_and_live(run_schedule(n, seed=200 + n, faults=faults))


faults_strategy = st.lists(
    st.builds(Fault, kind=st.sampled_from(KINDS), at_ms=st.integers(0, 1_500), duration_ms=st.integers(100, 4_000),
              target=st.integers(0, 20), seed=st.integers(0, 1_000)),
    min_size=1, max_size=4)


@settings(max_examples=10, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([3, 5]), seed=st.integers(0, 2**16), faults=faults_strategy)
def test_random_fault_schedules_keep_the_quorum_safe(n: int, seed: int, faults: list[Fault]) -> None:
    assert_safe_and_live(run_schedule(n, seed, faults))
