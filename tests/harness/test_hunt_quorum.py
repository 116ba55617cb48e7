"""Hunts over a metadata quorum's controllers (`--controllers 3`, `--nemesis-option
node_kinds=controller`) and the quorum's unsafe switches.

CI: a schedule of controller faults written as a `--fault-schedule` file (two partitions: two
controllers with no broker, so the one left with the brokers misses the fences the other two
commit; then the active controller cut off) replays as a simulated run whose quorum checks flag
`controller.quorum.vote.skip.log.check` (committed metadata lost: the stale controller is
elected) and find nothing on the safe cluster, through the files and checks a hunt uses (the
simulated runs without Spark, a few seconds each).

Soak: the SWITCH_HUNTS entry of the vote switch, hunted (found, shrunk, replayed invalid) and
the same search on the safe cluster finding nothing. The hunts take minutes at a shared
machine's load (bench/bench_hunt.py measures them), so they are not CI. The Figure 8 switch
(`controller.quorum.commit.previous.epoch.by.count`) has no such test: no hunt found it
(harness/hunt_switches.py's UNFOUND_HUNTS says what was tried)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.hunt_switches import SWITCH_HUNTS, without_switch
from logquake.strategies import Fault, schedule_json

VOTE = "controller.quorum.vote.skip.log.check"
SHAPE = ["--controllers", "3", "--nemesis-option", "node_kinds=controller", "--nemesis", "partition",
         "--time-limit", "5", "--final-time-limit", "4", "--quiet-period", "1", "--rate", "50", "--concurrency", "3",
         "--cluster-config", "controller.quorum.fetch.timeout.ms=1000",
         "--cluster-config", "controller.quorum.election.timeout.ms=500"]
# Controllers 1000 and 1001 cut off together with no broker: whichever of them leads fences
# every broker, committed by the two; 1002 is with the brokers and misses it. Then the active
# controller is cut off from everyone: 1002 and the other one of the pair elect a leader.
SCHEDULE = (Fault("partition", (1000, 1001), 0.5, 2.0), Fault("partition", "active-controller", 2.5, 5.0))


def simulate(schedule_file: Path, unsafe: bool, root: Path, seed: int = 1) -> Path:
    from harness.cli import ArgumentParser
    from harness.hunt_schedule import check_targets, read_schedule
    from harness.run import open_run
    from harness.sim.run import execute_sim
    from harness.testcmd import build_spec, register

    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    argv = ["test", "--sim", *SHAPE, "--seed", str(seed), "--cluster-config", f"{VOTE}={str(unsafe).lower()}"]
    spec = build_spec(parser.parse_args(argv), seed)
    fault_ops, _ = read_schedule(schedule_file)
    check_targets(fault_ops, spec.brokers, spec.controllers, schedule_file)
    run = open_run(spec, root)
    try:
        execute_sim(run, fault_ops, check_history=False)
    finally:
        run.close()
    return run.run_dir


def test_a_schedule_of_controller_faults_replays_and_flags_votes_without_the_log_check(tmp_path: Path) -> None:
    from checkers.quorum import add_quorum_verdict
    from checkers.result import CheckResult

    path = tmp_path / "fault-schedule.json"
    path.write_text(schedule_json(SCHEDULE, 3, 5, controllers=3), encoding="utf-8")
    ops = json.loads(path.read_text())["ops"]
    assert ops[0]["value"]["components"] == [[1000, 1001], [0, 1, 2, 1002]]
    assert ops[2]["value"] == {"topology": "active-controller"}
    verdicts = {}
    for unsafe in (True, False):
        run_dir = simulate(path, unsafe, tmp_path / str(unsafe))
        history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
        isolated = [op["value"].get("isolated") for op in history if op["f"] == "start-partition" and op["type"] == "info"
                    and isinstance(op["value"], dict) and op["value"].get("topology") == "active-controller"]
        assert isolated and isolated[-1] in (1000, 1001)  # the pair's leader, resolved when the fault started
        verdicts[unsafe] = add_quorum_verdict(CheckResult(valid=True), run_dir)
    assert verdicts[True].valid is False
    assert {"metadata-committed-lost", "metadata-committed-disagree"} <= {a.name for a in verdicts[True].anomalies}
    assert verdicts[False].valid is True and not verdicts[False].anomalies
    assert verdicts[False].stats["metadata_quorum"]["violations"] == 0


@pytest.mark.soak
def test_the_vote_switch_is_found_by_a_hunt_and_the_safe_cluster_survives_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Seed 4 finds it with run 56 (bench_hunt, 2026-11-27; seeds 1, 3, 5 did not within 27-70 runs),
    # given a budget that reaches run 56 (the default --max-examples: it shapes what is drawn).
    argv = [*SWITCH_HUNTS[VOTE], "--seed", "4", "--budget", "1200", "--max-shrinks", "10", "--no-database"]
    assert main(["hunt", *argv, "--results-dir", str(tmp_path / "unsafe")]) == 1, capsys.readouterr().out
    (hunt_json,) = (tmp_path / "unsafe").glob("hunt/*/hunt.json")
    info = json.loads(hunt_json.read_text())
    results = json.loads((Path(info["run_dir"]) / "results.json").read_text())
    assert results["valid"] is False and any(a["name"].startswith("metadata-committed") for a in results["anomalies"])
    safe = [*without_switch(SWITCH_HUNTS[VOTE]), "--seed", "4", "--budget", "1200", "--max-examples", str(info["examples"]),
            "--no-database"]
    assert main(["hunt", *safe, "--results-dir", str(tmp_path / "safe")]) == 0, capsys.readouterr().out
