"""`logquake analyze <run-dir>`: check (or re-check) a recorded run.

Converts the run's history.jsonl to history.parquet/, derives the claims from spec.json,
runs the checkers on Spark, writes results.json and prints the verdict. Exit codes: 0 valid,
1 invalid, 2 unknown, 254 for a corrupt history or bad arguments (the message names the
problem and, for a history, the line).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness import store
from harness.history import HistoryFormatError
from harness.history_parquet import convert_history, remove_other_runs

EXIT_BAD_ARGUMENTS = 254
HISTORY_JSONL = "history.jsonl"
HISTORY_PARQUET = "history.parquet"
SPEC_JSON = "spec.json"
RESULTS_JSON = "results.json"
CLUSTER_CONFIG_JSON = "cluster-config.json"  # harness/cluster_settings.py: an external cluster's settings


class AnalyzeError(ValueError):
    """Bad arguments or inputs; the message says what is wrong."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("analyze", help="check a recorded run's history and write results.json",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="run directory holding spec.json and history.jsonl")
    parser.add_argument("--spark-master", default=None, help="Spark master URL (default local[*])")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, repeatable (e.g. spark.driver.memory=4g)")
    parser.add_argument("--junit-xml", default=None, metavar="PATH",
                        help="also write the verdict as JUnit XML for CI (a testcase per claim)")
    parser.set_defaults(handler=handle)


