"""`logquake test --sim --nemesis disk`: the disk nemesis over the simulated brokers'
FaultyDisks (nemeses/sim_control.py). A seeded run on the safe configuration is valid, its
faults land (a broker halts on its failed log directory and the heal restarts it), and the
same seed gives the same history."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.testcmd import main

ARGS = ["--sim", "--nemesis", "disk", "--nemesis-interval", "3", "--time-limit", "16", "--final-time-limit", "20",
        "--quiet-period", "2", "--seed", "3", "--cluster-config", "min.insync.replicas=2"]


def run(results: Path) -> tuple[int, Path]:
    code = main([*ARGS, "--results-dir", str(results)])
    runs = sorted(p for p in results.glob("*/2*") if p.is_dir())
    assert len(runs) == 1, runs
    return code, runs[0]


def test_a_seeded_simulated_disk_run_is_valid_and_its_faults_land(tmp_path: Path) -> None:
    code, run_dir = run(tmp_path / "a")
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    assert results["simulated"] is True
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    done = [op for op in ops if op.get("f") in ("start-disk", "stop-disk") and isinstance(op.get("value"), dict)]
    faulted = [f for op in done if op["f"] == "start-disk" for f in op["value"].get("faulted", [])]
    healed = [h for op in done if op["f"] == "stop-disk" for h in op["value"].get("healed", [])]
    assert any("faults" in f or f.get("power_loss") for f in faulted), faulted
    assert any(h.get("halted") for h in healed), f"no broker halted on a failed log directory: {healed}"
    # The same command and seed replay the same history.
    _, again = run(tmp_path / "b")
    digest = [hashlib.sha256((d / "history.jsonl").read_bytes()).hexdigest() for d in (run_dir, again)]
    assert digest[0] == digest[1]
