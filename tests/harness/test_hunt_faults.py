"""Link and disk faults in hunted schedules: a schedule drawn from logquake.strategies with each
new kind (link-delay, -loss, -duplicate, -reorder on chosen links; the disk faults) runs as a
simulated run, performs exactly its ops (the packages take every value it gives them), and a
second run of the same schedule and seed gives the same history byte for byte; the schedule
file (`--fault-schedule`) reads back to the same ops. `logquake hunt` draws them with
--nemesis (soak: three checked runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import Phase, find, settings

from harness.cli import main
from logquake.strategies import Fault, fault_schedules, ops, schedule_json

SHAPE = ["--time-limit", "2", "--final-time-limit", "2", "--quiet-period", "0.5", "--rate", "30", "--concurrency", "2"]


def _from_client(f: Fault) -> bool:
    return any(a == "client" and isinstance(b, int) for a, b in f.targets)


# One drawn schedule per kind: the first the strategy gives (derandomized, not shrunk) with a
# fault that acts on the run (starts in the main phase and lasts, on links the workload uses,
# with a setting large enough to matter).
WANTED = {
    "link-delay": lambda f: _from_client(f) and dict(f.params)["delay_ms"] >= 50,
    "link-loss": lambda f: _from_client(f) and dict(f.params)["loss"] >= 0.3,
    "link-duplicate": lambda f: _from_client(f) and dict(f.params)["duplicate"] >= 0.5,
    "link-reorder": lambda f: any(isinstance(a, int) and isinstance(b, int) for a, b in f.targets)
    and dict(f.params)["reorder"] >= 0.5 and dict(f.params)["delay_ms"] >= 20,
    # Disk faults on explicit brokers, not all of them: every broker halted on a failed disk
    # makes a slow run of clients retrying dead brokers and shows nothing more.
    "disk fsync-eio": lambda f: f.variant == "fsync-eio" and f.targets in ((0,), (1,), (2,)),
    "disk slow-fsync": lambda f: f.variant == "slow-fsync" and not isinstance(f.targets, str) and len(f.targets) >= 2,
    "disk torn-crash": lambda f: f.variant == "torn-crash",
}


def drawn(case: str) -> tuple[Fault, ...]:
    kind = case.split()[0]
    return find(fault_schedules(3, 2, (kind,), max_faults=1),
                lambda s: any(WANTED[case](f) and f.start_s >= 0.5 and f.duration_s >= 1 for f in s),
                settings=settings(database=None, derandomize=True, max_examples=5000, phases=[Phase.generate]))


def simulate(schedule: tuple[Fault, ...], kind: str, root: Path) -> Path:
    from harness.cli import ArgumentParser
    from harness.run import open_run
    from harness.sim.run import FaultOp, execute_sim
    from harness.testcmd import build_spec, register

    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    spec = build_spec(parser.parse_args(["test", "--sim", "--nemesis", kind, *SHAPE, "--seed", "11"]), 11)
    run = open_run(spec, root)
    try:
        execute_sim(run, [FaultOp.from_json(op) for op in ops(schedule, 3, 2)], check_history=False)
    finally:
        run.close()
    return run.run_dir


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(WANTED))
def test_a_drawn_schedule_of_each_kind_runs_simulated_and_replays_exactly(case: str, tmp_path: Path) -> None:
    from harness.hunt_schedule import read_schedule
    from harness.sim.run import FaultOp

    kind = case.split()[0]
    schedule = drawn(case)
    path = tmp_path / "schedule.json"
    path.write_text(schedule_json(schedule, 3, 2))
    assert read_schedule(path)[0] == [FaultOp.from_json(op) for op in ops(schedule, 3, 2)]

    first = simulate(schedule, kind, tmp_path / "a")
    history = [json.loads(line) for line in (first / "history.jsonl").read_text().splitlines()]
    nemesis = [op for op in history if op["process"] == "nemesis" and not op.get("heal")]
    # Each op is recorded invoked then completed: the invocations are the schedule's ops, in order.
    assert [(op["f"], op["value"]) for op in nemesis[::2]] == [(op["f"], op["value"]) for op in ops(schedule, 3, 2)]
    for done in nemesis[1::2]:
        assert done["type"] == "info" and not (isinstance(done["value"], dict) and done["value"].get("errors")), done
    starts = [op["value"] for op in nemesis[1::2] if op["f"] == f"start-{kind}"]
    assert starts, nemesis
    if kind == "disk":
        # The disk package faulted (or power-cut) the brokers the schedule named.
        assert all(s["faulted"] and not any(f.get("not_running") for f in s["faulted"]) for s in starts), starts
    ok = [op for op in history if op["process"] != "nemesis" and op["type"] == "ok"]
    assert len(ok) > 20  # the workload ran through the fault

    second = simulate(schedule, kind, tmp_path / "b")
    assert (second / "history.jsonl").read_bytes() == (first / "history.jsonl").read_bytes()


@pytest.mark.soak  # a Spark session and three checked runs: ~20 s at load 14, CI has the parts above
def test_hunt_draws_link_and_disk_faults_and_the_safe_cluster_survives_them(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hunt", "--nemesis", "link-loss,link-reorder,disk", *SHAPE, "--seed", "3", "--max-examples", "3",
                 "--max-faults", "2", "--budget", "400", "--no-database", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    examples = [line for line in out.splitlines() if line.startswith("logquake hunt: #")]
    # Valid, or unknown when a fault left no broker up long enough to judge (every disk failed).
    assert len(examples) == 3 and not any("INVALID" in line for line in examples), examples
    assert any("link-" in line or "disk[" in line for line in examples), examples
