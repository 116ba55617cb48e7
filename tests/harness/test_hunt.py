"""`logquake hunt` end to end: on a cluster whose followers truncate to their own high
watermark at a leader change (replica.truncate.to.high.watermark, a Kafka bug: the
unflushed crash of every in-sync copy that this test hunted before is a loss Kafka documents,
allowed by the claims since they count overlapping crashes) it finds a failing kill schedule, shrinks it, replays
the minimal one as a run directory, and prints a command that reproduces that run's history
byte for byte; a second hunt replays the stored failure first; the default configuration
survives the same search. Every example is a real simulated run checked by the real checkers
(one Spark session); the counts (--max-examples, --max-shrinks) keep the hunts deterministic
for their seed, and the wall budget is only a safety net. Every switch of
harness/hunt_switches.py, found and survived by the safe cluster: soak."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from harness.cli import EXIT_BAD_ARGUMENTS, main
from harness.hunt_switches import SWITCH_HUNTS, without_switch

# Short simulated runs: 2 s of main phase at 50 ops/s from 2 clients.
SMALL = ["--nemesis", "kill", "--time-limit", "2", "--final-time-limit", "3", "--quiet-period", "0.5", "--rate", "50",
         "--concurrency", "2", "--max-faults", "2", "--seed", "5", "--budget", "400"]
# Seed 1 finds the truncation's loss at run 3 and shrinks it within 8 runs (seed 5 took 10
# runs to find it and 15 in all, 122 s of this test against 65 s for the old hunt).
BUGGY = ["--cluster-config", "replica.truncate.to.high.watermark=true", "--seed", "1"]


def _lines(text: str, prefix: str) -> list[str]:
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.slow
def test_hunt_finds_and_shrinks_the_truncation_to_the_hwm_and_its_replay_is_exact(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hunt", *SMALL, *BUGGY, "--max-shrinks", "5", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1, out
    (hunt_json,) = tmp_path.glob("hunt/*/hunt.json")
    hunt = json.loads(hunt_json.read_text())
    first, minimal = hunt["first_failure"], hunt["faults"]
    # Shrunk: fewer, shorter or earlier faults, none longer than the first failure's longest.
    assert (len(minimal) < len(first) or sum(f["duration_s"] for f in minimal) < sum(f["duration_s"] for f in first)
            or sum(f["start_s"] for f in minimal) < sum(f["start_s"] for f in first)), hunt
    assert max(f["duration_s"] for f in minimal) <= max(f["duration_s"] for f in first)
    assert hunt["replay_verdict"] is False and hunt["replay_exit_code"] == 1
    run_dir = Path(hunt["run_dir"])
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False and results["simulated"] is True
    assert {a["name"] for a in results["anomalies"] if not a["allowed"]} & {"lost-write", "unseen", "inconsistent-offsets"}
    schedule = json.loads((run_dir / "fault-schedule.json").read_text())
    assert [f["kind"] for f in schedule["faults"]] == [f["kind"] for f in minimal]
    assert schedule["ops"][0]["f"] == "start-kill"

    (command,) = _lines(out, "logquake hunt: replay the minimal failure with: ")
    argv = shlex.split(command)
    assert argv[:2] == ["logquake", "test"] and "--sim" in argv
    assert argv[argv.index("--fault-schedule") + 1] == str(run_dir / "fault-schedule.json")
    replay_root = tmp_path / "replay"
    argv[argv.index("--results-dir") + 1] = str(replay_root)
    assert main(argv[1:]) == 1
    (replayed,) = replay_root.glob("hunt-queue-kill/2*")
    assert (replayed / "history.jsonl").read_bytes() == (run_dir / "history.jsonl").read_bytes()
    assert (replayed / "fault-schedule.json").read_text() == (run_dir / "fault-schedule.json").read_text()

    # A second hunt of the same cluster replays the stored (minimal) failure before drawing.
    capsys.readouterr()
    assert main(["hunt", *SMALL, *BUGGY, "--max-shrinks", "0", "--results-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    examples = _lines(out, "logquake hunt: #")
    assert examples[0].startswith("1 INVALID"), examples
    assert "failure found" in out


@pytest.mark.slow
def test_the_default_configuration_survives_the_same_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hunt", *SMALL, "--max-examples", "4", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert len(_lines(out, "logquake hunt: #")) == 4
    assert re.search(r"no failure found: 4 simulated runs", out)
    assert not list(tmp_path.glob("hunt/*"))  # nothing to replay


@pytest.mark.parametrize("args, says", [
    (["--nemesis", ""], "name the fault kinds"),
    (["--nemesis", "latency"], "the hunt draws schedules of kill, pause, partition, clock, disk, link-delay, link-loss, "
                               "link-duplicate, link-reorder only"),
    (["--nemesis", "kill", "--budget", "0"], "--budget must be positive"),
    (["--nemesis", "kill", "--max-shrinks", "-1"], "--max-shrinks must be at least 0"),
    (["--nemesis", "kill", "--workload", "delivery"], "no simulated client"),
    (["--nemesis", "partition", "--brokers", "1"], "a partition needs at least two brokers"),
])
def test_bad_hunts_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                       says: str) -> None:
    assert main(["hunt", *args, "--results-dir", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert says in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.soak
# The quorum's switch needs a few hundred runs and its own seed: tests/harness/test_hunt_quorum.py.
@pytest.mark.parametrize("switch", sorted(s for s in SWITCH_HUNTS if not s.startswith("controller.quorum.")))
def test_each_unsafe_switch_is_found_by_a_hunt_and_the_safe_cluster_survives_it(
        switch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Minutes per switch (bench/bench_hunt.py measures them): soak, not CI.
    argv = [*SWITCH_HUNTS[switch], "--seed", "1", "--budget", "300", "--max-shrinks", "10", "--no-database"]
    assert main(["hunt", *argv, "--results-dir", str(tmp_path / "unsafe")]) == 1, capsys.readouterr().out
    (hunt_json,) = (tmp_path / "unsafe").glob("hunt/*/hunt.json")
    assert json.loads(hunt_json.read_text())["replay_verdict"] is False
    safe = [*without_switch(SWITCH_HUNTS[switch]), "--seed", "1", "--budget", "600", "--max-examples", "10",
            "--no-database"]
    assert main(["hunt", *safe, "--results-dir", str(tmp_path / "safe")]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("content, args, says", [
    ('{"ops": []}', [], "--fault-schedule needs --sim"),
    ('[{"at_s": 1, "f": "start-pause", "value": {"targets": "nodes", "nodes": [0]}}]', ["--sim", "--nemesis", "kill"],
     "uses pause: add it to --nemesis"),
    ('{"ops": [{"f": "start-kill"}]}', ["--sim", "--nemesis", "kill"], "op 0: a fault op is"),
    ('not json', ["--sim", "--nemesis", "kill"], "not JSON"),
    ('{"faults": []}', ["--sim", "--nemesis", "kill"], "an object with an 'ops' list"),
])
def test_a_bad_fault_schedule_file_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                                      args: list[str], says: str) -> None:
    path = tmp_path / "schedule.json"
    path.write_text(content)
    results = tmp_path / "results"
    assert main(["test", *args, "--fault-schedule", str(path), "--seed", "1", "--results-dir", str(results)]) == \
        EXIT_BAD_ARGUMENTS
    assert says in capsys.readouterr().err
    assert not results.exists()
