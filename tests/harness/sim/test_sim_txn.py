"""`logquake test --sim --workload-option txn=true`: the queue workload's transactions with an
unmodified aiokafka transactional producer (workloads/clients/aiokafka_txn.py) on the
simulated cluster. A seeded run through kills and partitions is checked valid by the same
checkers as a real run, with committed transactions (sends and polls), intentional aborts and
the transactional offsets; one command and seed give a byte-identical history in two
processes with different PYTHONHASHSEEDs. The LSO bug switch, caught without any fault:
tests/harness/test_hunt_txn.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import EXIT_BAD_ARGUMENTS
from harness.testcmd import main

REPO = Path(__file__).resolve().parents[3]
# Short: 50 ops/s from 3 clients; the faults start about 5 simulated s into the run.
TXN = ["--sim", "--workload-option", "txn=true", "--final-time-limit", "10", "--quiet-period", "1", "--rate", "50",
       "--concurrency", "3"]
FAULTS = ["--time-limit", "10", "--nemesis", "kill,pause,partition", "--nemesis-interval", "2"]


def _run(tmp_path: Path, *args: str) -> tuple[int, Path]:
    code = main([*TXN, *args, "--results-dir", str(tmp_path)])
    runs = sorted(p for p in tmp_path.glob("*/2*") if p.is_dir())
    assert len(runs) == 1, runs
    return code, runs[0]


def _ops(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a simulated run and its check: 20-100 s on the shared machine
def test_a_seeded_simulated_transactional_run_through_kills_pauses_and_partitions_is_valid(tmp_path: Path) -> None:
    code, run_dir = _run(tmp_path, *FAULTS, "--seed", "3")
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [a["name"] for a in results["anomalies"] if not a["allowed"]]
    ops = _ops(run_dir)
    assert any(op["f"] == "start-kill" for op in ops) and any(op["f"] == "start-partition" for op in ops)
    done = [op for op in ops if op["f"] in ("send", "poll", "txn") and op["type"] != "invoke"]
    committed = [op for op in done if op["type"] == "ok" and op["f"] == "txn"]
    # Committed transactions that both wrote (with offsets) and read (records of other keys).
    assert any(m[0] == "send" and m[2][0] is not None for op in committed for m in op["value"])
    assert any(m[0] == "poll" and any(m[1].values()) for op in committed for m in op["value"])
    aborted = [op for op in done if op["type"] == "fail" and op.get("error") == ["abort", "intentional"]]
    assert aborted, "the generator's intentional aborts ran as aborted transactions"
    # The transactions' offsets were committed in them: the group resumes where they ended.
    assert results["simulated"] is True
    clients = json.loads((run_dir / "simulation.json").read_text())["clients"]
    assert clients["producer"]["transaction_timeout_ms"] == 1000  # the txn workload's Jepsen default
    # The transactions ran on the project's producer, with the same deadline, and it says so.
    txn_producer = clients["transactional_producer"]
    assert txn_producer["client"].startswith("KioTxnProducer") and txn_producer["transaction_timeout_ms"] == 1000
    assert clients["consumer"]["isolation_level"] == "read_committed"


@pytest.mark.parametrize("args, says", [
    (["--client-config", "transactional.id=x"], "the workload gives each process its own transactional id"),
    (["--client-config", "acks=1"], "a transactional producer needs acks=all"),
    (["--client-config", "transaction.timeout.ms=soon"], "transaction.timeout.ms='soon' is not an integer"),
])
def test_what_a_transactional_simulation_cannot_do_is_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    assert main([*TXN, *args, "--time-limit", "5", "--seed", "1", "--results-dir", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    assert says in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def _history(tmp_path: Path, hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    command = [*TXN, *FAULTS, "--seed", "3", "--workload-option", "sub_via=assign,subscribe",
               "--workload-option", "sub_p=0.1"]
    done = subprocess.run([sys.executable, "-m", "tests.harness.sim.replay_child", str(tmp_path / hash_seed), *command],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(done.stdout.strip().splitlines()[-1]).read_bytes()


@pytest.mark.slow
def test_a_transactional_run_replays_byte_for_byte_across_processes(tmp_path: Path) -> None:
    first = _history(tmp_path, "1")
    second = _history(tmp_path, "2")
    text = first.decode()
    assert '"f":"start-kill"' in text and '"f":"txn"' in text and '"f":"subscribe"' in text
    assert '"error":["abort","intentional"]' in text
    assert first == second
