"""Parquet histories in, one CheckResult per run out.

By default the fused pass (fused.py) checks every run: a small pre-pass, then one shuffle
of the history by (run, key) in which every per-key check, the dependency edges and the run
statistics are computed together; so one history or a thousand cost about the same fixed
overhead. A check that raises on some key reports its error for that run and the others
still report; the error makes the verdict "unknown", never a crash.

`findings_of` swaps the detector for another one with the same answer (the tests' DataFrame
oracle, tests/checkers/dataframe_oracle/); claims, cycle search and verdicts stay these.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from checkers import cycles, eos
from checkers import fused as fused_pass
from checkers.claims import ClaimInputs, claims_for, classify
from checkers.explain import explain
from checkers.findings import Findings
from checkers.frames import load_history
from checkers.progress import FinalPhase, progress_errors
from checkers.result import Anomaly, CheckerError, CheckResult, Witness, merge_valid

MAX_WITNESSES = 8
HISTORY_PARQUET = "history.parquet"
# Checks that do not apply to a workload: in delivery runs consumers process rather than
# poll, so "never polled" says nothing; `unprocessed` judges them instead.
NOT_APPLICABLE: dict[str, frozenset[str]] = {"delivery": frozenset({"unseen"})}

FindingsOf = Callable[[DataFrame], Findings]  # the history's rows → what the detector found


def history_paths(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """A run directory (its history.parquet/), a Parquet directory or file, or a list of them."""
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    out = []
    for item in items:
        path = Path(item)
        if (path / HISTORY_PARQUET).is_dir():
            path = path / HISTORY_PARQUET
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such history (expected a run directory with {HISTORY_PARQUET}/ "
                                    "or a Parquet path)")
        out.append(str(path))
    return out


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    head = text[0] if text else ""
    return f"{type(exc).__name__}: {head}"[:2000]


def check_runs(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
               inputs: ClaimInputs | Mapping[str, ClaimInputs], spark: SparkSession,
               *, realtime: bool = True, findings_of: FindingsOf = fused_pass.findings,
               final_phases: FinalPhase | Mapping[str, FinalPhase] | None = None) -> dict[str, CheckResult]:
    """Check every run in the given Parquet histories in one job; run id → CheckResult.

    `inputs` is one ClaimInputs for all runs or a mapping run id → ClaimInputs.
    """
    started = time.perf_counter()
    history = load_history(spark, history_paths(source))
    found = findings_of(history)
    _add_eos_findings(history, found)
    return _results(found, inputs, realtime=realtime, started=started, final_phases=final_phases or {})


def _add_eos_findings(history: DataFrame, found: Findings) -> None:
    """The exactly-once checks (checkers/eos.py) of the runs with copy ops: a question across
    keys, so a job of its own after the per-key pass; if it raises, those runs are unknown."""
    try:
        eos.add_findings(history, found)
    except Exception as exc:
        for run in eos.eos_runs(found):
            found.errors_by_run[run].append(CheckerError("eos", _describe(exc)))


def _results(findings: Findings, inputs: ClaimInputs | Mapping[str, ClaimInputs], *, realtime: bool,
             started: float, final_phases: FinalPhase | Mapping[str, FinalPhase]) -> dict[str, CheckResult]:
    stats = findings.stats
    results: dict[str, CheckResult] = {}
    for run in sorted(stats):
        run_inputs = inputs if isinstance(inputs, ClaimInputs) else inputs.get(run)
        if run_inputs is None:
            results[run] = CheckResult(valid="unknown", errors=[CheckerError("claims", f"no claim inputs for run {run!r}")],
                                       stats=stats[run])
            continue
        errors = findings.errors(run) + list(findings.graph_errors)
        found: dict[str, tuple[int, list[Witness]]] = dict(findings.found.get(run, {}))
        if not any(e.checker == "cycles" for e in errors):
            try:
                graph = findings.graphs.get(run, ([], {}))
                if isinstance(graph, cycles.Edges):  # the fused pass's columns
                    report = cycles.search(graph, ww_deps=run_inputs.ww_deps, realtime=realtime)
                else:
                    report = cycles.search(*graph, ww_deps=run_inputs.ww_deps, realtime=realtime)
                stats[run]["graph_vertices"] = report.vertices
                stats[run]["graph_edges"] = report.edges
                per_type: dict[str, list[cycles.Cycle]] = defaultdict(list)
                for cycle in report.cycles:
                    per_type[cycle.anomaly].append(cycle)
                for name, found_cycles in per_type.items():
                    found_cycles.sort(key=lambda c: (len(c.ops), c.ops))
                    found[name] = (len(found_cycles), [Witness(op_indices=c.ops, detail={"steps": c.steps})
                                                       for c in found_cycles[:MAX_WITNESSES]])
            except Exception as exc:
                errors.append(CheckerError("cycles", _describe(exc) + "\n" + traceback.format_exc(limit=3)))
        final_phase = final_phases if isinstance(final_phases, FinalPhase) else final_phases.get(run)
        results[run] = _result(run_inputs, found, errors, stats[run], final_phase)
    elapsed = time.perf_counter() - started
    for result in results.values():
        result.stats["check_s"] = round(elapsed, 3)
    return results


WRITE_FS = ("send", "txn")  # the ops that write


def _result(inputs: ClaimInputs, found: dict[str, tuple[int, list[Witness]]], errors: list[CheckerError],
            stats: dict[str, Any], final_phase: FinalPhase | None = None) -> CheckResult:
    claims = claims_for(inputs)
    skip = NOT_APPLICABLE.get(inputs.workload, frozenset())
    anomalies = []
    for name in sorted(found):
        if name in skip:
            continue
        count, witnesses = found[name]
        allowed, violated = classify(name, inputs, claims)
        anomalies.append(Anomaly(name=name, count=count, allowed=allowed, explanation=explain(name),
                                 witnesses=witnesses, violates=violated))
    if stats.get("ok_ops", 0) == 0:
        errors = errors + [CheckerError("history", "no client operation completed ok: nothing to judge")]
    elif not anomalies and not any(stats.get("by_f", {}).get(f, {}).get(t, 0) for f in WRITE_FS for t in ("ok", "info")):
        # Polls of an empty log are all ok and all consistent: a run in which the cluster
        # (or the client configuration) definitely refused every write must not pass as
        # valid. (Info writes may be in the log, and reading them tests order and
        # duplicates; a read of a failed write is itself an anomaly, G1a.)
        errors = errors + [CheckerError("history", "every send failed (no send or txn op completed ok or info): "
                                                   "nothing was written, so no claim was exercised")]
    # A run that made no progress (Jepsen's stats check) exercised nothing: unknown.
    errors = errors + progress_errors(stats.get("by_f", {}), final_phase)
    verdicts = [False if not a.allowed else True for a in anomalies]
    verdicts += ["unknown"] * len(errors)
    return CheckResult(valid=merge_valid(verdicts), claims=claims, anomalies=anomalies, errors=errors, stats=stats)


def check_run(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], inputs: ClaimInputs,
              spark: SparkSession, *, realtime: bool = True, findings_of: FindingsOf = fused_pass.findings,
              final_phase: FinalPhase | None = None) -> CheckResult:
    """Check the one run in `source` (a run directory or Parquet path(s)). `final_phase`: the
    ops after the final heal, if the run had one (checkers/progress.py)."""
    try:
        results = check_runs(source, inputs, spark, realtime=realtime, findings_of=findings_of,
                             final_phases=final_phase)
    except Exception as exc:
        return CheckResult(valid="unknown", claims=claims_for(inputs),
                           errors=[CheckerError("pipeline", _describe(exc))])
    if len(results) != 1:
        return CheckResult(valid="unknown", claims=claims_for(inputs),
                           errors=[CheckerError("pipeline", f"expected one run in {source}, found {sorted(results)}")])
    return next(iter(results.values()))


def check_many(sources: Mapping[str, str | os.PathLike[str]], inputs: Mapping[str, ClaimInputs],
               spark: SparkSession, *, realtime: bool = True, findings_of: FindingsOf = fused_pass.findings,
               final_phases: Mapping[str, FinalPhase] | None = None) -> dict[str, CheckResult]:
    """Check many runs, run id → its source (a run directory or Parquet path holding that run
    only), in one job; every given run id gets a result, as `check_run` would give it alone.
    A failure of the job itself makes each of them unknown with that error."""
    try:
        results = check_runs([sources[run] for run in sources], dict(inputs), spark, realtime=realtime,
                             findings_of=findings_of, final_phases=dict(final_phases or {}))
    except Exception as exc:
        return {run: CheckResult(valid="unknown", claims=claims_for(inputs[run]),
                                 errors=[CheckerError("pipeline", _describe(exc))]) for run in sources}
    return {run: results[run] if run in results else
            CheckResult(valid="unknown", claims=claims_for(inputs[run]),
                        errors=[CheckerError("pipeline", f"expected one run in {source}, found []")])
            for run, source in sources.items()}
