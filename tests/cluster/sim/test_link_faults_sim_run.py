"""`logquake test --sim` with the four link-fault nemeses: a seeded simulated queue run on
three brokers with messages delayed, lost, duplicated and reordered on chosen links is
checked valid, and its history records the faults as they were set."""

from __future__ import annotations

import json
from pathlib import Path

from harness.testcmd import main
from nemeses.link_faults import LINK_FAULT_NAMES


def test_a_seeded_simulated_run_under_every_link_fault_is_valid(tmp_path: Path) -> None:
    code = main(["--sim", "--time-limit", "10", "--final-time-limit", "10", "--quiet-period", "1",
                 "--nemesis", ",".join(LINK_FAULT_NAMES), "--nemesis-interval", "1", "--seed", "2",
                 "--results-dir", str(tmp_path)])
    runs = sorted(p for p in tmp_path.glob("*/2*") if p.is_dir())
    assert len(runs) == 1, runs
    results = json.loads((runs[0] / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    ops = [json.loads(line) for line in (runs[0] / "history.jsonl").read_text().splitlines()]
    started = {op["f"] for op in ops if str(op.get("f", "")).startswith("start-link-")}
    assert started == {f"start-{name}" for name in LINK_FAULT_NAMES}, started
    assert results["simulated"] is True
