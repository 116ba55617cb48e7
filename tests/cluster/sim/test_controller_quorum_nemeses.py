"""The fault packages reach the controllers of a simulated quorum (node_kinds=broker,controller):
kill, pause and clock take controller node ids, `active-controller` names the one that leads
when the fault is performed, the `active-controller` partition isolates it from every other
node, and shapes drawn over brokers and controllers mix them. Each fault on the active
controller moves the leadership; after the heal the cluster serves and the quorum checks
find nothing."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from cluster.sim.cluster import CONTROLLER_ID, SimCluster, controller_host
from nemeses.base import NemesisOptions
from nemeses.sim_control import SimControl, build_sim_packages
from nemeses.targets import choose_nodes
from tests.cluster.sim.sim_requests import create_topic

OPTIONS = NemesisOptions(node_kinds=("broker", "controller"), db_targets=("active-controller",),
                         partition_targets=("active-controller", "majority", "one"))


def ready(sim: SimCluster) -> bool:
    return sim.controller is not None and all(b.controller_client.registered and not b.controller_client.fenced
                                              for b in sim.running_brokers())


def start(seed: int) -> tuple[SimCluster, SimControl]:
    sim = SimCluster(3, controllers=3, seed=seed)
    sim.run_until(lambda: ready(sim), 20_000, what="an active controller")
    control = SimControl(sim, schedule=lambda delay_s, action: sim.scheduler.call_later(delay_s * 1000, action))
    return sim, control


def healed_and_serving(sim: SimCluster, name: str) -> None:
    sim.run_until(lambda: ready(sim), 30_000, what="every broker unfenced after the heal")
    assert create_topic(sim, 0, name, 3, 3).error_code == ErrorCode.none
    report = sim.quorum_report()
    assert report["valid"], report["violations"]


@pytest.mark.parametrize("fault", ["kill", "pause", "partition"])
def test_a_fault_on_the_active_controller_moves_the_leadership(fault: str) -> None:
    sim, control = start(seed=4)
    (package,) = build_sim_packages([fault], control, OPTIONS)
    first = control.active_controller()
    assert first in control.controller_ids
    value = {"topology": "active-controller"} if fault == "partition" else {"targets": "active-controller", "nodes": None}
    outcome = package.invoke(f"start-{fault}", value)
    assert first in (outcome.get("nodes") or []) or outcome.get("isolated") == first, outcome
    if fault == "partition":
        others = [control.host(n) for n in control.nemesis_nodes(("broker", "controller")) if n != first]
        assert all(sim.network.is_blocked(controller_host(first), h) and sim.network.is_blocked(h, controller_host(first)) for h in others)
        assert not sim.network.is_blocked(control.host(0), control.host(1))
    sim.run_until(lambda: control.active_controller() not in (None, first), 20_000, what=f"a new active controller after the {fault}")
    second = control.active_controller()
    sim.run_until(lambda: all(b.controller_client.controller.node_id == second for b in sim.running_brokers()), 20_000,
                  what=f"every broker following controller {second}")
    package.invoke(f"stop-{fault}", None)
    healed_and_serving(sim, f"after-{fault}")


def test_clock_skew_reaches_a_controller() -> None:
    sim, control = start(seed=5)
    (clock,) = build_sim_packages(["clock"], control, OPTIONS)
    active = control.active_controller()
    outcome = clock.invoke("start-clock", {"kind": "bump", "targets": "active-controller", "nodes": None, "delta_ms": 60_000})
    assert outcome["offsets"] == {str(active): "+60"} and control.clock_offset(active) == 60.0
    assert sim.controller_node(active).clock.wall_ms() - sim.clock.wall_ms() == 60_000
    sim.run_for(3_000)  # the quorum's timers run on the monotonic clock: the skew moves no election
    assert control.active_controller() == active
    clock.invoke("stop-clock", None)
    assert control.clock_offset(active) == 0.0
    healed_and_serving(sim, "after-clock")


def test_shapes_drawn_over_brokers_and_controllers_mix_them() -> None:
    sim, control = start(seed=6)
    nodes = control.nemesis_nodes(OPTIONS.node_kinds)
    assert nodes == [0, 1, 2, CONTROLLER_ID, CONTROLLER_ID + 1, CONTROLLER_ID + 2]
    rng = random.Random(3)
    picked = {tuple(choose_nodes("majority", nodes, rng)) for _ in range(30)}
    assert any(any(n >= CONTROLLER_ID for n in p) and any(n < CONTROLLER_ID for n in p) for p in picked)
    (partition,) = build_sim_packages(["partition"], control, OPTIONS)
    schedule = partition.schedule(random.Random(7))
    starts = [op for op in (next(schedule) for _ in range(12)) if op["f"] == "start-partition" and "blocked" in op["value"]]
    assert any(any(n >= CONTROLLER_ID for pair in op["value"]["blocked"] for n in pair) for op in starts)
    # Performed: controllers are placed in the shape, not kept with the majority.
    partition.invoke("start-partition", starts[0]["value"])
    wanted = {(control.host(s), control.host(d)) for s, d in starts[0]["value"]["blocked"]}
    hosts = [control.host(n) for n in nodes]
    assert {(a, b) for a in hosts for b in hosts if sim.network.is_blocked(a, b)} == wanted
    partition.invoke("stop-partition", None)
    healed_and_serving(sim, "after-shape")
