"""`logquake test --workload queue --workload-option txn=true` end to end on three brokers:
a read_committed run is valid and never reads an aborted send; a read_uncommitted run of
the same workload reads them, and its claims do not promise otherwise."""

import json
import sys

import pytest

from harness.history import read_history
from tests.run_logquake import run_command



def run_txn_queue(results, *extra):
    argv = [sys.executable, "-m", "harness.testcmd", "--workload", "queue", "--workload-option", "txn=true",
            "--brokers", "3", "--time-limit", "6", "--quiet-period", "1", "--final-time-limit", "40",
            "--seed", "14", "--results-dir", str(results), *extra]
    out = run_command(argv, timeout_s=300)
    runs = [p.parent for p in results.rglob("results.json")]
    assert len(runs) == 1, (out.stdout, out.stderr[-3000:])
    run_dir = runs[0]
    return run_dir, json.loads((run_dir / "results.json").read_text()), read_history(run_dir / "history.jsonl")


def aborted_and_read(history):
    """(values sent by ops that failed, (key, value) pairs any poll returned)."""
    aborted, read = set(), set()
    for op in history:
        if op.type == "invoke" or op.f not in ("send", "poll", "txn"):
            continue
        for mop in op.value:
            if mop[0] == "send" and op.type == "fail":
                aborted.add((mop[1], mop[2][1] if isinstance(mop[2], list) else mop[2]))
            elif mop[0] == "poll" and len(mop) > 1:
                read.update((key, v) for key, pairs in mop[1].items() for _, v in pairs)
    return aborted, read


def claims(result):
    return {c["name"]: c["holds"] for c in result["claims"]}


def found(result):
    return {a["name"]: a for a in result["anomalies"] if a["count"] > 0}


@pytest.mark.slow
def test_read_committed_txn_run_is_valid_and_reads_no_aborted_send(tmp_path):
    run_dir, result, history = run_txn_queue(tmp_path / "rc")
    assert result["valid"] is True, json.dumps(result)[:3000]
    assert claims(result)["no-aborted-reads"] and claims(result)["transaction-isolation"]
    by = {(op.f, op.type) for op in history if op.type != "invoke"}
    assert {("txn", "ok"), ("txn", "fail"), ("send", "ok"), ("poll", "ok")} <= by
    errors = [op.error for op in history if op.type == "fail" and op.f in ("send", "poll", "txn")]
    assert ["abort", "intentional"] in errors
    aborted, read = aborted_and_read(history)
    assert aborted and read
    assert not aborted & read
    assert "G1a" not in found(result) and "precommitted-read" not in found(result)


@pytest.mark.slow
def test_read_uncommitted_txn_run_reads_aborted_sends_and_does_not_claim_otherwise(tmp_path):
    run_dir, result, history = run_txn_queue(tmp_path / "ru", "--client-config", "isolation.level=read_uncommitted")
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["client_config"]["isolation.level"] == "read_uncommitted"
    assert claims(result)["no-aborted-reads"] is False and claims(result)["transaction-isolation"] is False
    aborted, read = aborted_and_read(history)
    # The final phase reads every partition from its start, aborted records included.
    assert aborted & read
    g1a = found(result).get("G1a")
    assert g1a is not None and g1a["allowed"] is True, json.dumps(result["anomalies"])[:3000]
