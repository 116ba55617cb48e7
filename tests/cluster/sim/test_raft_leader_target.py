"""The live target `raft-leader` on a simulated quorum: the leader of the highest Raft epoch,
named as soon as it wins its election, before its LeaderChange is committed and it becomes
the active controller (which `active-controller` waits for: until then it names the cut-off
former leader, or none). As a partition it cuts that node off from every other node; kill and
pause take it as a node; both record which node it was."""

from __future__ import annotations

from cluster.sim.cluster import SimCluster, controller_host
from cluster.sim.link_fault import LinkFault
from nemeses.base import NemesisOptions
from nemeses.sim_control import SimControl, build_sim_packages

OPTIONS = NemesisOptions(node_kinds=("controller",))


def started(seed: int) -> tuple[SimCluster, SimControl]:
    sim = SimCluster(3, controllers=3, seed=seed)
    sim.run_until(lambda: sim.controller is not None, 20_000, what="an active controller")
    control = SimControl(sim, schedule=lambda delay_s, action: sim.scheduler.call_later(delay_s * 1000, action))
    return sim, control


def test_raft_leader_names_a_new_leader_before_it_is_active_and_cuts_it_off() -> None:
    sim, control = started(seed=4)
    (partition,) = build_sim_packages(["partition"], control, OPTIONS)
    first = control.active_controller()
    assert control.raft_leader() == first
    # 100 ms more on every controller link: a LeaderChange takes a fetch round trip (200+ ms)
    # to commit, the window in which the new leader is not yet active.
    for a in control.controller_ids:
        for b in control.controller_ids:
            if a != b:
                sim.network.set_link_fault(controller_host(a), controller_host(b), LinkFault(delay_ms=100.0))
    assert partition.invoke("start-partition", {"topology": "active-controller"})["isolated"] == first
    sim.run_until(lambda: control.raft_leader() not in (None, first), 20_000, step_ms=1, what="a new Raft leader")
    second = control.raft_leader()
    # Elected, its LeaderChange not yet committed: not the active controller (the cut-off
    # first still believes it leads its older epoch, or none is known).
    assert not sim.controller_node(second).is_active
    assert control.active_controller() in (None, first)
    outcome = partition.invoke("start-partition", {"topology": "raft-leader"})
    assert outcome["topology"] == "raft-leader" and outcome["isolated"] == second, outcome
    others = [control.host(n) for n in control.nemesis_nodes(("broker", "controller")) if n != second]
    assert all(sim.network.is_blocked(controller_host(second), h) and sim.network.is_blocked(h, controller_host(second))
               for h in others)
    assert not sim.network.is_blocked(controller_host(first), control.host(0))  # the new cut replaced the old one
    partition.invoke("stop-partition", None)
    sim.run_until(lambda: control.active_controller() is not None and control.raft_leader() == control.active_controller(),
                  30_000, what="one leader, active, after the heal")


def test_kill_and_pause_take_the_raft_leader_as_a_node() -> None:
    sim, control = started(seed=4)
    kill, pause = build_sim_packages(["kill", "pause"], control, OPTIONS)
    leader = control.raft_leader()
    outcome = pause.invoke("start-pause", {"targets": "raft-leader", "nodes": None})
    assert outcome["nodes"] == [leader] and outcome["raft_leader"] == leader, outcome
    assert control.is_paused(leader)
    pause.invoke("stop-pause", None)
    outcome = kill.invoke("start-kill", {"targets": "raft-leader", "nodes": None})
    assert outcome["nodes"] == [leader] and not control.is_alive(leader), outcome
    sim.run_until(lambda: control.raft_leader() not in (None, leader), 20_000, what="another Raft leader")
    kill.invoke("stop-kill", None)
    assert control.is_alive(leader)
