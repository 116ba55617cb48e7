"""Exact replay of a simulated run: one `--sim` command and seed give a byte-identical
history.jsonl in two processes with different PYTHONHASHSEEDs (string hashing, and so the
order of sets of strings, differs between them), through kill and partition faults and a
group subscription over several topics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Subscribes (sub_via=subscribe) cover several topics at once: the spike's known gap (aiokafka
# lists a subscription's topics in set order) must not reach the history.
COMMAND = ["--sim", "--nemesis", "kill,partition", "--nemesis-interval", "1.5", "--time-limit", "10",
           "--final-time-limit", "20", "--quiet-period", "1", "--seed", "11",
           "--workload-option", "sub_via=assign,subscribe", "--workload-option", "sub_p=0.1"]


def _history(tmp_path: Path, hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "tests.harness.sim.replay_child", str(tmp_path / hash_seed), *COMMAND],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stderr.strip().splitlines()[-1])
    return Path(done.stdout.strip().splitlines()[-1]).read_bytes()


def test_the_same_command_and_seed_give_a_byte_identical_history_across_processes(tmp_path: Path) -> None:
    first = _history(tmp_path, "1")
    second = _history(tmp_path, "2")
    text = first.decode()
    # The run did what the test is about: faults, several-topic subscribes, a final phase.
    assert '"f":"start-kill"' in text and '"f":"start-partition"' in text
    assert '"type":"ok","process":' in text and '"f":"subscribe"' in text
    assert '"poll_ms":1000' in text, "the final phase ran"
    assert first == second
