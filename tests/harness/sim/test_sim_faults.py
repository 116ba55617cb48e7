"""The real fault packages over a simulated cluster (nemeses/sim_control.py): kill with and
without losing unflushed data, pause, every partition topology, clock bumps and strobes, and
a fault schedule given as data landing at its exact simulated times."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from cluster.sim.cluster import CONTROLLER_HOST, SimCluster, broker_host
from harness.cli import ArgumentParser
from harness.run import open_run
from harness.sim.run import FaultOp, execute_sim
from harness.testcmd import build_spec, register
from nemeses.base import NemesisError
from nemeses.sim_control import SimControl, build_sim_packages
from nemeses.targets import PARTITION_TOPOLOGIES, LIVE_SPECS, partition_topology
from tests.cluster.sim.sim_requests import create_topic


def _ready(properties: dict[str, str] | None = None) -> tuple[SimCluster, SimControl, list]:
    sim = SimCluster(3, properties, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 30_000, what="brokers ready")
    timers: list = []
    control = SimControl(sim, schedule=lambda delay_s, action: timers.append((delay_s, action)))
    return sim, control, timers


def _blocked(sim: SimCluster) -> set[tuple[str, str]]:
    hosts = [broker_host(b) for b in sim.broker_ids] + [CONTROLLER_HOST, "127.0.0.1"]
    return {(a, b) for a in hosts for b in hosts if a != b and sim.network.is_blocked(a, b)}


@pytest.mark.parametrize("lose", [False, True])
def test_kill_loses_unflushed_data_exactly_when_the_brokers_run_in_that_mode(lose: bool) -> None:
    sim, control, _ = _ready({"log.crash.lose.unflushed": str(lose).lower()})
    (kill,) = build_sim_packages(["kill"], control)
    slot_disk = sim._slots[1].disk
    slot_disk.makedirs("/probe")
    slot_disk.open_append("/probe/file").write(b"unflushed")
    done = kill.invoke("start-kill", {"targets": "one", "nodes": [1]})
    assert done["killed"] == [{"node": 1, "pid": None}] and not sim.is_running(1)
    if lose:
        assert slot_disk.unflushed_bytes() == 0, "power loss: nothing unflushed survives"
    else:
        assert slot_disk.unflushed_bytes() >= len(b"unflushed"), "SIGKILL: the page cache survives"
    assert kill.invoke("stop-kill", None) == {"started": [{"node": 1, "pid": None}]} and sim.is_running(1)


def test_pause_holds_a_broker_until_resumed() -> None:
    sim, control, _ = _ready()
    (pause,) = build_sim_packages(["pause"], control)
    pause.invoke("start-pause", {"targets": "minority", "nodes": [0]})
    assert sim.network.is_paused(broker_host(0)) and control.is_paused(0)
    pause.invoke("stop-pause", None)
    assert not sim.network.is_paused(broker_host(0))


@pytest.mark.parametrize("topology", PARTITION_TOPOLOGIES)
def test_every_partition_topology_cuts_the_links_it_names_and_no_client_link(topology: str) -> None:
    sim, control, _ = _ready()
    if topology in LIVE_SPECS:  # these cut by who leads: a topic with a partition led from each broker
        assert create_topic(sim, 0, "t0", 6, 3).error_code == ErrorCode.none
        sim.run_until(lambda: len(set(control.leaders(["t0"]).values())) == 3, 30_000, step_ms=50, what="leaders on every broker")
    (partition,) = build_sim_packages(["partition"], control)
    value = {"topology": topology} if topology in LIVE_SPECS else \
        partition_topology(topology, control.broker_ids, random.Random(3)).as_value()
    done = partition.invoke("start-partition", value)
    cut = _blocked(sim)
    expected = {(broker_host(s), broker_host(d)) for s, d in done.get("blocked", []) + done.get("blocked_data", [])}
    for broker in done.get("cut-from-controller", []):
        expected |= {(broker_host(broker), CONTROLLER_HOST), (CONTROLLER_HOST, broker_host(broker))}
    assert cut == expected
    assert not any("127.0.0.1" in pair for pair in cut), "clients keep reaching every broker"
    if topology not in ("one-way",) and not done.get("note"):
        assert cut, f"{topology} cut nothing: {done}"
    partition.invoke("stop-partition", None)
    assert not _blocked(sim)


def test_clock_bumps_and_strobes_move_the_brokers_wall_clocks_only() -> None:
    sim, control, timers = _ready()
    (clock,) = build_sim_packages(["clock"], control)
    before = sim.broker(2).clock.wall_ms()
    done = clock.invoke("start-clock", {"kind": "bump", "targets": "one", "nodes": [2], "delta_ms": 90_000})
    assert done["offsets"] == {"2": "+90"} and sim.broker(2).clock.wall_ms() - before == 90_000
    assert sim.broker(2).clock.monotonic_ns() == sim.broker(0).clock.monotonic_ns()
    clock.invoke("start-clock", {"kind": "strobe", "targets": "one", "nodes": [0], "delta_ms": 5000,
                                 "period_ms": 100, "duration_ms": 300})
    offsets = []
    while timers:  # the strobe's flips, on the simulation's timeline
        _, flip = timers.pop(0)
        flip()
        offsets.append(control.clock_offset(0))
    assert offsets == [5.0, 0.0, 0.0]  # shifted, back, and back to its base at the end
    assert clock.invoke("stop-clock", None)["reset"] == {"0": "+0", "1": "+0", "2": "+0"}
    assert control.clock_offset(2) == 0.0


def test_faults_without_a_simulated_form_are_refused_with_the_reason() -> None:
    _, control, _ = _ready()
    with pytest.raises(NemesisError, match="flaky cannot run in a simulation: it drives TCP proxies"):
        build_sim_packages(["kill", "flaky"], control)


def test_a_fault_schedule_given_as_data_lands_at_its_simulated_times(tmp_path: Path) -> None:
    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", "--sim", "--nemesis", "kill,partition", "--time-limit", "4", "--quiet-period", "0",
                              "--final-time-limit", "5", "--seed", "3"])
    run = open_run(build_spec(args, 3), tmp_path)
    ops = [FaultOp.from_json(o) for o in (
        {"at_s": 1.5, "f": "start-partition", "value": {"topology": "one", "components": [[0], [1, 2]],
                                                        "blocked": [[0, 1], [0, 2], [1, 0], [2, 0]]}},
        {"at_s": 1.0, "f": "start-kill", "value": {"targets": "one", "nodes": [2]}},
        {"at_s": 2.5, "f": "stop-partition"},
        {"at_s": 3.0, "f": "stop-kill"},
    )]
    try:
        execute_sim(run, ops, check_history=False)
    finally:
        run.close()
    lines = [json.loads(line) for line in (run.run_dir / "history.jsonl").read_text().splitlines()]
    first_client = min(op["time_ns"] for op in lines if op["process"] != "nemesis")
    nemesis = [op for op in lines if op["process"] == "nemesis" and not op.get("heal")]
    assert [op["f"] for op in nemesis[::2]] == ["start-kill", "start-partition", "stop-partition", "stop-kill"]
    starts = [op["time_ns"] for op in nemesis[::2]]
    main_ns = starts[0] - 1_000_000_000  # the main phase began 1 s before the first op
    assert [t - main_ns for t in starts] == [1_000_000_000, 1_500_000_000, 2_500_000_000, 3_000_000_000]
    assert main_ns <= first_client
    assert nemesis[1]["value"]["killed"] == [{"node": 2, "pid": None}]
    with pytest.raises(ValueError, match="at_s"):
        FaultOp.from_json({"f": "start-kill"})
