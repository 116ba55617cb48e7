"""The live node target "primary" of kill, pause and clock (the broker leading the most tested
partitions, ties: the lowest id), resolved when the fault starts from the leaders a simulated
run's SimControl reads: the broker taken, the leaders seen and the primary are in the
completion; with no leader known nothing is taken and the completion says why. As a fault schedule
target it is drawn only when `live_nodes` names it, by kill and pause only, within a
max_targets bound of one, printed, round-tripped and turned into the packages' op."""

from __future__ import annotations

import json

from hypothesis import find, given, settings
from kio.schema.errors import ErrorCode

from cluster.sim.cluster import SimCluster
from harness.hunt import describe_fault
from logquake.strategies import Fault, fault_schedules, ops
from nemeses.sim_control import SimControl, build_sim_packages
from nemeses.targets import busiest_leader
from tests.cluster.sim.sim_requests import create_topic


def test_kill_and_pause_of_the_primary_take_the_busiest_leader_when_they_start() -> None:
    sim = SimCluster(3, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 30_000, what="brokers ready")
    assert create_topic(sim, 0, "t0", 5, 3).error_code == ErrorCode.none
    control = SimControl(sim, schedule=lambda delay_s, action: None)
    sim.run_until(lambda: len(control.leaders(["t0"])) == 5, 30_000, what="t0's leaders")
    kill, pause, clock = build_sim_packages(["kill", "pause", "clock"], control)
    led = [leader for _, leader in sorted(control.leaders(["t0"]).items())]
    primary = busiest_leader(led)
    assert primary is not None and led.count(primary) >= 2  # five partitions on three brokers

    paused = pause.invoke("start-pause", {"targets": "primary", "nodes": None})
    assert paused["nodes"] == [primary] and paused["primary"] == primary
    assert paused["leaders"] == {f"t0-{p}": leader for p, leader in enumerate(led)}
    assert control.is_paused(primary) and not any(control.is_paused(b) for b in sim.broker_ids if b != primary)
    pause.invoke("stop-pause", None)
    assert not control.is_paused(primary)

    # db_targets=primary reaches the clock package too (a seeded run's clock faults).
    bumped = clock.invoke("start-clock", {"kind": "bump", "delta_ms": 500, "targets": "primary", "nodes": None})
    assert bumped["nodes"] == [primary] and list(bumped["offsets"]) == [str(primary)]
    clock.invoke("stop-clock", None)

    killed = kill.invoke("start-kill", {"targets": "primary", "nodes": None})
    assert killed["nodes"] == [primary] and [k["node"] for k in killed["killed"]] == [primary]
    assert not control.is_alive(primary) and all(control.is_alive(b) for b in sim.broker_ids if b != primary)
    kill.invoke("stop-kill", None)
    assert control.is_alive(primary)

    # Every broker down: no leader can be read, nothing is taken, and the completion says so.
    for broker in sim.broker_ids:
        control.kill(broker)
    nothing = kill.invoke("start-kill", {"targets": "primary", "nodes": None})
    assert nothing == {"targets": "primary", "nodes": [], "killed": [],
                       "error": "no broker answered a Metadata request: none is running and unpaused"}


@settings(max_examples=200, deadline=None)
@given(schedule=fault_schedules(3, 5, ("kill", "pause", "partition", "clock"), max_faults=4, live_nodes=("primary",),
                                max_targets={"kill": 1}))
def test_primary_is_drawn_by_kill_and_pause_only(schedule: tuple[Fault, ...]) -> None:
    for fault in schedule:
        if fault.targets == "primary":
            assert fault.kind in ("kill", "pause", "partition")  # a partition's own live spec of the same name


def test_primary_is_drawn_only_when_asked_and_within_a_bound_of_one() -> None:
    strategy = fault_schedules(3, 5, ("kill",), max_targets={"kill": 1}, live_nodes=("primary",))
    schedule = find(strategy, lambda s: any(f.targets == "primary" for f in s),
                    settings=settings(max_examples=2000, database=None, derandomize=True))
    assert schedule == (Fault("kill", "primary", 0.0, 0.1),)

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(fault_schedules(3, 5, ("kill", "pause"), max_targets={"kill": 1}))
    def never(schedule: tuple[Fault, ...]) -> None:
        assert not any(f.targets == "primary" for f in schedule)

    never()


def test_a_primary_fault_prints_round_trips_and_becomes_the_packages_op() -> None:
    kill, pause = Fault("kill", "primary", 1.0, 0.5), Fault("pause", "primary", 0.5, 2.0)
    assert describe_fault(kill) == "kill[primary] 1+0.5s"
    for fault in (kill, pause):
        assert Fault.from_json(json.loads(json.dumps(fault.as_json()))) == fault
    assert ops([kill, pause], 3, 5) == [
        {"at_s": 0.5, "f": "start-pause", "value": {"targets": "primary", "nodes": None}},
        {"at_s": 1.0, "f": "start-kill", "value": {"targets": "primary", "nodes": None}},
        {"at_s": 1.5, "f": "stop-kill", "value": None},
        {"at_s": 2.5, "f": "stop-pause", "value": None}]
