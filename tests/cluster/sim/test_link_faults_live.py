"""Live link targets of the link-fault packages (client>primary, client>primaries and the
answers' way), resolved when the fault starts from the leaders a simulated run's SimControl
reads: the links taken and the leaders seen are in the completion, the stop clears them; a
cluster that gives no leaders, an unknown target and a real cluster are refused naming what
is wrong."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.control import ClusterControl
from cluster.sim.cluster import CLIENT_HOST, SimCluster, broker_host
from cluster.sim.link_fault import LinkFault
from nemeses.base import NemesisError, build_packages
from nemeses.link_faults import LinkFaultOptions, LinkFaultPackage
from nemeses.sim_control import SimControl, build_sim_packages
from nemeses.targets import busiest_leader, live_links
from tests.cluster.sim.sim_requests import create_topic


def test_live_links_name_the_busiest_leader_or_every_leader() -> None:
    led = [1, 2, 0, 1, 0, 1]
    assert busiest_leader(led) == 1 and busiest_leader([2, 0]) == 0 and busiest_leader([]) is None
    assert live_links("client>primary", led) == [("client", 1)]
    assert live_links("client>primaries", led) == [("client", 0), ("client", 1), ("client", 2)]
    assert live_links("primary>client", led) == [(1, "client")]
    assert live_links("primaries>client", [2, 2]) == [(2, "client")]
    assert live_links("client>primary", []) == []
    with pytest.raises(ValueError, match="unknown live link target 'client>all'; known: client>primary"):
        live_links("client>all", led)


def _control_with_a_topic() -> tuple[SimCluster, SimControl]:
    sim = SimCluster(3, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 30_000, what="brokers ready")
    assert create_topic(sim, 0, "t0", 5, 3).error_code == ErrorCode.none
    control = SimControl(sim, schedule=lambda delay_s, action: None)
    sim.run_until(lambda: len(control.leaders(["t0"])) == 5, 30_000, what="t0's leaders")
    return sim, control


def test_a_live_target_takes_the_links_of_the_leaders_when_it_starts() -> None:
    sim, control = _control_with_a_topic()
    (loss,) = build_sim_packages(["link-loss"], control)
    led = [leader for _, leader in sorted(control.leaders(["t0"]).items())]
    primary = busiest_leader(led)
    done = loss.invoke("start-link-loss", {"target": "client>primary", "fault": {"loss": 0.5}})
    assert done["links"] == [["client", primary]] and sorted(done["leaders"]) == [f"t0-{p}" for p in range(5)]
    for broker in sim.broker_ids:
        assert sim.network.link_fault(CLIENT_HOST, broker_host(broker)) == (LinkFault(loss=0.5) if broker == primary
                                                                            else LinkFault())
        assert sim.network.link_fault(broker_host(broker), CLIENT_HOST) == LinkFault()
    # A new start replaces it; the answers' way from every leader.
    done = loss.invoke("start-link-loss", {"target": "primaries>client", "fault": {"loss": 1.0}})
    assert done["links"] == [[leader, "client"] for leader in sorted(set(led))]
    assert sim.network.link_fault(CLIENT_HOST, broker_host(primary)) == LinkFault()
    assert all(sim.network.link_fault(broker_host(b), CLIENT_HOST) == LinkFault(loss=1.0) for b in set(led))
    assert loss.invoke("stop-link-loss", None) == {"cleared": True}
    assert all(sim.network.link_fault(broker_host(b), CLIENT_HOST) == LinkFault() for b in sim.broker_ids)


def test_a_live_target_needs_leaders_and_a_known_name() -> None:
    bare = LinkFaultPackage("link-delay", SimCluster(3, seed=1))
    with pytest.raises(ValueError, match="live target 'client>primary' needs the cluster's leaders, which SimCluster does "
                                         "not give"):
        bare.invoke("start-link-delay", {"target": "client>primary", "fault": {"delay_ms": 5.0}})
    with pytest.raises(ValueError, match="needs a value with a target .*client>primaries"):
        bare.invoke("start-link-delay", {"target": "client>leaders", "fault": {"delay_ms": 5.0}})
    # Options may list them (the seeded schedule then draws the live target as an op).
    assert LinkFaultOptions(targets=("client>primary",)).targets == ("client>primary",)
    with pytest.raises(NemesisError, match="unknown link fault target 'client>leaders'; known: .*client>primary"):
        LinkFaultOptions(targets=("client>leaders",))


def test_a_real_cluster_refuses_them_naming_sim() -> None:
    control = ClusterControl.__new__(ClusterControl)  # the real control's interface, no cluster behind it
    with pytest.raises(NemesisError, match=r"the link-loss nemesis runs only in the simulation \(logquake test --sim\)"):
        build_packages(["link-loss"], control)