def parse_spark_conf(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise AnalyzeError(f"--spark-conf {item!r} is not KEY=VALUE")
        conf[key.strip()] = value.strip()
    return conf


def run_id_for(run_dir: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", run_dir.resolve().name) or "run"
    return name if name[0].isalnum() else f"r{name}"


def analyze_run(run_dir: str | Path, *, spark_master: str | None = None,
                spark_conf: dict[str, str] | None = None, notes: list[str] | None = None):
    """Convert, check and write results.json; returns the CheckResult. Raises AnalyzeError or
    HistoryFormatError for bad inputs; a checker that fails makes the verdict unknown."""
    from checkers.claims import ClaimInputError, ClaimInputs, with_faults
    from checkers.pipeline import check_run
    from checkers.progress import FinalPhase
    from checkers.spark import make_spark

    run_path = Path(run_dir)
    if not run_path.is_dir():
        raise AnalyzeError(f"{run_path}: not a directory")
    history = run_path / HISTORY_JSONL
    if not history.is_file():
        raise AnalyzeError(f"{history}: no history to analyse")
    spec_path = run_path / SPEC_JSON
    if not spec_path.is_file():
        raise AnalyzeError(f"{spec_path}: missing (the claims under test come from it)")
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AnalyzeError(f"{spec_path}: {exc}") from None
    cluster_settings = _cluster_settings(run_path / CLUSTER_CONFIG_JSON)
    try:
        inputs = ClaimInputs.from_spec_json(spec, cluster_settings)
    except ClaimInputError as exc:
        raise AnalyzeError(f"{spec_path}: {exc}") from None
    run_id = run_id_for(run_path)
    # history.parquet/ is derived from history.jsonl and partitioned by run id, which comes
    # from the directory's name: a copied or renamed run directory still holds the old name's
    # partition, which must go or the check sees two runs.
    remove_other_runs(run_path / HISTORY_PARQUET, run_id)
    stats = convert_history(history, run_path / HISTORY_PARQUET, run_id)
    inputs = with_faults(inputs, stats.faults)
    if notes is not None:
        if stats.torn_tail:
            notes.append(f"the last line of {history} was torn (an interrupted writer) and was skipped")
        if stats.incomplete_ops:
            notes.append(f"{stats.incomplete_ops} operation(s) never completed; counted as unknown (info) outcomes")
    spark = make_spark(spark_master=spark_master, spark_conf=spark_conf, small=stats.rows < 2_000_000)
    final_phase = None if stats.final_by_f is None else FinalPhase(stats.final_by_f)
    result = check_run(run_path, inputs, spark, final_phase=final_phase)
    result.stats.setdefault("history_ops", stats.ops)
    result.stats.setdefault("torn_tail", stats.torn_tail)
    result.stats.setdefault("incomplete_ops", stats.incomplete_ops)
    result.stats.setdefault("faults", sorted(stats.faults))
    if isinstance(spec, dict) and spec.get("bootstrap_servers") is not None:
        result.stats["cluster_settings"] = _settings_stats(cluster_settings, inputs)
    throughput = _throughput(history, run_path / RESULTS_JSON)
    if throughput is not None:
        result.stats["throughput"] = throughput
    result.save(run_path / RESULTS_JSON)
    return result


def _cluster_settings(path: Path) -> dict | None:
    """cluster-config.json, or None when absent or unreadable (the claims then assume the
    readings that excuse nothing, and say so)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return raw if isinstance(raw, dict) else None


def _settings_stats(settings: dict | None, inputs: Any) -> dict:
    """results.json's account of an external cluster's settings: the values the claims used,
    where they came from, and the typed settings that were not applied."""
    settings = settings or {}
    return {
        "source": inputs.settings_source,
        "min.insync.replicas": inputs.min_insync_replicas,
        "unclean.leader.election.enable": inputs.unclean_leader_election,
        "replication_factor": inputs.replication_factor,
        "requested_topic_config": settings.get("requested_topic_config", {}),
        "not_applied": settings.get("not_applied", {}),
        "warnings": settings.get("warnings", []),
    }


def _throughput(history: Path, previous_results: Path) -> dict | None:
    """Per-phase throughput (harness/report/phases.py) of the history, so a re-analysis keeps
    what `logquake test` put in results.json; if it cannot be computed, the earlier figure."""
    from harness.history import iter_history
    from harness.report.phases import phase_throughput

    try:
        return phase_throughput(iter_history(history)).as_json()
    except Exception:
        try:
            return json.loads(previous_results.read_text(encoding="utf-8"))["stats"]["throughput"]
        except Exception:
            return None


def analyze(run_dir: str | Path, *, spark_master: str | None = None, spark_conf: dict[str, str] | None = None,
            out=None) -> int:
    """analyze_run, then print the notes and the verdict; returns the exit code."""
    # Looked up per call: a default bound at import would keep whatever stdout was then.
    out = sys.stdout if out is None else out
    notes: list[str] = []
    result = analyze_run(run_dir, spark_master=spark_master, spark_conf=spark_conf, notes=notes)
    for note in notes:
        print(f"note: {note}", file=out)
    print_verdict(result, out)
    return result.exit_code


def print_verdict(result, out) -> None:
    verdict = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}[result.valid]
    print(f"verdict: {verdict}", file=out)
    for anomaly in result.anomalies:
        status = "allowed" if anomaly.allowed else "BAD"
        broken = f" (breaks {', '.join(anomaly.violates)})" if anomaly.violates else ""
        first = anomaly.witnesses[0] if anomaly.witnesses else None
        example = f"; e.g. ops {first.op_indices} {json.dumps(first.detail)[:200]}" if first else ""
        print(f"  {anomaly.name}: {anomaly.count} [{status}]{broken} — {anomaly.explanation}{example}", file=out)
    for error in result.errors:
        print(f"  checker error in {error.checker}: {error.error.splitlines()[0] if error.error else ''}", file=out)


def handle(args: argparse.Namespace) -> int:
    from checkers.spark import SparkMasterConflict
    from harness.junit import now_utc

    started_at = now_utc()
    try:
        conf = parse_spark_conf(args.spark_conf)
        code = analyze(args.run_dir, spark_master=args.spark_master, spark_conf=conf)
    except (AnalyzeError, HistoryFormatError, SparkMasterConflict) as exc:
        print(f"logquake analyze: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    _write_report(Path(args.run_dir))
    if args.junit_xml is not None:
        _write_junit(Path(args.run_dir), args.junit_xml, started_at)
    return code


def _write_junit(run_dir: Path, path: str, started_at) -> None:
    """The re-checked run as JUnit XML (harness/junit.py), named, seeded and reproducible
    from its spec.json."""
    from harness.junit import RunRecord, load_result, now_utc, suite_for_run, write_junit

    spec, _ = store.read_json_object(run_dir / SPEC_JSON)
    spec = spec or {}
    seed = spec.get("seed")
    record = RunRecord(name=str(spec.get("name") or run_dir.name), status="checked", started_at=started_at,
                       elapsed_s=(now_utc() - started_at).total_seconds(), message="re-checked by logquake analyze",
                       run_dir=run_dir.resolve(), seed=seed if isinstance(seed, int) else None,
                       reproduce_command=spec.get("command") if isinstance(spec.get("command"), str) else None,
                       result=load_result(run_dir))
    try:
        print(f"junit: {write_junit(path, [suite_for_run(record)])}")
    except OSError as exc:
        print(f"logquake analyze: cannot write the JUnit file {path}: {exc}", file=sys.stderr)


def _write_report(run_dir: Path) -> None:
    """The re-checked run gets a fresh report (and its store a fresh index). A report that
    cannot be written is said, but does not change the verdict's exit code."""
    from harness.report import write_index, write_report

    try:
        print(f"report: {write_report(run_dir)}")
        root = store.results_root_of(run_dir.resolve())
        if root is not None:
            print(f"index: {write_index(root)}")
    except Exception as exc:
        print(f"logquake analyze: could not write the report: {type(exc).__name__}: {exc}", file=sys.stderr)
