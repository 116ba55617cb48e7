"""After a run on several controllers: the controllers' metadata logs and journals read into
the run directory's `quorum.json` (the neutral description and its verdict, see
cluster/controller/quorum_journal.py), which the analysis folds into results.json
(checkers/quorum.py). A report that cannot be collected is logged and leaves no file: the
analysis then says nothing about the quorum rather than something wrong."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

QUORUM_JSON = "quorum.json"


def write_quorum_report(run_dir: Path, report: Mapping[str, Any], log: logging.Logger) -> None:
    path = Path(run_dir) / QUORUM_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    violations = report.get("violations", [])
    if violations:
        log.warning("metadata quorum: %d violation(s): %s", len(violations), "; ".join(f"{v['kind']}: {v['detail']}" for v in violations[:3]))
    else:
        log.info("metadata quorum: %d controllers, no violation", report.get("voters", 0))


def record_quorum(run_dir: Path, data_dirs: Mapping[int, str], log: logging.Logger) -> None:
    """Collect and write the report of a real run's stopped controllers."""
    from cluster.controller.quorum_journal import collect_quorum_report

    try:
        report = collect_quorum_report(data_dirs)
    except Exception:
        log.exception("collecting the controllers' metadata logs failed; no quorum.json")
        return
    write_quorum_report(run_dir, report, log)
