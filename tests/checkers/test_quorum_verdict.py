"""The metadata quorum's checks in results.json: quorum.json's violations become anomalies
next to the client-side ones (never allowed: the verdict turns invalid), a clean report adds
only its summary, and a run without one (a single controller) is left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers.quorum import QUORUM_JSON, QuorumReportError, add_quorum_verdict
from checkers.result import Anomaly, CheckResult


def write(run_dir: Path, violations: list[dict]) -> None:
    report = {"voters": 3, "valid": not violations, "violations": violations, "partition_records": [[5, "t", 0, 1, 3]],
              "nodes": [{"node_id": 1000, "transitions": [[1, "leader", 1000], [2, "follower", 1001]]},
                        {"node_id": 1001, "transitions": [[2, "leader", 1001]]}]}
    (run_dir / QUORUM_JSON).write_text(json.dumps(report), encoding="utf-8")


def test_violations_become_anomalies_and_the_run_invalid(tmp_path: Path) -> None:
    write(tmp_path, [{"kind": "two-leaders-in-epoch", "detail": "epoch 2: leader 1000 (node 1000 led); leader 1001 (node 1001 led)"},
                     {"kind": "committed-lost", "detail": "offset 7 is on 1 of 3 voters"},
                     {"kind": "committed-lost", "detail": "offset 8 is on 1 of 3 voters"}])
    client_side = Anomaly("duplicate", 1, True, "a value was read twice")
    result = add_quorum_verdict(CheckResult(valid=True, anomalies=[client_side]), tmp_path)
    assert result.valid is False
    names = {a.name: a for a in result.anomalies}
    assert names["metadata-committed-lost"].count == 2 and not names["metadata-committed-lost"].allowed
    assert names["metadata-two-leaders-in-epoch"].witnesses[0].detail["detail"].startswith("epoch 2")
    assert names["duplicate"] is client_side
    assert result.stats["metadata_quorum"] == {"controllers": 3, "violations": 3, "epochs_led": [1, 2], "partition_records": 1}


def test_a_clean_report_keeps_the_verdict(tmp_path: Path) -> None:
    write(tmp_path, [])
    result = add_quorum_verdict(CheckResult(valid="unknown"), tmp_path)
    assert result.valid == "unknown" and not result.anomalies
    assert result.stats["metadata_quorum"]["violations"] == 0


def test_no_report_no_change(tmp_path: Path) -> None:
    result = add_quorum_verdict(CheckResult(valid=True), tmp_path)
    assert result.valid is True and "metadata_quorum" not in result.stats


def test_a_damaged_report_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / QUORUM_JSON).write_text("{", encoding="utf-8")
    with pytest.raises(QuorumReportError, match="quorum.json: not JSON"):
        add_quorum_verdict(CheckResult(valid=True), tmp_path)
