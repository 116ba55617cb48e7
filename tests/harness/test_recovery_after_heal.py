"""Throughput comes back after a partition heals (issue 12 §3): a real 3-broker cluster,
acks=all sends, brokers 0 and 2 cut from each other for 15 s, then healed. In the 10 s after
the heal the ok rate must be at least half the pre-fault rate. Before the run's namespace
capped TCP's retransmission backoff (nemeses/net/init.py), the broker-to-broker connection
that carried a black-holed fetch retried only ~10 s after the heal, and sends to the
partitions it replicates stayed stuck until then."""

from __future__ import annotations

import json
import subprocess
import sys

from nemeses.net.sandbox import PROJECT_ROOT

SCENARIO_TIMEOUT_S = 120


def test_the_ok_rate_after_a_heal_is_back_to_at_least_half_the_pre_fault_rate():
    result = subprocess.run(
        [sys.executable, "-m", "nemeses.net.sandbox", sys.executable, "-m", "tests.harness.recovery_scenario"],
        capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S, cwd=PROJECT_ROOT)
    assert result.returncode == 0, f"scenario failed ({result.returncode}):\n{result.stderr[-4000:]}"
    out = json.loads(result.stdout.strip().splitlines()[-1])
    oks, cut = out["oks"], out["cut"]
    # Pre-fault rate over the seconds before the cut, after a 2 s warm-up.
    pre_start = out["started"] + 2.0
    pre_rate = sum(1 for t in oks if pre_start <= t < cut) / (cut - pre_start)
    after_s = out["after_heal_s"]
    post_rate = sum(1 for t in oks if 0.0 <= t < after_s) / after_s
    assert pre_rate > 20, f"the cluster was too slow before the fault to measure anything: {pre_rate:.1f} ok/s"
    assert post_rate >= 0.5 * pre_rate, (
        f"{post_rate:.1f} ok/s in the {after_s:g} s after the heal against {pre_rate:.1f} before the fault")
