"""A run whose only fault is latency exposes an unsafe switch, deterministically: the same
10-s delay on the links between the partitions' leader and the controller that
test_latency_runs gives through the proxy (where whether a consumer reads past the HWM
inside the window depends on timing, so that form is a soak test), here in the simulation,
where the seed fixes every interleaving. The leader, fenced by the controller it can no
longer heartbeat to while clients still reach it, serves records past its high watermark
that the next leader never has; the same schedule on the safe cluster is valid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.history import read_history
from tests.nemeses.test_latency_runs import FAST_FAILOVER, anomaly_names, run_test

# Broker 0 leads the tested partitions at the start of seed 1's run; the delay outlasts the
# 3-s session timeout, so the controller fences it and elects another leader meanwhile.
SCHEDULE = [
    {"at_s": 1.0, "f": "start-link-delay",
     "value": {"target": "subset", "links": [[0, "controller"], ["controller", 0]], "fault": {"delay_ms": 10000, "jitter_ms": 0}}},
    {"at_s": 9.0, "f": "stop-link-delay", "value": None},
]
FOLLOWS = {"inconsistent-offsets", "lost-write", "unseen", "duplicate", "nonmonotonic-send", "nonmonotonic-poll",
           "poll-skip", "int-poll-skip", "int-nonmonotonic-poll", "int-nonmonotonic-send", "G1a", "G1c-realtime"}


def _run(tmp_path: Path, *extra: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(SCHEDULE))
    return run_test(tmp_path, "--sim", "--nemesis", "link-delay", "--fault-schedule", str(schedule), "--seed", "1",
                    "--time-limit", "12", "--final-time-limit", "10", "--client-config", "isolation.level=read_uncommitted",
                    *[arg for pair in FAST_FAILOVER for arg in ("--cluster-config", pair)], *extra)


@pytest.mark.slow
def test_latency_alone_exposes_reading_past_the_high_watermark_in_the_simulation(tmp_path):
    out, run_dir, verdict = _run(tmp_path / "unsafe", "--cluster-config", "fetch.read.past.high.watermark=true")
    faults = {op.f for op in read_history(run_dir / "history.jsonl") if op.process == "nemesis" and op.f.startswith("start-")}
    assert faults == {"start-link-delay"}  # the only fault
    assert verdict["valid"] is False, json.dumps(verdict, indent=1)[:4000]
    assert "inconsistent-offsets" in anomaly_names(verdict, allowed=False), json.dumps(verdict["anomalies"])[:3000]
    assert anomaly_names(verdict, allowed=False) <= FOLLOWS
    assert out.returncode == 1

    out, run_dir, verdict = _run(tmp_path / "safe")
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)[:4000]
    assert out.returncode == 0
