"""What the bundled cluster's own logs say went wrong inside it, as an anomaly of the run.

A history can be clean while a node hit a bug: a request handler that raised (the broker
closes that connection and the client retries elsewhere), a broker or controller process
ended by an exception, a controller halted on a fatal fault, an exception nothing caught.
Jepsen's tests scan their nodes' logs for crashes the same way (`checker/log-file-pattern`),
and so does this, over the node logs the real back ends leave in the run directory
(`cluster/*.log`: the local processes' logs and the Docker back end's containers'; a
Compose file's containers log to Docker, not here). Every error found is
`node-error`, never allowed: no configuration claims that the system may fail inside, and
a bug switch reproduces a bug, it excuses nothing (checkers/claims.py). What Kafka does on
purpose is not an error here: a broker whose every log directory failed halting (a disk
fault's documented effect) logs at ERROR without any of these marks.

The marks are the log lines the cluster writes for those events (cluster/runtime/
connection.py, broker_main.py, controller/main.py, controller_halt.py, and asyncio's own
handler for an exception nobody retrieved) and any Python traceback not under them;
tests/checkers/test_node_logs.py produces each from the real code. Simulated runs, Compose
runs and external clusters leave no node logs here: the stats say the logs were not read.

Pure: reads files, imports nothing of the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkers.result import Anomaly, CheckResult, Witness, merge_valid

NODE_LOG_DIR = "cluster"
MAX_WITNESSES = 10
ANOMALY = "node-error"
# "2026-11-28 08:05:53,529 ERROR cluster.runtime.broker_main: broker 0 failed"
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<logger>[\w.]+): (?P<message>.*)$")
_TRACEBACK = "Traceback (most recent call last):"
# (kind, what the line means); matched against a record's message, in order.
MARKS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("request-handler-error", re.compile(r"handling api \d+ v\d+ failed"),
     "a request handler raised; the broker closed that client's connection"),
    ("process-failed", re.compile(r"^(broker|controller) \d+ failed$"), "the process ended on an exception"),
    ("controller-halted", re.compile(r"^fatal controller fault"),
     "the controller halted on committed metadata it could not apply"),
)
UNCAUGHT = ("uncaught-exception", "an exception nothing handled (asyncio's handler, or a traceback on the process's output)")


@dataclass(frozen=True)
class NodeError:
    file: str  # the log's name under cluster/
    line: int  # 1-based line of the record (or of the bare traceback)
    kind: str
    text: str  # the record's message
    exception: str  # the traceback's last line, "" if none followed

    def as_detail(self) -> dict[str, Any]:
        return {"file": f"{NODE_LOG_DIR}/{self.file}", "line": self.line, "kind": self.kind, "text": self.text,
                "exception": self.exception}


def node_log_files(run_dir: str | Path) -> list[Path]:
    directory = Path(run_dir) / NODE_LOG_DIR
    return sorted(p for p in directory.glob("*.log") if p.is_file()) if directory.is_dir() else []


def scan_log(path: Path) -> list[NodeError]:
    """Every error mark in one node log, with the exception that followed it."""
    errors: list[NodeError] = []
    current: NodeError | None = None  # the error whose traceback lines may follow
    in_traceback = False
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, raw in enumerate(lines, 1):
            line = raw.rstrip("\n")
            record = _RECORD.match(line)
            if record is not None:
                in_traceback = False
                current = _classify(path.name, number, record)
                if current is not None:
                    errors.append(current)
                continue
            if line.startswith(_TRACEBACK):
                in_traceback = True
                if current is None:
                    # Under a record that marks nothing, or on the process's own output: which
                    # one cannot be told apart, so the traceback stands for itself.
                    current = NodeError(path.name, number, UNCAUGHT[0], line, "")
                    errors.append(current)
                continue
            if in_traceback and current is not None and line and not line.startswith((" ", "\t")):
                # The traceback's last line names the exception ("OSError: ..."); a chained
                # one ("During handling of the above exception ...", another traceback) stays
                # with the same error and ends with the last exception's.
                updated = NodeError(current.file, current.line, current.kind, current.text, line.strip())
                errors[errors.index(current)] = updated
                current, in_traceback = updated, False
    return errors


def _classify(name: str, number: int, record: re.Match[str]) -> NodeError | None:
    message = record["message"]
    for kind, pattern, _ in MARKS:
        if pattern.search(message):
            return NodeError(name, number, kind, message, "")
    if record["logger"] == "asyncio" and record["level"] in ("ERROR", "CRITICAL"):
        return NodeError(name, number, UNCAUGHT[0], message, "")
    return None


def node_log_anomalies(errors: list[NodeError]) -> list[Anomaly]:
    if not errors:
        return []
    meanings = {kind: meaning for kind, _, meaning in MARKS} | {UNCAUGHT[0]: UNCAUGHT[1]}
    kinds = sorted({e.kind for e in errors})
    explanation = ("the cluster's own logs show an internal error: "
                   + "; ".join(f"{kind} ({meanings[kind]})" for kind in kinds))
    return [Anomaly(name=ANOMALY, count=len(errors), allowed=False, explanation=explanation,
                    witnesses=[Witness([], e.as_detail()) for e in errors[:MAX_WITNESSES]], violates=["node-logs-clean"])]


def add_node_log_verdict(result: CheckResult, run_dir: str | Path) -> CheckResult:
    """Fold the errors in the run's node logs into `result`: one `node-error` anomaly, the
    verdict invalid when there is any, and what was read under stats["node_logs"]."""
    files = node_log_files(run_dir)
    if not files:
        result.stats["node_logs"] = {"files": 0, "note": "no node logs in the run directory (an external cluster, a "
                                                          "Compose file's containers or a simulated run): not read"}
        return result
    errors = [error for path in files for error in scan_log(path)]
    anomalies = node_log_anomalies(errors)
    result.anomalies.extend(anomalies)
    if anomalies:
        result.valid = merge_valid([result.valid, False])
    result.stats["node_logs"] = {"files": len(files), "errors": len(errors),
                                 "kinds": sorted({e.kind for e in errors})}
    return result
