"""Overlapping unflushed crashes, replayed as `logquake test --sim --fault-schedule` (RF 3,
min ISR 2, acks=all, log.crash.lose.unflushed=true, eligible leader replicas on, seed 2).

`kill[0] 0+1.4s; kill[1,2] 1.4+0.1s`: broker 0 is down long enough to leave the ISR; it is
restarted (back from an unclean shutdown, out of every ISR and ELR, still catching up) as
brokers 1 and 2, the whole ISR, are killed together and lose their unflushed tails. Two
brokers down at once from unflushed crashes >= min ISR 2: the loss Kafka documents (no
in-sync replica stayed alive), so the claims allow it and the run is valid with the loss
listed as allowed (seed 2 of the min ISR `--find` hunt found this schedule; before the
claims counted overlapping crashes it was invalid). The same kills one broker at a time
lose nothing (KIP-966 tolerates min ISR - 1 unclean shutdowns): valid, no anomaly. The
loss without overlap, which must stay invalid, is tests/checkers/test_claims_crash_overlap.py."""

from __future__ import annotations

import json
from pathlib import Path

from harness.testcmd import main

SETTINGS = ["broker.session.timeout.ms=1000", "broker.heartbeat.interval.ms=250", "log.crash.lose.unflushed=true",
            "log.flush.interval.ms=80", "log.flush.scheduler.interval.ms=10", "min.insync.replicas=2"]
LOSS = {"lost-write", "unseen", "inconsistent-offsets"}


def _schedule(*kills: tuple[float, float, list[int]]) -> dict:
    """One kill package's ops: each kill's start and its stop (a stop and the next start at
    the same instant: the stop goes first, so the two do not overlap)."""
    ops = []
    for start_s, duration_s, nodes in kills:
        ops.append({"at_s": start_s, "f": "start-kill", "value": {"nodes": nodes, "targets": "nodes"}})
        ops.append({"at_s": round(start_s + duration_s, 3), "f": "stop-kill", "value": None})
    return {"ops": sorted(ops, key=lambda op: (op["at_s"], op["f"] != "stop-kill"))}


def _run(tmp_path: Path, schedule: dict) -> tuple[int, dict]:
    tmp_path.mkdir(parents=True)
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(schedule))
    code = main(["--sim", "--workload", "queue", "--nemesis", "kill", "--time-limit", "3", "--final-time-limit", "2",
                 "--quiet-period", "1", "--rate", "100", "--concurrency", "3", "--brokers", "3", "--seed", "2",
                 "--fault-schedule", str(path), "--results-dir", str(tmp_path),
                 *[arg for setting in SETTINGS for arg in ("--cluster-config", setting)]])
    runs = sorted(p for p in tmp_path.glob("*/2*") if p.is_dir())
    assert len(runs) == 1, runs
    return code, json.loads((runs[0] / "results.json").read_text())


def test_two_brokers_crashing_at_once_at_min_isr_2_lose_what_kafka_documents(tmp_path: Path) -> None:
    code, results = _run(tmp_path / "overlap", _schedule((0.0, 1.4, [0]), (1.4, 0.1, [1, 2])))
    found = {a["name"]: a for a in results["anomalies"]}
    assert set(found) & LOSS, ("the schedule no longer loses (the cluster's timing changed?): "
                               f"anomalies {sorted(found)}")
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    assert all(a["allowed"] for a in results["anomalies"])
    durable = next(c for c in results["claims"] if c["name"] == "acked-writes-durable")
    assert durable["holds"] is False
    assert "2 brokers down at once from unflushed crashes >= min ISR 2 (broker(s) 1, 2 (kill)" in durable["reason"]


def test_the_same_kills_one_broker_at_a_time_lose_nothing(tmp_path: Path) -> None:
    code, results = _run(tmp_path / "one", _schedule((0.0, 1.4, [0]), (1.4, 0.1, [1]), (1.5, 0.1, [2])))
    assert code == 0 and results["valid"] is True and results["anomalies"] == [], results["anomalies"]
    durable = next(c for c in results["claims"] if c["name"] == "acked-writes-durable")
    assert durable["holds"] is True and "at most 1 broker(s) down at once" in durable["reason"]
