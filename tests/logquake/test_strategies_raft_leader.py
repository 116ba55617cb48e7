"""The live controller target "raft-leader" in fault schedules (the leader of the highest Raft
epoch, its LeaderChange committed or not, resolved when the fault starts): drawn only when
`live_nodes` names it and the controllers are targets, shrunk toward explicit node ids and
then active-controller, printed as a schedule line, and round-tripped through the
`--fault-schedule` file; bad names are refused naming what is wrong. The packages resolving
it on a simulated quorum: tests/harness/test_hunt_quorum.py (Figure 8 with raft-leader cuts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import find, given, settings

from harness.hunt import describe_fault
from harness.hunt_schedule import check_targets, read_schedule
from logquake.strategies import CHASING_SPECS, CONTROLLER_LIVE_NODE_SPECS, LIVE_NODE_SPECS, Fault, fault_schedules, faults, ops, schedule_json
from nemeses import targets

QUORUM = {"brokers": 3, "time_limit_s": 5, "controllers": 3, "node_kinds": ("controller",)}


def test_the_live_node_names_are_the_nemeses_own() -> None:
    chases = set(CHASING_SPECS)
    assert chases == set(targets.CHASING_TOPOLOGIES) and chases <= set(CONTROLLER_LIVE_NODE_SPECS)
    assert set(CONTROLLER_LIVE_NODE_SPECS) - chases <= set(targets.CONTROLLER_SPECS)
    assert set(LIVE_NODE_SPECS) - chases <= targets.LIVE_SPECS
    assert set(LIVE_NODE_SPECS) - set(CONTROLLER_LIVE_NODE_SPECS) <= set(targets.NODE_SPECS)


def test_a_raft_leader_fault_prints_round_trips_and_becomes_the_packages_op(tmp_path: Path) -> None:
    cut, kill = Fault("partition", "raft-leader", 2.5, 2.0), Fault("kill", "raft-leader", 1.0, 0.5)
    assert describe_fault(cut) == "partition[raft-leader] 2.5+2s"
    for fault in (cut, kill):
        assert Fault.from_json(json.loads(json.dumps(fault.as_json()))) == fault
    assert ops([kill, cut], 3, 5, controllers=3) == [
        {"at_s": 1.0, "f": "start-kill", "value": {"targets": "raft-leader", "nodes": None}},
        {"at_s": 1.5, "f": "stop-kill", "value": None},
        {"at_s": 2.5, "f": "start-partition", "value": {"topology": "raft-leader"}},
        {"at_s": 4.5, "f": "stop-partition", "value": None}]
    path = tmp_path / "schedule.json"
    path.write_text(schedule_json([kill, cut], 3, 5, controllers=3))
    read, _ = read_schedule(path)
    check_targets(read, 3, 3, path)  # names no node: nothing the run lacks
    assert [Fault.from_json(f) for f in json.loads(path.read_text())["faults"]] == [kill, cut]


@settings(max_examples=150, deadline=None)
@given(schedule=fault_schedules(kinds=("kill", "pause", "partition"), max_faults=4, **QUORUM))
def test_without_live_nodes_no_raft_leader_is_drawn(schedule: tuple[Fault, ...]) -> None:
    assert not any(f.targets == "raft-leader" for f in schedule), schedule


@settings(max_examples=150, deadline=None)
@given(schedule=fault_schedules(kinds=("kill", "partition", "link-delay"), max_faults=4, live_nodes=("raft-leader",),
                                **QUORUM))
def test_raft_leader_is_drawn_by_kill_pause_and_partition_only(schedule: tuple[Fault, ...]) -> None:
    for fault in schedule:
        if fault.targets == "raft-leader":
            assert fault.kind in ("kill", "partition")


def drawn_partition_targets(live_node: str, quorum: dict) -> dict[str, int]:
    """How often 300 derandomized partitions of `quorum` drawn with `live_node` take it, the
    active controller, or explicit node ids."""
    seen = {live_node: 0, "active-controller": 0, "ids": 0}

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(faults("partition", live_nodes=(live_node,), **quorum))
    def count(fault: Fault) -> None:
        seen[fault.targets if isinstance(fault.targets, str) else "ids"] += 1

    count()
    return seen


def test_raft_leader_is_drawn_about_as_often_as_the_other_targets() -> None:
    seen = drawn_partition_targets("raft-leader", QUORUM)
    assert seen["raft-leader"] >= 50 and seen["active-controller"] >= 50 and seen["ids"] >= 50, seen


def test_a_raft_leader_fault_shrinks_toward_explicit_ids_then_active_controller() -> None:
    strategy = fault_schedules(kinds=("partition",), live_nodes=CONTROLLER_LIVE_NODE_SPECS, **QUORUM)
    # Any live target late in the run: the simplest is the active controller, at the earliest start.
    schedule = find(strategy, lambda s: any(isinstance(f.targets, str) and f.start_s >= 2 for f in s),
                    settings=settings(max_examples=2000, database=None, derandomize=True))
    assert schedule == (Fault("partition", "active-controller", 2.0, 0.1),)
    schedule = find(strategy, lambda s: any(f.targets == "raft-leader" for f in s),
                    settings=settings(max_examples=2000, database=None, derandomize=True))
    assert schedule == (Fault("partition", "raft-leader", 0.0, 0.1),)


@pytest.mark.parametrize("make, says", [
    (lambda: Fault("pause", "raft-leaders", 0, 1), "a live spec is one of .*raft-leader"),
    (lambda: Fault("clock", "raft-leader", 0, 1), "a live spec is one of primaries$"),
    (lambda: fault_schedules(kinds=("partition",), live_nodes=("leader",), **QUORUM),
     "live nodes leader: choose from raft-leader, primary"),
    (lambda: fault_schedules(kinds=("kill",), live_nodes=("primary",), **QUORUM),
     "live nodes primary name a broker: node_kinds must name broker"),
    (lambda: fault_schedules(3, 5, ("partition",), live_nodes=("raft-leader",)),
     "name a controller of a metadata quorum: node_kinds must name controller"),
    (lambda: fault_schedules(kinds=("link-delay",), live_nodes=("raft-leader",), **QUORUM),
     "need kill, pause or partition among the kinds"),
])
def test_bad_live_nodes_are_named(make, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        make()
