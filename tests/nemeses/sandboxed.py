"""Run a scenario of tests.nemeses.scenarios inside a fresh private namespace and return
what it observed."""

from __future__ import annotations

import json
import subprocess
import sys

from nemeses.net.sandbox import PROJECT_ROOT

SCENARIO_TIMEOUT_S = 120


def run_scenario(name: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "nemeses.net.sandbox", sys.executable, "-m", "tests.nemeses.scenarios", name],
        capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S, cwd=PROJECT_ROOT)
    assert result.returncode == 0, f"scenario {name} failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])
