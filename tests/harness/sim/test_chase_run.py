"""The chasing partition as a nemesis target of `logquake test --sim` (`--nemesis-option
partition_targets=raft-leaders`, three controllers): each scheduled partition cuts off the Raft
leader, then every later election's winner after seeded delays, each cut in the history as a
start-partition of its own; the run checks valid on the safe cluster and replays byte for byte.
A real run refuses the target before any cluster starts, naming --sim."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import EXIT_BAD_ARGUMENTS
from harness.testcmd import main

CHASE = ["--controllers", "3", "--nemesis", "partition", "--nemesis-option", "partition_targets=raft-leaders",
         "--nemesis-interval", "3", "--time-limit", "12", "--final-time-limit", "4", "--quiet-period", "1", "--seed", "3"]


def _run(root: Path) -> tuple[int, Path]:
    code = main(["--sim", *CHASE, "--results-dir", str(root)])
    (run_dir,) = sorted(p for p in root.glob("*/2*") if p.is_dir())
    return code, run_dir


def test_a_simulated_run_chases_the_raft_leaders_checks_valid_and_replays(tmp_path: Path) -> None:
    code, run_dir = _run(tmp_path / "first")
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    starts = [op["value"] for op in history if op["f"] == "start-partition" and op["type"] == "info"]
    drawn = [v for v in starts if "after_ms" in v and "isolated" not in v and not v.get("chased")]
    assert drawn and all(v["topology"] == "raft-leaders" and v["after_ms"] in [n * 100.0 for n in range(11)]
                         and v["then_ms"] in [n * 100.0 for n in range(11)] for v in drawn), drawn
    cuts = [v for v in starts if "isolated" in v]
    chased = [v for v in starts if v.get("chased") and "isolated" in v]
    assert all(v["isolated"] in (1000, 1001, 1002) for v in cuts) and chased, starts  # a later winner was chased
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    _, again = _run(tmp_path / "again")
    assert (again / "history.jsonl").read_bytes() == (run_dir / "history.jsonl").read_bytes()


def test_a_real_run_refuses_the_chase_naming_sim(tmp_path: Path, capsys) -> None:
    assert main([*CHASE, "--results-dir", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    err = capsys.readouterr().err
    assert "partition_targets=raft-leaders" in err and "only a simulated run (--sim)" in err, err
    assert not list(tmp_path.glob("*/2*"))  # no run directory: refused before anything started
