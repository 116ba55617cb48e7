"""`logquake cluster start --controllers N`: a count the bundled cluster does not run is
refused by name before anything starts (a started quorum is covered by test_quorum_process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_controller_count_other_than_1_3_5_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "start", "--controllers", "2", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 254, done.stderr
    assert "--controllers 2: must be one of 1, 3, 5" in done.stderr
    assert not any(tmp_path.iterdir())
