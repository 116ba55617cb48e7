"""The `--find` hunt's min ISR schedule with one crash, replayed as `logquake test --sim
--fault-schedule`: every broker stalled (pause[primaries], the partitions' leaders are
spread over all three) for 1 s, just past the 1-s session timeout, and one of them
killed during the stall, losing what it had not flushed (the stall stopped its flusher too).
The controller fences all three in one session check, in broker order, so for each
partition the broker fenced last, 2, is its last ISR member. Without eligible leader
replicas (eligible.leader.replicas.version=0) that ISR [2] stays, broker 2 restarts with
its unflushed tail gone and is elected again, and brokers 0 and 1, which had acknowledged
those records, truncate them away: KIP-966's last replica standing, which the claims allow
for that setting. With them (the default) brokers 1 and 2 were fenced below min ISR into
the ELR, broker 1 leads once unfenced, and nothing is lost: valid with no anomaly. RF 3,
min ISR 2, acks=all, log.crash.lose.unflushed=true, seed 1.

The interleaving is the seed's: if a change to the cluster's timing fences the brokers in
another order, the ELR-off half stops showing the loss and fails, saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.testcmd import main

SCHEDULE = {"ops": [
    {"at_s": 4.0, "f": "start-pause", "value": {"nodes": None, "targets": "primaries"}},
    {"at_s": 4.3, "f": "start-kill", "value": {"nodes": [2], "targets": "nodes"}},
    {"at_s": 5.0, "f": "stop-pause", "value": None},
    {"at_s": 6.1, "f": "stop-kill", "value": None},
]}
# harness/hunt_switches.py FIND_HUNTS["min.insync.replicas"] with min ISR 2 and pauses.
SETTINGS = ["broker.session.timeout.ms=1000", "broker.heartbeat.interval.ms=250", "log.crash.lose.unflushed=true",
            "log.flush.interval.ms=80", "log.flush.scheduler.interval.ms=10", "min.insync.replicas=2"]
LOSS = {"lost-write", "unseen", "inconsistent-offsets"}


def _run(tmp_path: Path, *extra: str) -> dict:
    tmp_path.mkdir(parents=True)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(SCHEDULE))
    main(["--sim", "--workload", "queue", "--nemesis", "pause,kill", "--time-limit", "8", "--final-time-limit", "3",
          "--quiet-period", "1", "--rate", "100", "--concurrency", "3", "--brokers", "3", "--seed", "1",
          "--fault-schedule", str(schedule), "--results-dir", str(tmp_path),
          *[arg for setting in [*SETTINGS, *extra] for arg in ("--cluster-config", setting)]])
    runs = sorted(p for p in tmp_path.glob("*/2*") if p.is_dir())
    assert len(runs) == 1, runs
    return json.loads((runs[0] / "results.json").read_text())


@pytest.mark.soak  # two simulated runs with their checks: ~60 s at load 13; the SimCluster form runs in CI
def test_one_crash_of_the_last_isr_member_loses_only_without_eligible_leader_replicas(tmp_path: Path) -> None:
    verdict = _run(tmp_path / "elr")
    assert verdict["valid"] is True and verdict["anomalies"] == [], json.dumps(verdict, indent=1)[:4000]

    verdict = _run(tmp_path / "no-elr", "eligible.leader.replicas.version=0")
    names = {a["name"] for a in verdict["anomalies"]}
    assert names & LOSS, ("the schedule no longer ends with broker 2 as the last ISR member (the cluster's timing "
                          f"changed?): anomalies {sorted(names)}")
    assert verdict["valid"] is True and all(a["allowed"] for a in verdict["anomalies"]), json.dumps(verdict, indent=1)[:4000]
    durable = next(c for c in verdict["claims"] if c["name"] == "acked-writes-durable")
    assert not durable["holds"] and "KIP-966" in durable["reason"], durable
