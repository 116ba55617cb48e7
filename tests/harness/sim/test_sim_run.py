"""`logquake test --sim` end to end: a seeded simulated queue run through kill and partition
faults on three brokers is checked valid; the same workload with the unflushed-crash switch
and every broker killed at once loses acknowledged writes, a loss the claims allow (every
in-sync copy crashed at once), the same way on every run (the simulation is deterministic); results.json and the report say the run
was simulated and how fast; what a simulation cannot do is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import EXIT_BAD_ARGUMENTS
from harness.testcmd import main

FAST = ["--sim", "--time-limit", "10", "--final-time-limit", "10", "--quiet-period", "1"]


def _run(tmp_path: Path, *args: str) -> tuple[int, Path]:
    code = main([*FAST, *args, "--results-dir", str(tmp_path)])
    runs = sorted(p for p in tmp_path.glob("*/2*") if p.is_dir())
    assert len(runs) == 1, runs
    return code, runs[0]


def test_a_seeded_simulated_run_through_kills_and_partitions_is_valid(tmp_path: Path) -> None:
    code, run_dir = _run(tmp_path, "--nemesis", "kill,partition", "--nemesis-interval", "1.5", "--seed", "11")
    history = (run_dir / "history.jsonl").read_text()
    assert '"f":"start-kill"' in history and '"f":"start-partition"' in history
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    assert results["simulated"] is True
    speed = results["simulation"]
    assert speed["simulated_s"] > 10 and speed["wall_s"] > 0 and speed["speed"] > 0
    assert results["stats"]["simulation"] == speed
    assert "--sim" in json.loads((run_dir / "spec.json").read_text())["command"]
    assert "simulated" in (run_dir / "report.html").read_text()
    clients = json.loads((run_dir / "simulation.json").read_text())["clients"]
    assert clients["producer"]["acks"] == "all" and clients["producer"]["enable_idempotence"] is True
    assert "transactional_producer" not in clients  # no transactions in this run


def test_losing_unflushed_data_on_a_crash_of_every_broker_is_caught_and_allowed(tmp_path: Path) -> None:
    # min ISR 2: two replicas acknowledge each write, and the kill of all three at once
    # drops every copy's unflushed tail: no in-sync replica stays alive, the loss Kafka
    # documents. The claims count the brokers down at once (3 >= min ISR 2) and allow it.
    code, run_dir = _run(tmp_path, "--nemesis", "kill", "--nemesis-option", "db_targets=all", "--nemesis-interval", "2",
                         "--cluster-config", "min.insync.replicas=2", "--cluster-config", "log.crash.lose.unflushed=true",
                         "--seed", "5")
    results = json.loads((run_dir / "results.json").read_text())
    found = {a["name"]: a for a in results["anomalies"]}
    assert {"lost-write", "inconsistent-offsets"} <= set(found)
    assert code == 0 and results["valid"] is True and all(a["allowed"] for a in found.values())
    durable = next(c for c in results["claims"] if c["name"] == "acked-writes-durable")
    assert "3 brokers down at once from unflushed crashes >= min ISR 2" in durable["reason"]
    assert results["simulated"] is True


@pytest.mark.slow
def test_the_scripted_lone_leader_crash_runs_on_virtual_time_and_loses_only_what_acks_1_allows(tmp_path: Path) -> None:
    # The script (stall both followers 1 s, kill the leader, resume them) runs on the
    # simulation's loop; the session timeout outlasts the stall, so the stalled followers
    # stay in the ISR and one is elected without what the leader acknowledged alone.
    code, run_dir = _run(tmp_path, "--nemesis", "lone-leader-crash", "--nemesis-interval", "3", "--seed", "33",
                         "--workload-option", "key_count=4", "--workload-option", "max_writes_per_key=1000000",
                         "--cluster-config", "min.insync.replicas=1", "--cluster-config", "replica.lag.time.max.ms=30000",
                         "--cluster-config", "broker.session.timeout.ms=3000", "--client-config", "acks=1")
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    crash = [op for op in ops if op["f"] == "start-lone-leader-crash" and not op.get("heal")]
    assert crash and crash[1]["time_ns"] - crash[0]["time_ns"] == 1_000_000_000, "the 1-s stall, on virtual time"
    results = json.loads((run_dir / "results.json").read_text())
    found = {a["name"]: a for a in results["anomalies"]}
    assert "lost-write" in found and found["lost-write"]["allowed"] is True
    assert code == 0 and results["valid"] is True


@pytest.mark.parametrize("args, says", [
    (["--bootstrap-servers", "127.0.0.1:9092"], "external cluster"),
    (["--nemesis", "latency"], "latency cannot run in a simulation: it drives TCP proxies"),
    (["--workload", "delivery"], "no simulated client"),
    (["--client-config", "transaction.timeout.ms=5000"], "only the transactional workloads' producers take it"),
    (["--client-config", "reconnect.backoff.ms=5"], "reconnect.backoff.ms has no equivalent"),
    (["--client-config", "retries=3"], "no retry count"),
])
def test_what_a_simulation_cannot_do_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        args: list[str], says: str) -> None:
    assert main([*FAST, *args, "--seed", "1", "--results-dir", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert says in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
