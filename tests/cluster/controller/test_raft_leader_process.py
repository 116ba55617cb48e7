"""The live target `raft-leader` on real controller processes (three, on the Raft quorum): a
real cluster's control has no Raft state to read, so the target resolves through
DescribeQuorum's leader (the same lookup as `active-controller` there: the Raft leader, ready
or not). The kill package takes it as a node, records which it was, and another controller
leads after it; the restarted one rejoins."""

from __future__ import annotations

from cluster.control import ClusterControl
from cluster.launcher import LocalCluster
from nemeses.base import NemesisOptions, build_packages, live_controller
from tests.cluster.kafka_helpers import wait_for


def test_kill_takes_the_raft_leader_of_real_controllers(make_cluster) -> None:
    cluster: LocalCluster = make_cluster(brokers=1, controllers=3)
    control = ClusterControl(cluster)
    leader = wait_for(cluster.active_controller, 30, "a quorum leader")
    assert live_controller(control, "raft-leader") == ([leader], {"raft_leader": leader})
    (kill,) = build_packages(["kill"], control, NemesisOptions(node_kinds=("controller",)))
    outcome = kill.invoke("start-kill", {"targets": "raft-leader", "nodes": None})
    assert outcome["nodes"] == [leader] and outcome["raft_leader"] == leader, outcome
    assert not control.is_alive(leader)
    second = wait_for(lambda: (a := live_controller(control, "raft-leader")[0]) and a[0] != leader and a[0], 30,
                      "another Raft leader")
    assert second in cluster.controller_ids
    kill.invoke("stop-kill", None)
    assert control.is_alive(leader)
