"""A simulated run whose simulation raises out of its event loop: the run heals and records
the heal before its history is closed, and a hunt that meets such a run stops with a harness
error naming the schedule and the error, and keeps the run and its schedule for a replay.

The trigger is real: under `controller.quorum.vote.skip.log.check` with seed 2, the schedule
below (the one seed 2's vote hunt met, QHUNT's report) has a controller replay a committed
PartitionRecord of a topic its diverged log never created, and the ValueError of its metadata
image escapes the simulation's event loop at 4.7 simulated s (about 2 s of wall time). Before
the fix the phases' coroutine was left pending, closed by the garbage collector after the
history was closed, and its heal raised HistoryWriteError there (unraisable); the hunt took
the ValueError for a failing example and ended in Hypothesis's FlakyFailure. Should the
controller stop raising there (a fatal fault that crashes the simulated node, say), the
`pytest.raises` below fails and the tests need another trigger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.hunt_switches import SWITCH_HUNTS
from logquake.strategies import Fault

VOTE = "controller.quorum.vote.skip.log.check"
SEED = 2
SCHEDULE = (Fault("partition", (1001, 1002), 0.0, 2.9), Fault("partition", "active-controller", 2.5, 3.7),
            Fault("kill", (1001, 1002), 0.0, 0.3))


def _hunt_args(results: Path) -> Any:
    """The vote hunt's arguments, parsed as `logquake hunt` parses them."""
    from harness.cli import ArgumentParser
    from harness.hunt import register

    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    return parser.parse_args(["hunt", *SWITCH_HUNTS[VOTE], "--seed", str(SEED), "--no-database",
                              "--results-dir", str(results)])


def _spec(results: Path) -> Any:
    from harness.testcmd import build_spec

    return build_spec(_hunt_args(results), SEED)


def test_a_simulation_that_raises_heals_before_the_history_closes(tmp_path: Path) -> None:
    from harness.history import read_history
    from harness.run import open_run
    from harness.sim.run import FaultOp, execute_sim
    from logquake.strategies import ops

    spec = _spec(tmp_path)
    run = open_run(spec, tmp_path)
    try:
        with pytest.raises(ValueError, match="partition of unknown topic"):
            execute_sim(run, [FaultOp.from_json(o) for o in ops(SCHEDULE, spec.brokers, spec.time_limit_s,
                                                                     spec.controllers)], check_history=False)
    finally:
        run.close()
    history = read_history(run.run_dir / "history.jsonl", allow_torn_tail=False)
    heals = [op for op in history if op.extra.get("heal")]
    # Both packages' stops, each an invocation and its completion, at the end of the history.
    assert [op.f for op in heals] == ["stop-partition", "stop-partition", "stop-kill", "stop-kill"]
    assert history[-len(heals):] == heals
    log = (run.run_dir / "harness.log").read_text(encoding="utf-8")
    assert "the simulation raised ValueError out of its event loop in the main phase" in log


def test_a_hunt_stops_at_a_run_that_raises_and_keeps_its_schedule(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from hypothesis import strategies as st

    from harness.hunt import Hunt, HuntAborted, report_crash, search
    from harness.hunt_schedule import SCHEDULE_FILE, read_schedule
    from harness.sim.run import FaultOp
    from logquake.strategies import ops

    args = _hunt_args(tmp_path / "results")
    spec = _spec(tmp_path / "results")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    hunt = Hunt(spec, scratch, deadline_s=float("inf"), max_shrinks=10)
    with pytest.raises(HuntAborted) as aborted:
        search(hunt, st.just(SCHEDULE), SEED, None, b"test-sim-crash", max_examples=5)
    crash = aborted.value
    # Ended at once: neither shrunk nor replayed (its replay past the budget made it flaky).
    assert hunt.tally.examples == 1
    assert crash.schedule == SCHEDULE
    assert crash.error.startswith("ValueError: metadata record at offset")

    assert report_crash(args, spec, SEED, ["partition", "kill"], crash, hunt.tally) == 255
    out, err = capsys.readouterr()
    assert "harness error: simulated run #1 raised ValueError: metadata record" in err
    assert "partition[1001,1002] 0+2.9s" in err and "not a failure the checkers found" in err
    (hunt_dir,) = (tmp_path / "results" / "hunt").iterdir()
    info = json.loads((hunt_dir / "hunt.json").read_text(encoding="utf-8"))
    assert info["error"] == crash.error
    assert f"replay it with: {info['replay_command']}" in out
    assert f"--fault-schedule {hunt_dir / SCHEDULE_FILE}" in info["replay_command"]
    kept = Path(info["run_dir"])
    assert not crash.run_dir.exists() and kept.parent == hunt_dir
    assert "Traceback" in (kept / "harness.log").read_text(encoding="utf-8")
    expected = [FaultOp.from_json(o) for o in ops(SCHEDULE, spec.brokers, spec.time_limit_s, spec.controllers)]
    for path in (hunt_dir / SCHEDULE_FILE, kept / SCHEDULE_FILE):
        assert read_schedule(path)[0] == expected
