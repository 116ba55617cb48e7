"""A simulated run whose simulation raises out of its event loop: the run heals and records
the heal before its history is closed, and a hunt that meets such a run stops with a harness
error naming the schedule and the error, and keeps the run and its schedule for a replay.

The trigger is a harness bug injected here: a simulated kill that also restarts the node on
the simulation's own timeline a second later, as a fault package's follow-up would, while
the kill package's stop has restarted it already; `start_controller`'s assertion then raises
out of the simulation's event loop 1 simulated s into the main phase (a simulator event, not an asyncio
callback, so nothing catches it). The schedule is the one seed 2's vote hunt met (QHUNT's
report), run with controller.quorum.vote.skip.log.check; that run itself ends with a verdict
now (its controllers halt on committed metadata they cannot apply, as Kafka's do), so it is
the injected bug, not the cluster, that raises. Before the fix the phases' coroutine was left
pending, closed by the garbage collector after the history was closed, and its heal raised
HistoryWriteError there (unraisable); the hunt took the exception for a failing example and
ended in Hypothesis's FlakyFailure."""

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
# Met by seed 2 of the vote hunt with anchored starts (session 11): a controller whose log the
# unsafe election cut below what it had applied as committed is elected again; leading there
# it appended at offsets already applied (ValueError out of the event loop) until it halted
# on becoming leader, as Kafka's metadata log refuses a truncation below its high watermark.
TRUNCATED_LEADER = (Fault("partition", (1000, 1002), 1.3, 3.0), Fault("kill", "active-controller", 3.4, 1.9))


BUG_DELAY_MS = 1000
BUG = "controller 1001 is running"


@pytest.fixture
def double_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The injected harness bug: every simulated kill also restarts the node BUG_DELAY_MS
    later, on the simulation's timeline, without checking that it is down."""
    from nemeses.sim_control import SimControl

    real_kill = SimControl.kill

    def kill(self: SimControl, node: int) -> int | None:
        result = real_kill(self, node)
        sim = self.sim
        start = sim.start_controller if node in sim.controller_ids else sim.start_broker
        sim.scheduler.call_later(BUG_DELAY_MS, lambda: start(node))
        return result

    monkeypatch.setattr(SimControl, "kill", kill)


# The client load the vote hunt drove when these schedules were found (session 11): a fixed
# schedule replays its interleaving only under the settings it was found with, and the entry
# itself has since moved to one client at 10 ops/s (faster hunts, other interleavings).
FOUND_WITH = ["--rate", "50", "--concurrency", "3"]


def _hunt_args(results: Path) -> Any:
    """The vote hunt's arguments as they were when the schedules above were found, parsed as
    `logquake hunt` parses them (the last --rate and --concurrency win)."""
    from harness.cli import ArgumentParser
    from harness.hunt import register

    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    return parser.parse_args(["hunt", *SWITCH_HUNTS[VOTE], *FOUND_WITH, "--seed", str(SEED), "--no-database",
                              "--results-dir", str(results)])


def _spec(results: Path) -> Any:
    from harness.testcmd import build_spec

    return build_spec(_hunt_args(results), SEED)


@pytest.mark.usefixtures("double_restart")
def test_a_simulation_that_raises_heals_before_the_history_closes(tmp_path: Path) -> None:
    from harness.history import read_history
    from harness.run import open_run
    from harness.sim.run import FaultOp, execute_sim
    from logquake.strategies import ops

    spec = _spec(tmp_path)
    run = open_run(spec, tmp_path)
    try:
        with pytest.raises(AssertionError, match=BUG):
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
    assert "the simulation raised AssertionError out of its event loop in the main phase" in log


@pytest.mark.usefixtures("double_restart")
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
    # startswith: where pytest rewrites the cluster's asserts (a pytest11 plugin's distribution,
    # as an installed logquake is) the message goes on with the rewritten comparison.
    assert crash.error.startswith(f"AssertionError: {BUG}")

    assert report_crash(args, spec, SEED, ["partition", "kill"], crash, hunt.tally) == 255
    out, err = capsys.readouterr()
    assert f"harness error: simulated run #1 raised AssertionError: {BUG}" in err
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


@pytest.mark.parametrize("schedule", [SCHEDULE, TRUNCATED_LEADER], ids=["replay-error", "truncated-leader"])
def test_the_vote_hunt_schedule_now_ends_with_a_verdict(tmp_path: Path, schedule: tuple[Fault, ...]) -> None:
    """The schedule that used to raise (a controller replaying a committed PartitionRecord of
    a topic its diverged log never created): the controllers that cannot apply it halt, as
    Kafka's do, the run goes on to its end, and the quorum's logs are judged (quorum.json,
    which the checks turn into metadata-committed-* anomalies; the Spark checks are left out
    to keep this fast)."""
    from harness.run import open_run
    from harness.sim.run import FaultOp, execute_sim
    from logquake.strategies import ops

    spec = _spec(tmp_path)
    run = open_run(spec, tmp_path)
    try:
        outcome = execute_sim(run, [FaultOp.from_json(o) for o in ops(schedule, spec.brokers, spec.time_limit_s,
                                                                      spec.controllers)], check_history=False)
    finally:
        run.close()
    assert outcome.exit_code == 0 and not outcome.interrupted, outcome.message
    quorum = json.loads((run.run_dir / "quorum.json").read_text(encoding="utf-8"))
    assert quorum["valid"] is False
    assert "committed-disagree" in {v["kind"] for v in quorum["violations"]}
    assert "out of its event loop" not in (run.run_dir / "harness.log").read_text(encoding="utf-8")
