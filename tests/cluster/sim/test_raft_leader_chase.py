"""The chasing partition `raft-leaders` on a simulated quorum: it cuts off the Raft leader when
it starts, then the winner of every later election (each cut replacing the last), the first
`after_ms` after it won and the later ones `then_ms` after, each recorded as a start-partition
of its own; a stop ends the chase. Raft's Figure 8 on it: tests/harness/test_hunt_quorum.py."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.sim.cluster import SimCluster, controller_host
from cluster.sim.link_fault import LinkFault
from nemeses.base import NemesisOptions
from nemeses.sim_control import SimControl, build_sim_packages

OPTIONS = NemesisOptions(node_kinds=("controller",))


def started(seed: int) -> tuple[SimCluster, SimControl, list[tuple[float, dict, Any]]]:
    sim = SimCluster(3, controllers=3, seed=seed)
    sim.run_until(lambda: sim.controller is not None, 20_000, what="an active controller")
    control = SimControl(sim, schedule=lambda delay_s, action: sim.scheduler.call_later(delay_s * 1000, action))
    recorded: list[tuple[float, dict, Any]] = []

    def record(f: str, value: dict, action: Any, *, extra: dict | None = None) -> Any:
        assert f == "start-partition" and extra == {"nemesis": "partition", "chased": True}, (f, extra)
        done = action()
        recorded.append((sim.clock.monotonic_ns() / 1e9, value, done))
        return done

    control.record_nemesis = record
    return sim, control, recorded


def cut_off(sim: SimCluster, control: SimControl, node: int) -> bool:
    others = [control.host(n) for n in control.nemesis_nodes(("broker", "controller")) if n != node]
    return all(sim.network.is_blocked(controller_host(node), h) and sim.network.is_blocked(h, controller_host(node))
               for h in others)


def test_the_chase_cuts_the_leader_then_each_new_winner_after_its_delay_until_stopped() -> None:
    sim, control, recorded = started(seed=4)
    (partition,) = build_sim_packages(["partition"], control, OPTIONS)
    first = control.raft_leader()
    outcome = partition.invoke("start-partition", {"topology": "raft-leaders", "after_ms": 300.0, "then_ms": 700.0})
    assert outcome["topology"] == "raft-leaders" and outcome["isolated"] == first, outcome
    assert cut_off(sim, control, first)
    # The other two elect a leader; it is cut off 300 ms after it won, and the cut of the
    # first is lifted then (each cut replaces the last).
    sim.run_until(lambda: len(recorded) == 1, 20_000, step_ms=1, what="the first chased cut")
    at_s, value, done = recorded[0]
    second = value["elected"]
    assert second != first and done["isolated"] == second and value["chased"] is True
    assert at_s == pytest.approx(value["elected_at_s"] + 0.3, abs=1e-6)
    assert cut_off(sim, control, second) and not sim.network.is_blocked(controller_host(first), control.host(0))
    # The next winner, 700 ms after it won.
    sim.run_until(lambda: len(recorded) == 2, 20_000, step_ms=1, what="the second chased cut")
    at_s, value, done = recorded[1]
    assert value["elected"] != second and value["epoch"] > recorded[0][1]["epoch"]
    assert at_s == pytest.approx(value["elected_at_s"] + 0.7, abs=1e-6)
    assert cut_off(sim, control, value["elected"])
    # Stopped: every link heals and no later election is chased.
    partition.invoke("stop-partition", None)
    assert not any(sim.network.is_blocked(controller_host(c), control.host(0)) for c in control.controller_ids)
    assert not sim.controller_observers
    sim.run_for(5_000)
    assert len(recorded) == 2


def test_a_newer_winner_inside_the_delay_is_cut_instead_and_a_new_start_ends_the_chase() -> None:
    sim, control, recorded = started(seed=4)
    (partition,) = build_sim_packages(["partition"], control, OPTIONS)
    # A 100-ms delay on every controller link: a new leader's LeaderChange takes 200+ ms to
    # commit. A 5-s delay after the first election: long enough for no cut before the next.
    for a in control.controller_ids:
        for b in control.controller_ids:
            if a != b:
                sim.network.set_link_fault(controller_host(a), controller_host(b), LinkFault(delay_ms=100.0))
    first = partition.invoke("start-partition", {"topology": "raft-leaders", "after_ms": 5000.0, "then_ms": 0.0})["isolated"]
    sim.run_until(lambda: control.raft_leader() not in (None, first), 20_000, step_ms=1, what="a new Raft leader")
    winner = control.raft_leader()
    # Before its cut, the first comes back (its cut lifted by hand) and the winner dies: the
    # other two elect a newer leader, cut at once (then_ms 0); the winner's cut never comes.
    sim.heal()
    sim.kill_controller(winner)
    sim.run_until(lambda: len(recorded) == 1, 20_000, step_ms=1, what="the chased cut of the newer winner")
    at_s, value, done = recorded[0]
    assert value["elected"] != winner and done["isolated"] == value["elected"] and at_s == pytest.approx(value["elected_at_s"])
    sim.run_for(6_000)
    assert len(recorded) == 1
    # Any other partition ends the chase.
    partition.invoke("start-partition", {"topology": "active-controller"})
    assert not sim.controller_observers
