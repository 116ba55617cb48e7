"""Seeded schedules and target choice (pure: no processes), and the packages' contract."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from cluster.control import BrokerClocks, ClusterControl
from nemeses.base import COLORS, NemesisError, NemesisOptions, build_packages
from nemeses.clock import ClockPackage
from nemeses.combined import QUIET, Combined
from nemeses.kill import KillPackage
from nemeses.partition import partition_schedule
from nemeses.pause import PausePackage
from nemeses.targets import (
    LIVE_SPECS, PARTITION_TOPOLOGIES, Topology, choose_nodes, complete_grudge, majorities_ring, majority_size, partition_topology,
)
from tests.nemeses.echo_cluster import EchoCluster


@pytest.fixture
def control(tmp_path):
    # Never started: schedules only need the broker ids.
    return ClusterControl(EchoCluster(5, base_dir=str(tmp_path)), BrokerClocks(tmp_path / "clocks"))


def take(iterator, n=60):
    return list(itertools.islice(iterator, n))


def schedules(control, seed):
    options = NemesisOptions()
    return {
        "kill": take(KillPackage(control, options).schedule(random.Random(seed))),
        "pause": take(PausePackage(control, options).schedule(random.Random(seed))),
        "clock": take(ClockPackage(control, options).schedule(random.Random(seed))),
        "partition": take(partition_schedule(control.broker_ids, options, random.Random(seed))),
    }


def test_same_seed_same_schedule_other_seed_other_schedule(control):
    first, again, other = schedules(control, 42), schedules(control, 42), schedules(control, 43)
    assert first == again
    for name in first:
        assert first[name] != other[name], name
        json.dumps(first[name])  # recorded in the history as is


def test_schedules_alternate_start_and_stop(control):
    for name, ops in schedules(control, 1).items():
        assert [op["f"] for op in ops] == [f"start-{name}", f"stop-{name}"] * 30
        assert all(op["value"] is None for op in ops[1::2])


def test_schedules_use_every_configured_target(control):
    options = NemesisOptions()
    kills = take(KillPackage(control, options).schedule(random.Random(5)), 400)[::2]
    assert {op["value"]["targets"] for op in kills} == set(options.db_targets)
    primaries = [op for op in kills if op["value"]["targets"] == "primaries"]
    assert all(op["value"]["nodes"] is None for op in primaries)  # live choice, made when performed
    partitions = take(partition_schedule(control.broker_ids, options, random.Random(5)), 400)[::2]
    assert {op["value"]["topology"] for op in partitions} == set(options.partition_targets)
    clocks = take(ClockPackage(control, options).schedule(random.Random(5)), 400)[::2]
    assert {op["value"]["kind"] for op in clocks} == {"bump", "strobe"}
    for op in clocks:
        value = op["value"]
        if value["kind"] == "bump":
            assert 11 <= abs(value["delta_ms"]) <= 1.5 ** 31
        else:
            assert 4 <= value["period_ms"] < 1024 and 4 <= value["delta_ms"] < 2 ** 18 and 0 <= value["duration_ms"] < 32_000


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 9])
def test_node_specs_pick_the_right_number_of_distinct_brokers(n):
    nodes = list(range(n))
    rng = random.Random(n)
    expected = {"one": 1, "minority": max(1, majority_size(n) - 1), "minority-third": max(1, n // 3),
                "majority": majority_size(n), "all": n}
    for spec, count in expected.items():
        chosen = choose_nodes(spec, nodes, rng)
        assert len(chosen) == len(set(chosen)) == count and set(chosen) <= set(nodes)
    assert choose_nodes("primaries", nodes, rng) is None
    with pytest.raises(ValueError, match="unknown node target 'most'"):
        choose_nodes("most", nodes, rng)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 9])
def test_majorities_ring_every_broker_hears_a_majority_and_no_two_the_same(n):
    ring = list(range(n))
    random.Random(n).shuffle(ring)
    blocked = majorities_ring(ring)
    heard = {dst: frozenset(src for src in ring if (src, dst) not in blocked) for dst in ring}
    assert all(dst in view and len(view) == majority_size(n) for dst, view in heard.items())
    assert len(set(heard.values())) == n


@pytest.mark.parametrize("n", [3, 5, 6])
def test_component_topologies(n):
    nodes = list(range(n))
    rng = random.Random(n)
    one = partition_topology("one", nodes, rng)
    (isolated,), rest = one.components
    assert set(one.blocked) == complete_grudge([[isolated], rest]) and len(rest) == n - 1

    majority = partition_topology("majority", nodes, rng)
    small, big = majority.components
    assert len(small) == n // 2 and len(big) == n - n // 2 and set(small) | set(big) == set(nodes)
    assert all((b, a) in majority.blocked for a, b in majority.blocked)  # a clean split is symmetric

    bridge = partition_topology("bridge", nodes, rng)
    node = bridge.as_value()["bridge"]
    assert all(node not in pair for pair in bridge.blocked)
    left, right = bridge.components
    assert set(bridge.blocked) == {(s, d) for s, d in complete_grudge([left, right]) if node not in (s, d)}

    one_way = partition_topology("one-way", nodes, rng)
    source = one_way.as_value()["from"]
    assert not one_way.blocked and set(one_way.blocked_data) == {(source, d) for d in nodes if d != source}

    primaries = partition_topology("primaries", nodes, rng, primaries=[0, 2])
    assert primaries.components == ((0,), (2,), tuple(x for x in nodes if x not in (0, 2)))


@pytest.mark.parametrize("n", [3, 5])
def test_primary_isolates_the_broker_leading_most_tested_partitions(n):
    from nemeses.partition import brokers_without_majority

    nodes = list(range(n))
    # One entry per tested partition: broker 2 leads three, broker 0 two, broker 1 one.
    primary = partition_topology("primary", nodes, random.Random(1), primaries=[0, 2, 1, 2, 0, 2])
    assert primary.components == ((2,), tuple(x for x in nodes if x != 2))
    assert set(primary.blocked) == complete_grudge(primary.components)
    assert primary.as_value()["isolated"] == 2 and primary.as_value()["leads"] == 3
    # Cut off from a majority, so from the controller too; the rest keep it and elect.
    assert brokers_without_majority(nodes, sorted(primary.blocked)) == [2]
    # Ties go to the lowest id; leaders that are not brokers of the cluster are ignored.
    assert partition_topology("primary", nodes, random.Random(1), primaries=[2, 1, 1, 2, 9, 9, 9]).components[0] == (1,)
    assert partition_topology("primary", nodes, random.Random(1), primaries=[]).blocked == frozenset()
    # 'primaries' with leaders on every broker leaves each broker alone: nobody keeps a majority.
    everyone = partition_topology("primaries", nodes, random.Random(1), primaries=[b for b in nodes for _ in range(2)])
    assert brokers_without_majority(nodes, sorted(everyone.blocked)) == nodes


def test_topology_round_trips_through_its_recorded_value():
    rng = random.Random(3)
    for name in (t for t in PARTITION_TOPOLOGIES if t not in LIVE_SPECS):
        topology = partition_topology(name, [0, 1, 2, 3, 4], rng)
        value = json.loads(json.dumps(topology.as_value()))
        again = Topology.from_value(value)
        assert (again.blocked, again.blocked_data) == (topology.blocked, topology.blocked_data)
    with pytest.raises(ValueError, match="needs the current leaders"):
        partition_topology("primaries", [0, 1], rng)
    assert partition_topology("majority", [0], rng).blocked == frozenset()


def test_combined_schedule_has_rounds_and_quiet_periods(control):
    options = NemesisOptions()
    packages = [KillPackage(control, options), PausePackage(control, options), ClockPackage(control, options)]
    combined = Combined(packages, quiet_probability=0.25)
    ops = take(combined.schedule(random.Random(9)), 600)
    assert ops == take(Combined(packages, 0.25).schedule(random.Random(9)), 600)
    assert sum(op["f"] == QUIET for op in ops) > 20
    active: list[str] = []
    overlapping = 0
    for op in ops:
        if op["f"].startswith("start-"):
            name = op["f"][len("start-"):]
            assert name not in active
            active.append(name)
            overlapping += len(active) > 1
        elif op["f"].startswith("stop-"):
            name = op["f"][len("stop-"):]
            assert active[-1] == name  # stops in reverse order of starts
            active.pop()
        else:
            assert op["f"] == QUIET and not active  # quiet only between rounds
    assert overlapping > 0
    assert combined.invoke(QUIET, None) == {"quiet": True}
    assert combined.colors() == {"kill": COLORS["kill"], "pause": COLORS["pause"], "clock": COLORS["clock"]}
    with pytest.raises(ValueError, match="no combined package performs 'start-partition'"):
        combined.invoke("start-partition", {})


def test_build_packages_fails_early_with_the_reason(control, tmp_path):
    packages = build_packages(["kill", "pause", "clock"], control, NemesisOptions())
    assert [(p.name, p.color) for p in packages] == [(n, COLORS[n]) for n in ("kill", "pause", "clock")]
    with pytest.raises(NemesisError, match="unknown nemesis 'flood'"):
        build_packages(["flood"], control)
    with pytest.raises(NemesisError, match="twice"):
        build_packages(["kill", "kill"], control)
    # This test process is in the host's namespace: rules here would outlive a crash.
    with pytest.raises(NemesisError, match="private network namespace"):
        build_packages(["partition"], control)
    bare = ClusterControl(EchoCluster(3, base_dir=str(tmp_path / "bare")))
    with pytest.raises(NemesisError, match="libfaketime"):
        build_packages(["clock"], bare)


def test_options_name_what_is_wrong():
    with pytest.raises(NemesisError, match="unknown db_targets value 'leader'"):
        NemesisOptions(db_targets=("leader",))
    with pytest.raises(NemesisError, match="partition_targets is empty"):
        NemesisOptions(partition_targets=())
    with pytest.raises(NemesisError, match="quiet_probability"):
        NemesisOptions(quiet_probability=1.0)

    class SpecLike:
        db_targets = ["one"]
        seed = 3

    assert NemesisOptions.from_object(SpecLike()).db_targets == ("one",)
    assert NemesisOptions.from_object(None) == NemesisOptions()


def test_stop_before_any_start_is_harmless(control):
    for package in (KillPackage(control, NemesisOptions()), PausePackage(control, NemesisOptions())):
        stopped = package.invoke(f"stop-{package.name}", None)
        assert stopped == {package.undo_past_tense: []}
        package.heal()
        with pytest.raises(ValueError, match="has no op"):
            package.invoke("start-flood", None)


def test_the_controller_stays_with_the_majority():
    from nemeses.partition import brokers_without_majority
    from nemeses.targets import partition_topology

    one = partition_topology("one", [0, 1, 2], random.Random(1))
    isolated = [b for b in (0, 1, 2) if all((b, o) in one.blocked for o in (0, 1, 2) if o != b)]
    assert brokers_without_majority([0, 1, 2], sorted(one.blocked)) == isolated and len(isolated) == 1
    # 5 brokers split 2/3: the two are cut off, the three are not.
    halves = partition_topology("majority", [0, 1, 2, 3, 4], random.Random(2))
    minority = sorted(min(halves.components, key=len))
    assert brokers_without_majority([0, 1, 2, 3, 4], sorted(halves.blocked)) == minority
    # A ring of majorities leaves everyone a majority: nobody loses the controller.
    ring = partition_topology("majorities-ring", [0, 1, 2, 3, 4], random.Random(3))
    assert brokers_without_majority([0, 1, 2, 3, 4], sorted(ring.blocked)) == []
    assert brokers_without_majority([0], []) == []
