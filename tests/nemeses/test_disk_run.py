"""One seeded real run under the disk nemesis, on the safe configuration (acks=all with an
idempotent producer, RF 3, min ISR 2): valid, and its history shows the faults took effect."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.history import read_history
from tests.run_logquake import run_command

# Seed 2 draws a torn-crash first, then disk-full on one broker (seeded gaps give each fault
# seconds to land). 51-89 s here, most of it the check's Spark session: marked slow.
COMMAND = ["--workload", "queue", "--nemesis", "disk", "--nemesis-interval", "1.5", "--time-limit", "12", "--concurrency", "4",
           "--brokers", "3", "--seed", "2", "--quiet-period", "1", "--final-time-limit", "20",
           "--cluster-config", "min.insync.replicas=2", "--cluster-config", "broker.session.timeout.ms=3000",
           "--cluster-config", "broker.heartbeat.interval.ms=500", "--cluster-config", "offsets.topic.num.partitions=3"]


@pytest.mark.slow
def test_a_seeded_disk_run_on_the_safe_cluster_is_valid_and_its_faults_land(tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = run_command([sys.executable, "-m", "harness.testcmd", *COMMAND, "--results-dir", str(results)],
                      timeout_s=300)
    runs = sorted({p.parent.resolve() for p in results.glob("*/*/history.jsonl")})
    assert len(runs) == 1, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
    verdict = json.loads((runs[0] / "results.json").read_text())
    assert out.returncode == 0 and verdict["valid"] is True, (verdict.get("anomalies"), out.stderr[-2000:])
    ops = list(read_history(runs[0] / "history.jsonl"))
    done = [op.value for op in ops if op.process == "nemesis" and op.f == "start-disk" and isinstance(op.value, dict) and "faulted" in op.value]
    assert [value["kind"] for value in done][:2] == ["torn-crash", "disk-full"]
    power_losses = [f for value in done for f in value["faulted"] if f.get("power_loss")]
    assert power_losses and all(f["files_torn"] > 0 and f["unflushed_bytes"] > 0 for f in power_losses)
    healed = [h for op in ops if op.process == "nemesis" and op.f == "stop-disk" and isinstance(op.value, dict)
              for h in op.value.get("healed", [])]
    # The powered-off broker and the one whose full disk halted it are restarted by the heal.
    assert healed[0]["node"] == power_losses[0]["node"] and healed[0]["restarted_pid"]
    assert healed[1]["restarted_pid"] and "No space left on device" in healed[1]["halted"]
