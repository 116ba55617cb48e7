"""What a check job found, per run, before claims turn it into a verdict: shared by the fused
pipeline and the one-check-at-a-time pipeline, so both end in the same CheckResult code."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from checkers.result import CheckerError, Witness

# run → (edges [(src, dst, rel, key, value)], vertices {op: (invoke_index, type)}), or the
# same as columns (checkers.cycles.Edges, what the fused pass collects)
Graph = Any


def new_stats() -> dict[str, Any]:
    return {"ops": 0, "rows": 0, "ok_ops": 0, "by_f": {}}


@dataclass
class Findings:
    stats: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(new_stats))
    # run → anomaly → (count, the first witnesses)
    found: dict[str, dict[str, tuple[int, list[Witness]]]] = field(default_factory=lambda: defaultdict(dict))
    graphs: dict[str, Graph] = field(default_factory=dict)
    errors_all_runs: list[CheckerError] = field(default_factory=list)
    errors_by_run: dict[str, list[CheckerError]] = field(default_factory=lambda: defaultdict(list))
    graph_errors: list[CheckerError] = field(default_factory=list)

    def add_stat(self, run: str, f: str, typ: str, ops: int, rows: int) -> None:
        s = self.stats[run]
        s["ops"] += ops
        s["rows"] += rows
        if typ == "ok":
            s["ok_ops"] += ops
        by_type = s["by_f"].setdefault(f, {})
        by_type[typ] = by_type.get(typ, 0) + ops

    def errors(self, run: str) -> list[CheckerError]:
        return list(self.errors_all_runs) + list(self.errors_by_run.get(run, []))
