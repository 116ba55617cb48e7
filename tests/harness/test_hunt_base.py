"""`logquake hunt --base-schedule FILE`: faults every example keeps. The base here is the kill
of every broker at once on a cluster that loses unflushed data (a loss Kafka documents,
allowed by the claims: `--find` stops at it); the hunt draws pauses only, which lose nothing.
With the base the first example shows the loss; the shrink keeps the base and works on the
drawn pause; hunt.json, the minimal run's fault-schedule.json and the printed replay command
(with the base's kind added to --nemesis) all carry it. Without the base, the same seed's
first example (the same pause) shows nothing. Bad base files are refused naming what is wrong."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from harness.cli import EXIT_BAD_ARGUMENTS, main
from harness.hunt import EXIT_FOUND_ALLOWED
from logquake.strategies import Fault, schedule_json

KILL_ALL = Fault("kill", (0, 1, 2), 0.3, 0.1)
HUNT = ["--find", "lost-write,unseen,inconsistent-offsets", "--nemesis", "pause", "--time-limit", "2",
        "--final-time-limit", "3", "--quiet-period", "0.5", "--rate", "50", "--concurrency", "2", "--max-faults", "2",
        "--cluster-config", "min.insync.replicas=2", "--cluster-config", "log.crash.lose.unflushed=true",
        "--seed", "1", "--budget", "600", "--no-database"]


def _lines(text: str, prefix: str) -> list[str]:
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.slow
def test_a_base_schedule_is_kept_in_every_example_the_shrink_and_the_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base.json"
    base.write_text(schedule_json([KILL_ALL], 3, 2))
    code = main(["hunt", *HUNT, "--base-schedule", str(base), "--max-examples", "3", "--max-shrinks", "1",
                 "--results-dir", str(tmp_path / "with")])
    out = capsys.readouterr().out
    assert code == EXIT_FOUND_ALLOWED, out
    examples = _lines(out, "logquake hunt: #")
    assert examples and all(": kill[0,1,2] 0.3+0.1s; pause[" in line for line in examples), examples
    (hunt_json,) = (tmp_path / "with").glob("hunt/*/hunt.json")
    hunt = json.loads(hunt_json.read_text())
    assert hunt["first_failure_example"] == 1
    assert hunt["faults"][0] == KILL_ALL.as_json() and [f["kind"] for f in hunt["faults"][1:]] == ["pause"]
    assert hunt["base_faults"] == [KILL_ALL.as_json()] and hunt["base_schedule"] == str(base.resolve())
    schedule = json.loads((Path(hunt["run_dir"]) / "fault-schedule.json").read_text())
    assert schedule["faults"] == hunt["faults"]
    assert {"at_s": 0.3, "f": "start-kill", "value": {"targets": "nodes", "nodes": [0, 1, 2]}} in schedule["ops"]
    (command,) = _lines(out, "logquake hunt: replay the minimal run showing ")
    argv = shlex.split(command.split(" with: ", 1)[1])
    assert argv[argv.index("--nemesis") + 1] == "pause,kill"
    assert Path(argv[argv.index("--fault-schedule") + 1]) == Path(hunt["run_dir"]) / "fault-schedule.json"
    # The base is what loses: without it the same seed draws the same first pause (the base
    # is added to the draw, not drawn), and that run shows nothing.
    code = main(["hunt", *HUNT, "--max-examples", "1", "--results-dir", str(tmp_path / "without")])
    out = capsys.readouterr().out
    assert code == 0 and "no run showing" in out, out
    (alone,) = _lines(out, "logquake hunt: #")
    assert alone.split(": ", 1)[1].split(" (")[0] == examples[0].split(": kill[0,1,2] 0.3+0.1s; ", 1)[1].split(" (")[0]


@pytest.mark.parametrize("content, args, says", [
    (None, [], "cannot read it"),
    ("not json", [], "not JSON"),
    ('{"ops": []}', [], "expected an object with a non-empty 'faults' list"),
    ('{"faults": [{"kind": "kill"}]}', [], "fault 0: a fault is"),
    (schedule_json([KILL_ALL], 3, 2), ["--nemesis", "pause,kill"],
     "has kill faults, which --nemesis also draws: a package holds one fault at a time"),
    (schedule_json([Fault("kill", (5,), 0.3, 0.1)], 6, 2), [], "kill targets [5], which are neither brokers"),
    (schedule_json([Fault("kill", (0,), 2.0, 0.1)], 3, 2), [], "kill[0] 2+0.1s starts at or after the main phase's end"),
])
def test_a_bad_base_schedule_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
                                                args: list[str], says: str) -> None:
    path = tmp_path / "base.json"
    if content is not None:
        path.write_text(content)
    results = tmp_path / "results"
    argv = ["hunt", *HUNT, *args, "--base-schedule", str(path), "--results-dir", str(results)]
    assert main(argv) == EXIT_BAD_ARGUMENTS
    assert says in capsys.readouterr().err
    assert not results.exists()
