"""`logquake hunt` and the transaction bug switches, on simulated runs of the transactional
workloads (queue `txn=true` and eos, whose transactional producer is the kio one): with
`transaction.lso.ignore.open.transactions=true` the hunt stops at its first run (read_committed
polls read records of open transactions that later abort: G1a), shrinks it and replays it
invalid; the same hunt on the safe cluster finds nothing. Partition verification's hunt (link
loss on the client's link to its busiest leader, the live target client>primary) finds it in a
few runs: a CI-sized form (seed 1, three runs and no shrink) here; the full hunts
with 10 safe runs each, and the generation check's (stalled eos copiers), take minutes on the
shared machine: soak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.hunt import describe_fault
from harness.hunt_switches import SWITCH_HUNTS, without_switch
from logquake.strategies import Fault

TXN_SWITCHES = sorted(s for s in SWITCH_HUNTS if s.startswith("transaction."))


def _hunt(tmp_path: Path, argv: list[str]) -> tuple[int, dict | None]:
    code = main(["hunt", *argv, "--no-database", "--results-dir", str(tmp_path)])
    found = list(tmp_path.glob("hunt/*/hunt.json"))
    return code, (json.loads(found[0].read_text()) if found else None)


def _found_and_survived(switch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *, max_shrinks: int,
                        safe_examples: int) -> dict:
    code, hunt = _hunt(tmp_path / "unsafe", [*SWITCH_HUNTS[switch], "--seed", "1", "--budget", "300",
                                             "--max-shrinks", str(max_shrinks)])
    assert code == 1 and hunt is not None, capsys.readouterr().out
    assert hunt["replay_verdict"] is False
    replay = json.loads((Path(hunt["run_dir"]) / "results.json").read_text())
    assert replay["simulated"] is True and replay["valid"] is False
    code, safe = _hunt(tmp_path / "safe", [*without_switch(SWITCH_HUNTS[switch]), "--seed", "1", "--budget", "300",
                                           "--max-examples", str(safe_examples)])
    assert code == 0 and safe is None, capsys.readouterr().out
    return {"hunt": hunt, "replay": replay}


def test_every_txn_switch_has_a_hunt() -> None:
    assert TXN_SWITCHES == ["transaction.lso.ignore.open.transactions", "transaction.offset.commit.skip.generation.check",
                            "transaction.partition.verification.enable"]
    assert without_switch(SWITCH_HUNTS[TXN_SWITCHES[0]])[-2:] == ["--max-faults", "1"]
    verification = SWITCH_HUNTS["transaction.partition.verification.enable"]
    assert verification[verification.index("--live-links") + 1] == "client>primary"
    assert "transaction.partition.verification.enable=false" not in without_switch(verification)


def test_a_one_fault_hunt_finds_a_late_produce_on_the_clients_link_to_its_leader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The verification hunt, seed 1, three runs and no shrink: its third run loses on the
    client's link to the busiest leader (deterministic: the budget is counts), and the replay
    of that schedule is invalid."""
    argv = SWITCH_HUNTS["transaction.partition.verification.enable"]
    code, hunt = _hunt(tmp_path, [*argv, "--seed", "1", "--budget", "600", "--max-examples", "3", "--max-shrinks", "0"])
    assert code == 1 and hunt is not None, capsys.readouterr().out
    assert hunt["first_failure_example"] == 3 and hunt["replay_verdict"] is False
    (fault,) = [Fault.from_json(f) for f in hunt["faults"]]
    assert describe_fault(fault) == "link-loss[client>primary] loss=0.46 1.9+1s"
    replay = json.loads((Path(hunt["run_dir"]) / "results.json").read_text())
    assert {a["name"] for a in replay["anomalies"] if not a["allowed"]} & {"G1a", "unseen"}, replay["anomalies"]


def test_a_hunt_finds_reads_of_open_transactions_and_the_safe_cluster_survives_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = _found_and_survived("transaction.lso.ignore.open.transactions", tmp_path, capsys, max_shrinks=1,
                                safe_examples=2)
    assert found["hunt"]["first_failure_example"] == 1, "no fault is needed: the first run fails"
    bad = {a["name"] for a in found["replay"]["anomalies"] if not a["allowed"]}
    assert "G1a" in bad, bad


@pytest.mark.soak
@pytest.mark.parametrize("switch", TXN_SWITCHES)
def test_each_txn_switch_is_found_by_a_hunt_and_the_safe_cluster_survives_10_runs(
        switch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _found_and_survived(switch, tmp_path, capsys, max_shrinks=10, safe_examples=10)
