"""`logquake hunt --find ANOMALY[,ANOMALY]`: a hunt for a run whose results show an anomaly,
whether the run's claims allow it or not. On a cluster that may lose what a lone in-sync
replica acknowledged (min.insync.replicas=1 with log.crash.lose.unflushed: Kafka documents
the loss, the claims allow it, every run is valid) `--find lost-write,unseen` stops at the
first run showing one, replays it and exits 3 (found, allowed), the replay's results listing
the anomaly as allowed and the verdict valid (so a hunt without --find, which stops only at an
invalid verdict, goes past it). The shrink with the same predicate, and every FIND_HUNTS entry
of harness/hunt_switches.py found and not found on the safe cluster: soak (minutes each)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from harness.cli import EXIT_BAD_ARGUMENTS, main
from harness.hunt import EXIT_FOUND_ALLOWED
from harness.hunt_switches import FIND_HUNTS, safe_find_hunt

# The unflushed-crash hunt of tests/harness/test_hunt.py, with min ISR 1: its losses are allowed.
SMALL = ["--nemesis", "kill", "--time-limit", "2", "--final-time-limit", "3", "--quiet-period", "0.5", "--rate", "50",
         "--concurrency", "2", "--max-faults", "2", "--seed", "5", "--budget", "400", "--no-database"]
ALLOWED_LOSS = ["--cluster-config", "min.insync.replicas=1", "--cluster-config", "log.crash.lose.unflushed=true"]


def _lines(text: str, prefix: str) -> list[str]:
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


@pytest.mark.slow
def test_find_stops_at_an_allowed_loss_and_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No shrink here (CI time): the soak tests shrink with the --find predicate.
    code = main(["hunt", *SMALL, *ALLOWED_LOSS, "--find", "lost-write,unseen", "--max-shrinks", "0",
                 "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == EXIT_FOUND_ALLOWED, out
    examples = _lines(out, "logquake hunt: #")
    found = [e for e in examples if " FOUND in " in e]
    assert found and all("allowed" in e and "not allowed" not in e for e in found), examples
    # The runs before the first finding were valid: the hunt stopped at the first showing one.
    assert all(" valid in " in e for e in examples[:examples.index(found[0])]), examples
    (hunt_json,) = tmp_path.glob("hunt/*/hunt.json")
    hunt = json.loads(hunt_json.read_text())
    assert hunt["find"] == ["lost-write", "unseen"] and hunt["replay_verdict"] is True
    assert hunt["replay_found"] and set(hunt["replay_found"]) <= {"lost-write", "unseen"}
    assert all(hunt["replay_found"].values())  # allowed by the run's claims
    results = json.loads((Path(hunt["run_dir"]) / "results.json").read_text())
    assert results["valid"] is True
    listed = {a["name"]: a["allowed"] for a in results["anomalies"]}
    assert all(listed[name] for name in hunt["replay_found"])
    (command,) = _lines(out, f"logquake hunt: replay the minimal run showing {', '.join(sorted(hunt['replay_found']))} with: ")
    assert "--fault-schedule" in shlex.split(command)
    assert f"the claims allow it (exit {EXIT_FOUND_ALLOWED})" in out


@pytest.mark.soak
def test_find_shrinks_keeping_its_predicate_and_a_plain_hunt_goes_past(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["hunt", *SMALL, *ALLOWED_LOSS, "--find", "lost-write,unseen", "--max-shrinks", "5",
                 "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == EXIT_FOUND_ALLOWED, out
    hunt = json.loads(next(tmp_path.glob("hunt/*/hunt.json")).read_text())
    first, minimal = hunt["first_failure"], hunt["faults"]
    assert len(minimal) <= len(first) and sum(f["duration_s"] for f in minimal) <= sum(f["duration_s"] for f in first)
    assert hunt["replay_found"] and all(hunt["replay_found"].values())
    # The same search without --find goes past the finding: its runs are valid.
    n = hunt["first_failure_example"]
    assert main(["hunt", *SMALL, *ALLOWED_LOSS, "--max-examples", str(n), "--results-dir", str(tmp_path / "plain")]) == 0
    assert f"no failure found: {n} simulated runs" in capsys.readouterr().out


@pytest.mark.parametrize("args, says", [
    (["--find", "lost-writes"], "--find lost-writes: not an anomaly the checkers report; known: "),
    (["--find", ","], "--find: name the anomalies"),
    (["--max-fault-targets", "kill"], "expected KIND=N"),
    (["--max-fault-targets", "partition=1"], "max_targets bounds the brokers of kill, pause, clock, disk faults"),
    (["--max-fault-targets", "pause=1"], "max_targets names pause, which is not among the kinds kill"),
])
def test_bad_find_hunts_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                            says: str) -> None:
    nemesis = "kill,partition" if "partition=1" in args else "kill"
    assert main(["hunt", "--nemesis", nemesis, *args, "--results-dir", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert says in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.soak
@pytest.mark.parametrize("switch", sorted(FIND_HUNTS))
def test_each_documented_loss_is_found_with_find_and_not_on_the_safe_cluster(
        switch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Minutes per switch (bench/bench_hunt.py measures them): soak, not CI.
    # Seed 1 finds each within the budget (README "What a hunt can find").
    argv = [*FIND_HUNTS[switch], "--seed", "1", "--budget", "900", "--max-examples", "400", "--max-shrinks", "10",
            "--no-database"]
    assert main(["hunt", *argv, "--results-dir", str(tmp_path / "unsafe")]) == EXIT_FOUND_ALLOWED, \
        capsys.readouterr().out
    (hunt_json,) = (tmp_path / "unsafe").glob("hunt/*/hunt.json")
    assert json.loads(hunt_json.read_text())["replay_found"]
    safe = [*safe_find_hunt(switch), "--seed", "1", "--budget", "900", "--max-examples", "20", "--no-database"]
    assert main(["hunt", *safe, "--results-dir", str(tmp_path / "safe")]) == 0, capsys.readouterr().out
