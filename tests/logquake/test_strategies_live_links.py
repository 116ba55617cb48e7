"""Live link targets in fault schedules ("client>primary" and the like, resolved when the fault
starts): drawn only when `live_links` names them, shrunk toward "client>primary", printed as a
schedule line, and round-tripped through the `--fault-schedule` file; bad names are refused
naming what is wrong. The package resolving them: tests/cluster/sim/test_link_faults_live.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import find, given, settings

from harness.hunt import describe_fault
from harness.hunt_schedule import check_targets, read_schedule
from logquake.strategies import LIVE_LINK_SPECS, Fault, fault_schedules, faults, ops, schedule_json
from nemeses import targets

LOSS = (("loss", 0.5),)


def test_the_live_link_names_are_the_nemeses_own() -> None:
    assert LIVE_LINK_SPECS == targets.LIVE_LINK_SPECS


def test_a_live_link_fault_prints_round_trips_and_becomes_the_packages_op(tmp_path: Path) -> None:
    fault = Fault("link-loss", "client>primary", 1.0, 3.0, params=LOSS)
    assert describe_fault(fault) == "link-loss[client>primary] loss=0.5 1+3s"
    assert Fault.from_json(json.loads(json.dumps(fault.as_json()))) == fault
    assert ops([fault], 3, time_limit_s=6) == [
        {"at_s": 1.0, "f": "start-link-loss", "value": {"target": "client>primary", "fault": {"loss": 0.5}}},
        {"at_s": 4.0, "f": "stop-link-loss", "value": None}]
    path = tmp_path / "schedule.json"
    path.write_text(schedule_json([fault], 3, time_limit_s=6))
    read, _ = read_schedule(path)
    check_targets(read, 3, path=path)  # names no node: nothing the run lacks
    assert [(op.at_s, op.f, op.value) for op in read] == [(op["at_s"], op["f"], op["value"]) for op in ops([fault], 3, 6)]
    assert [Fault.from_json(f) for f in json.loads(path.read_text())["faults"]] == [fault]


@settings(max_examples=150, deadline=None)
@given(schedule=fault_schedules(brokers=3, time_limit_s=5, kinds=("link-loss", "link-delay", "kill"), max_faults=3))
def test_without_live_links_no_live_link_is_drawn(schedule: tuple[Fault, ...]) -> None:
    assert not any(f.kind.startswith("link-") and isinstance(f.targets, str) for f in schedule), schedule


@settings(max_examples=150, deadline=None)
@given(schedule=fault_schedules(brokers=3, time_limit_s=5, kinds=("link-loss", "kill"), max_faults=3,
                                live_links=("client>primaries", "client>primary")))
def test_named_live_links_are_drawn_alongside_explicit_links(schedule: tuple[Fault, ...]) -> None:
    for fault in schedule:
        if fault.kind == "link-loss" and isinstance(fault.targets, str):
            assert fault.targets in ("client>primary", "client>primaries")
            assert fault.start_value([0, 1, 2])["target"] == fault.targets


def test_a_live_link_fault_shrinks_to_client_primary_at_once_for_the_shortest_time() -> None:
    strategy = fault_schedules(3, 5, ("link-loss",), live_links=LIVE_LINK_SPECS)
    # "Some loss of at least 30 % on a live target": the simplest live target, the least loss.
    schedule = find(strategy, lambda s: any(isinstance(f.targets, str) and dict(f.params)["loss"] >= 0.3 for f in s),
                    settings=settings(max_examples=2000, database=None, derandomize=True))
    assert [f for f in schedule if isinstance(f.targets, str)] == \
        [Fault("link-loss", "client>primary", 0.0, 0.1, params=(("loss", 0.3),))]
    # An explicit-link failure may shrink to the live target too (it is drawn first): the
    # answers' way only when the client's way does not do.
    schedule = find(strategy, lambda s: any(f.targets in ("primary>client", "primaries>client") for f in s),
                    settings=settings(max_examples=2000, database=None, derandomize=True))
    assert [f.targets for f in schedule if isinstance(f.targets, str)] == ["primary>client"]


@pytest.mark.parametrize("make, says", [
    (lambda: Fault("link-loss", "client>leader", 0, 1, params=LOSS), "or a live link target .*client>primary"),
    (lambda: fault_schedules(3, 5, ("link-loss",), live_links=("client>all",)), "live links client>all: choose from"),
    (lambda: fault_schedules(3, 5, ("kill",), live_links=("client>primary",)), "need a link kind among the kinds"),
    (lambda: faults("link-loss", 3, 5, controllers=3, node_kinds=("controller",), live_links=("client>primary",)),
     "node_kinds must name broker"),
])
def test_bad_live_links_are_named(make, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        make()
