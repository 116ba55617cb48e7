"""The metadata quorum's verdict in results.json: a run of the bundled cluster with several
controllers leaves `quorum.json` in its run directory (written by the harness from the
controllers' metadata logs and journals after the run, judged by cluster/quorum/checks.py
and the partition leader-epoch rule). Each kind of violation found there becomes an anomaly
next to the client-side ones, never allowed: no configuration claims that the metadata may
have two leaders in an epoch or lose a committed record.

Pure: reads the neutral file, imports nothing of the cluster.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from checkers.result import Anomaly, CheckResult, Witness, merge_valid

QUORUM_JSON = "quorum.json"
MAX_WITNESSES = 5

EXPLANATIONS = {
    "two-leaders-in-epoch": "two controllers led (or were followed as leader) in the same quorum epoch: split-brain metadata",
    "epoch-two-histories": "two controllers' metadata logs hold different records at one offset of one epoch",
    "epoch-went-back": "a controller's quorum epoch decreased",
    "committed-disagree": "two controllers committed different metadata records at the same offset",
    "committed-lost": "a committed metadata record is on fewer than a majority of the controllers at the end",
    "acknowledged-lost": "a metadata append answered as committed is not committed at its offset",
    "leader-epoch-reused": "a partition leader epoch was given to two different leaders",
    "leader-epoch-went-back": "a partition's leader epoch decreased in the committed metadata",
}


class QuorumReportError(ValueError):
    """quorum.json that cannot be read; names the file and what is wrong."""


def read_quorum_report(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's quorum.json, or None when the run had no quorum (one controller)."""
    path = Path(run_dir) / QUORUM_JSON
    if not path.exists():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise QuorumReportError(f"{path}: not JSON ({error})") from None
    if not isinstance(report, dict) or not isinstance(report.get("violations"), list):
        raise QuorumReportError(f"{path}: no 'violations' list")
    return report


def quorum_anomalies(report: dict[str, Any]) -> list[Anomaly]:
    by_kind: dict[str, list[str]] = defaultdict(list)
    for violation in report["violations"]:
        by_kind[str(violation.get("kind"))].append(str(violation.get("detail")))
    return [Anomaly(name=f"metadata-{kind}", count=len(details), allowed=False,
                    explanation=EXPLANATIONS.get(kind, f"metadata quorum check {kind}"),
                    witnesses=[Witness([], {"detail": d}) for d in details[:MAX_WITNESSES]], violates=["metadata-quorum-safety"])
            for kind, details in sorted(by_kind.items())]


def add_quorum_verdict(result: CheckResult, run_dir: str | Path) -> CheckResult:
    """Fold the run's quorum.json (if any) into `result`: its violations as anomalies, the
    verdict invalid when there are any, and a summary under stats["metadata_quorum"]."""
    report = read_quorum_report(run_dir)
    if report is None:
        return result
    anomalies = quorum_anomalies(report)
    result.anomalies.extend(anomalies)
    if anomalies:
        result.valid = merge_valid([result.valid, False])
    result.stats["metadata_quorum"] = {
        "controllers": report.get("voters"),
        "violations": len(report["violations"]),
        "epochs_led": sorted({int(t[0]) for n in report.get("nodes", []) for t in n.get("transitions", []) if t[1] == "leader"}),
        "partition_records": len(report.get("partition_records", [])),
    }
    return result
