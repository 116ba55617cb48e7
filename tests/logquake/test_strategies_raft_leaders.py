"""The chasing partition "raft-leaders" in fault schedules (the Raft leader cut off, then each
later election's winner `after_ms` or `then_ms` after it won): drawn only when `live_nodes`
names it, by partitions only, with both delays in tenths of 0-1 s; printed, round-tripped
through the `--fault-schedule` file, shrunk toward no delay; bad forms refused naming what is
wrong. The package chasing on a simulated quorum: tests/cluster/sim/test_raft_leader_chase.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import find, given, settings

from harness.hunt import describe_fault
from harness.hunt_schedule import read_schedule
from logquake.strategies import Fault, fault_schedules, ops, schedule_json
from tests.logquake.test_strategies_raft_leader import drawn_partition_targets

QUORUM = {"brokers": 3, "time_limit_s": 8, "controllers": 3, "node_kinds": ("controller",)}
CHASE = Fault("partition", "raft-leaders", 1.0, 7.0, params=(("then_ms", 800.0), ("after_ms", 100.0)))


def test_a_chase_prints_round_trips_and_becomes_the_packages_op(tmp_path: Path) -> None:
    assert describe_fault(CHASE) == "partition[raft-leaders] after_ms=100,then_ms=800 1+7s"
    assert ops([CHASE], 3, 8, controllers=3) == [
        {"at_s": 1.0, "f": "start-partition", "value": {"topology": "raft-leaders", "after_ms": 100.0, "then_ms": 800.0}}]
    path = tmp_path / "schedule.json"
    path.write_text(schedule_json([CHASE], 3, 8, controllers=3), encoding="utf-8")
    assert Fault.from_json(json.loads(path.read_text())["faults"][0]) == CHASE
    (op,), _ = read_schedule(path)
    assert op.value["topology"] == "raft-leaders" and op.value["then_ms"] == 800.0


@pytest.mark.parametrize("make, says", [
    (lambda: Fault("partition", "raft-leaders", 0, 1), "takes the params after_ms, then_ms"),
    (lambda: Fault("partition", "raft-leaders", 0, 1, params=(("after_ms", 100.0),)), "takes the params after_ms, then_ms"),
    (lambda: Fault("partition", "raft-leaders", 0, 1, params=(("after_ms", -1.0), ("then_ms", 0.0))), r"\(ms, >= 0\)"),
    (lambda: Fault("partition", "raft-leader", 0, 1, params=(("after_ms", 1.0), ("then_ms", 0.0))), "takes no variant or params"),
    (lambda: Fault("kill", "raft-leaders", 0, 1), "a live spec is one of"),
    (lambda: fault_schedules(kinds=("kill",), live_nodes=("raft-leaders",), **QUORUM),
     "live nodes raft-leaders chase with partitions: partition must be among the kinds"),
    (lambda: fault_schedules(3, 5, ("partition",), live_nodes=("raft-leaders",)),
     "name a controller of a metadata quorum: node_kinds must name controller"),
])
def test_bad_chases_are_named(make, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        make()


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(schedule=fault_schedules(kinds=("kill", "partition"), max_faults=4, live_nodes=("raft-leaders",), **QUORUM))
def test_chases_are_drawn_by_partitions_with_both_delays_in_tenths_of_a_second(schedule: tuple[Fault, ...]) -> None:
    for fault in schedule:
        if fault.targets == "raft-leaders":
            assert fault.kind == "partition"
            delays = dict(fault.params)
            assert set(delays) == {"after_ms", "then_ms"}
            assert all(v in [n * 100.0 for n in range(11)] for v in delays.values()), delays
        else:
            assert not fault.params


def test_a_chase_is_drawn_about_as_often_as_the_other_targets_and_shrinks_to_no_delay() -> None:
    seen = drawn_partition_targets("raft-leaders", QUORUM)
    assert min(seen.values()) >= 50, seen
    schedule = find(fault_schedules(kinds=("partition",), live_nodes=("raft-leaders",), **QUORUM),
                    lambda s: any(f.targets == "raft-leaders" for f in s),
                    settings=settings(max_examples=2000, database=None, derandomize=True))
    assert schedule == (Fault("partition", "raft-leaders", 0.0, 0.1, params=(("after_ms", 0.0), ("then_ms", 0.0))),)
