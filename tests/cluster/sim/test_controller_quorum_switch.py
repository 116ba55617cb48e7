"""The vote-without-log-check switch (controller.quorum.vote.skip.log.check) on three simulated
controllers: a controller that missed five acknowledged CreateTopics is elected once the
leader dies, and the topics vanish from the metadata; the checks over the controllers' logs
and journals flag it, and folded into results.json the run is invalid with metadata-*
anomalies. The safe default survives the very same seeded schedule."""

from __future__ import annotations

import logging
from pathlib import Path

from kio.schema.errors import ErrorCode

from checkers.quorum import add_quorum_verdict
from checkers.result import CheckResult
from cluster.sim.cluster import CONTROLLER_ID, SimCluster
from cluster.sim.link_fault import LinkFault
from harness.quorum_report import write_quorum_report
from tests.cluster.sim.sim_requests import create_topic

SEED = 2
TOPICS = [f"t{i}" for i in range(5)]


def stale_controller_elected(unsafe: bool) -> tuple[SimCluster, list[str]]:
    # Controller 1000 stands first and leads; 1001 (the survivor) retries its elections
    # quickly, each round shorter than its messages' way to 1002; 1002 (lagging) keeps
    # KRaft's default timeouts (the quorum's own scenario, tests/cluster/quorum/).
    fast = {"controller.quorum.election.timeout.ms": "50", "controller.quorum.election.backoff.max.ms": "100"}
    sim = SimCluster(3, controllers=3, seed=SEED, properties={"controller.quorum.vote.skip.log.check": str(unsafe).lower()},
                     controller_properties={CONTROLLER_ID: {"controller.quorum.election.timeout.ms": "10"}, CONTROLLER_ID + 1: fast})
    sim.run_until(lambda: sim.controller is not None and all(b.controller_client.registered and not b.controller_client.fenced
                                                             for b in sim.running_brokers()), 20_000, what="ready")
    old, survivor, lagging = CONTROLLER_ID, CONTROLLER_ID + 1, CONTROLLER_ID + 2
    assert sim.controller is not None and sim.controller.config.node_id == old
    sim.isolate([[lagging], [old, survivor, *sim.broker_ids, "client"]])
    created = [name for name in TOPICS if create_topic(sim, 0, name, 1, 3).error_code == ErrorCode.none]
    assert created == TOPICS  # acknowledged: committed on the leader and the survivor
    sim.run_for(200)
    sim.kill_controller(old)
    sim.heal()
    # The survivor's messages reach the lagging controller 500 ms late: only the lagging one
    # can collect a majority, and only if the survivor grants its vote without the log check.
    sim.set_link_fault(survivor, lagging, LinkFault(delay_ms=500))
    sim.run_for(5_000)
    sim.clear_link_faults()
    sim.run_for(5_000)
    return sim, created


def test_votes_without_the_log_check_lose_acknowledged_topics_and_the_checks_flag_it(tmp_path: Path) -> None:
    sim, created = stale_controller_elected(unsafe=True)
    active = sim.controller
    assert active is not None and active.config.node_id == CONTROLLER_ID + 2  # the stale one leads
    assert [t for t in created if active.image.topic(t) is None] == created  # acknowledged, then gone
    report = sim.quorum_report()
    assert {"committed-lost", "committed-disagree"} <= {v["kind"] for v in report["violations"]}
    write_quorum_report(tmp_path, report, logging.getLogger("test"))
    result = add_quorum_verdict(CheckResult(valid=True), tmp_path)
    assert result.valid is False
    assert {"metadata-committed-lost", "metadata-committed-disagree"} <= {a.name for a in result.anomalies if not a.allowed}


def test_the_log_check_keeps_the_same_schedule_safe() -> None:
    sim, created = stale_controller_elected(unsafe=False)
    active = sim.controller
    assert active is not None and active.config.node_id == CONTROLLER_ID + 1
    assert all(active.image.topic(t) is not None for t in created)
    report = sim.quorum_report()
    assert report["valid"], report["violations"]
