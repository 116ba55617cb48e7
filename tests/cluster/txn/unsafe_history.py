"""What the unsafe-switch scenarios share: a history recorded as the clients act (the op
formats of the queue workload with txn=true and of the eos workload, harness/history.py),
checked by the real checker pipeline with the claims such a run gets from its spec.

Each scenario records one history per cluster configuration; `check_histories` converts
them to Parquet and checks them in one Spark job, so the switch-off and switch-on runs of a
script cost one job."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.claims import ClaimInputs
from checkers.pipeline import check_runs
from checkers.result import CheckResult
from harness.history import HistoryWriter, Op
from harness.history_parquet import convert_history

# The broker settings every scenario cluster shares: one broker (the bugs need no
# replication), a small __transaction_state, prompt groups (tests/cluster/conftest.py adds
# a zero initial rebalance delay).
SCENARIO_BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
}


@dataclass
class Recorder:
    """Ops in the order the test's clients did them, with real times; `invoke` returns the
    index the matching `complete` names."""

    ops: list[Op] = field(default_factory=list)
    _open: dict[int, tuple[int | str, str]] = field(default_factory=dict)

    def _add(self, typ: str, process: int | str, f: str, value: Any, error: Any = None, **extra: Any) -> int:
        index = len(self.ops)
        self.ops.append(Op(index, time.monotonic_ns(), typ, process, f, value, error, dict(extra)))  # type: ignore[arg-type]
        return index

    def invoke(self, process: int, f: str, value: Any, **extra: Any) -> int:
        index = self._add("invoke", process, f, value, **extra)
        self._open[index] = (process, f)
        return index

    def complete(self, invocation: int, typ: str, value: Any, error: Any = None, **extra: Any) -> int:
        process, f = self._open.pop(invocation)
        return self._add(typ, process, f, value, error, **extra)

    def op(self, process: int, f: str, invoke_value: Any, typ: str, value: Any, **extra: Any) -> int:
        return self.complete(self.invoke(process, f, invoke_value, **extra), typ, value, **extra)

    def write(self, path: Path) -> Path:
        assert not self._open, f"ops never completed: {self._open}"
        with HistoryWriter(path) as writer:
            for op in self.ops:
                writer.append(op)
        return path


def poll_value(records: dict[int, list[tuple[int, int]]]) -> list[list[Any]]:
    """A completed poll micro-op: key → [[offset, value], ...]."""
    return ["poll", {str(k): [[o, v] for o, v in rs] for k, rs in records.items()}]


def queue_txn_inputs(cluster_config: dict[str, str], brokers: int = 1) -> ClaimInputs:
    """The claims of a `--workload queue --workload-option txn=true` run on the bundled
    cluster with these broker settings (read_committed consumers, acks=all)."""
    spec = {"workload": "queue", "brokers": brokers,
            "client_config": {"acks": "all", "isolation.level": "read_committed"},
            "cluster_config": dict(cluster_config),
            "workload_options": {"txn": True, "replication_factor": brokers}}
    return ClaimInputs.from_spec_json(spec)


def eos_inputs(cluster_config: dict[str, str], brokers: int = 1) -> ClaimInputs:
    """The claims of a `--workload eos` run (transactional copiers, read_committed) on the
    bundled cluster with these broker settings."""
    spec = {"workload": "eos", "brokers": brokers,
            "client_config": {"acks": "all", "isolation.level": "read_committed", "enable.auto.commit": "false"},
            "cluster_config": dict(cluster_config),
            "workload_options": {"partitions": 1, "replication_factor": brokers}}
    return ClaimInputs.from_spec_json(spec)


def check_histories(runs: dict[str, tuple[Recorder, ClaimInputs]], root: Path, spark: Any) -> dict[str, CheckResult]:
    parquet = root / "parquet"
    for run, (recorder, _) in runs.items():
        convert_history(recorder.write(root / f"{run}.jsonl"), parquet, run)
    return check_runs(parquet, {run: inputs for run, (_, inputs) in runs.items()}, spark)


def anomaly_names(result: CheckResult, *, allowed: bool | None = None) -> set[str]:
    return {a.name for a in result.anomalies if allowed is None or a.allowed == allowed}


def describe(result: CheckResult) -> str:
    """For assertion messages: the verdict and each anomaly with its first witness."""
    parts = [f"valid={result.valid}"]
    for a in result.anomalies:
        first = a.witnesses[0].detail if a.witnesses else None
        parts.append(f"{a.name} x{a.count} allowed={a.allowed} {first}")
    return "; ".join(parts)
