"""`logquake test --sim --workload eos`: consume-transform-produce with aiokafka copiers
(workloads/clients/aiokafka_eos.py) on the simulated cluster. A seeded run through broker
kills and pauses, with copier crashes between and inside transactions, is checked valid by the
eos checks (every input value once in the output, no aborted copy visible, committed copies
whole); one command and seed give a byte-identical history in two processes with different
PYTHONHASHSEEDs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.testcmd import main

REPO = Path(__file__).resolve().parents[3]
# 50 ops/s from 1 producer and 4 copiers; crash_p 0.1 so that both kinds of crash happen.
EOS = ["--sim", "--workload", "eos", "--time-limit", "10", "--final-time-limit", "20", "--quiet-period", "1",
       "--rate", "50", "--nemesis", "kill,pause", "--nemesis-interval", "2", "--workload-option", "crash_p=0.1"]


def _ops(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a simulated run and its check: 20-100 s on the shared machine
def test_a_seeded_simulated_eos_run_through_kills_and_pauses_is_valid(tmp_path: Path) -> None:
    code = main([*EOS, "--seed", "3", "--results-dir", str(tmp_path)])
    (run_dir,) = sorted(p for p in tmp_path.glob("*/2*") if p.is_dir())
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    ops = _ops(run_dir)
    assert any(op["f"] == "start-kill" for op in ops) and any(op["f"] == "start-pause" for op in ops)
    copies = [op for op in ops if op["f"] == "copy" and op["type"] == "ok" and op["value"]]
    assert copies and all(m[0] in ("poll", "send") for op in copies for m in op["value"])
    assert any(op.get("error") == ["crash", "before-commit"] for op in ops), "a copier crashed inside a transaction"
    assert any(op["f"] == "crash" and op["type"] == "info" for op in ops), "and between transactions"
    assert any("rebalance_log" in op for op in ops), "crashes moved partitions between copiers"
    (verifier,) = [op for op in ops if op["f"] == "poll" and op["type"] == "ok"]
    read = verifier["value"][0][1]
    sent = sum(1 for op in ops if op["f"] == "send" and op["type"] == "ok")
    inputs = sum(len(read.get(str(k), [])) for k in range(4))
    outputs = sum(len(read.get(str(k), [])) for k in range(4, 8))
    assert inputs >= sent > 0 and outputs == inputs, (sent, inputs, outputs)
    clients = json.loads((run_dir / "simulation.json").read_text())["clients"]
    assert clients["producer"]["transaction_timeout_ms"] == 10000  # the eos workload's default
    assert clients["transactional_producer"]["client"].startswith("KioTxnProducer")  # the copiers' producer
    assert clients["transactional_producer"]["transaction_timeout_ms"] == 10000
    # One assignor: aiokafka 0.14 sends a JoinGroup per assignor (aio-libs/aiokafka#1168).
    assert clients["consumer"]["partition_assignment_strategy"] == ["RangePartitionAssignor"]


def _history(tmp_path: Path, hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "tests.harness.sim.replay_child", str(tmp_path / hash_seed), *EOS,
                           "--seed", "3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1]).read_bytes()


@pytest.mark.slow
def test_an_eos_run_replays_byte_for_byte_across_processes(tmp_path: Path) -> None:
    first = _history(tmp_path, "1")
    second = _history(tmp_path, "2")
    text = first.decode()
    assert '"f":"start-kill"' in text and '"f":"copy"' in text and '"rebalance_log"' in text
    assert first == second
