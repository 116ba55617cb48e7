"""`logquake analyze <run-dir>...`: check (or re-check) recorded runs.

Converts each run's history.jsonl to history.parquet/, derives the claims from spec.json,
runs the checkers on Spark, writes results.json and the report and prints the verdict.
Several run directories, a suite directory or a results directory are checked together: one
Spark session and one job over all their histories, each run's results.json and report
written as if it had been analysed alone. Exit codes: 0 valid, 1 invalid, 2 unknown, 254 for
a corrupt history or bad arguments (the message names the problem and, for a history, the
line); for many runs the worst of theirs (1, then 254, then 2).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import store
from harness.history import HistoryFormatError
from harness.history_parquet import ConversionStats, convert_history, remove_other_runs

EXIT_BAD_ARGUMENTS = 254
HISTORY_JSONL = "history.jsonl"
HISTORY_PARQUET = "history.parquet"
SPEC_JSON = "spec.json"
RESULTS_JSON = "results.json"
CLUSTER_CONFIG_JSON = "cluster-config.json"  # harness/cluster_settings.py: an external cluster's settings
SMALL_ROWS = 2_000_000  # below this many rows in the job, checkers.spark's small-job settings
EXIT_RANK = (1, EXIT_BAD_ARGUMENTS, 2, 0)  # many runs: a finding, then a bad input, then an unjudged run


class AnalyzeError(ValueError):
    """Bad arguments or inputs; the message says what is wrong."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("analyze", help="check a recorded run's history and write results.json",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="+",
                        help="run directory holding spec.json and history.jsonl; several, a suite directory "
                             "(results/suites/NAME/TIME) or a results directory are checked in one Spark job")
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


@dataclass
class PreparedRun:
    """A run directory checked, converted to Parquet and with its claim inputs derived."""

    path: Path
    run_id: str
    spec: Any
    cluster_settings: dict | None
    inputs: Any  # checkers.claims.ClaimInputs, with the faults that ran
    conversion: ConversionStats
    notes: list[str] = field(default_factory=list)

    @property
    def final_phase(self):
        from checkers.progress import FinalPhase

        return None if self.conversion.final_by_f is None else FinalPhase(self.conversion.final_by_f)


def prepare_run(run_dir: str | Path, run_id: str | None = None) -> PreparedRun:
    """Validate a run directory, convert its history to history.parquet/run=<run_id>/ and
    derive its claim inputs. Raises AnalyzeError or HistoryFormatError for bad inputs."""
    from checkers.claims import ClaimInputError, ClaimInputs, with_faults

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
    run_id = run_id or run_id_for(run_path)
    # history.parquet/ is derived from history.jsonl and partitioned by run id, which comes
    # from the directory's name: a copied or renamed run directory still holds the old name's
    # partition, which must go or the check sees two runs.
    remove_other_runs(run_path / HISTORY_PARQUET, run_id)
    stats = convert_history(history, run_path / HISTORY_PARQUET, run_id)
    notes = []
    if stats.torn_tail:
        notes.append(f"the last line of {history} was torn (an interrupted writer) and was skipped")
    if stats.incomplete_ops:
        notes.append(f"{stats.incomplete_ops} operation(s) never completed; counted as unknown (info) outcomes")
    return PreparedRun(path=run_path, run_id=run_id, spec=spec, cluster_settings=cluster_settings,
                       inputs=with_faults(inputs, stats.faults, stats.nemesis_ops), conversion=stats, notes=notes)


def finish_run(run: PreparedRun, result):
    """Add the conversion's and the history's figures to the result and write results.json."""
    stats = run.conversion
    result.stats.setdefault("history_ops", stats.ops)
    result.stats.setdefault("torn_tail", stats.torn_tail)
    result.stats.setdefault("incomplete_ops", stats.incomplete_ops)
    result.stats.setdefault("faults", sorted(stats.faults))
    if isinstance(run.spec, dict) and run.spec.get("bootstrap_servers") is not None:
        result.stats["cluster_settings"] = _settings_stats(run.cluster_settings, run.inputs)
    throughput = _throughput(run.path / HISTORY_JSONL, run.path / RESULTS_JSON)
    if throughput is not None:
        result.stats["throughput"] = throughput
    from checkers.node_logs import add_node_log_verdict
    from checkers.quorum import add_quorum_verdict

    # Several controllers: the metadata quorum's checks join the client-side anomalies.
    add_quorum_verdict(result, run.path)
    # And what the nodes' own logs say went wrong inside them.
    add_node_log_verdict(result, run.path)
    result.save(run.path / RESULTS_JSON)
    return result


def analyze_run(run_dir: str | Path, *, spark_master: str | None = None,
                spark_conf: dict[str, str] | None = None, notes: list[str] | None = None):
    """Convert, check and write results.json; returns the CheckResult. Raises AnalyzeError or
    HistoryFormatError for bad inputs; a checker that fails makes the verdict unknown."""
    from checkers.pipeline import check_run
    from checkers.spark import make_spark

    run = prepare_run(run_dir)
    if notes is not None:
        notes.extend(run.notes)
    spark = make_spark(spark_master=spark_master, spark_conf=spark_conf, small=run.conversion.rows < SMALL_ROWS)
    result = check_run(run.path, run.inputs, spark, final_phase=run.final_phase)
    return finish_run(run, result)


def analyze_runs(run_dirs: list[Path], *, spark_master: str | None = None,
                 spark_conf: dict[str, str] | None = None) -> list[RunOutcome]:
    """Check many runs in one Spark session and one job, each written as if analysed alone.

    Every run is converted first; one that cannot be (a corrupt history, a bad spec.json)
    gets its error and is left out, the others are checked together: their Parquet
    histories are read as one DataFrame whose `run` column tells them apart, which the
    whole pipeline is keyed by. A failure of the job itself makes every run in it unknown."""
    from checkers.pipeline import check_many
    from checkers.spark import make_spark

    outcomes: list[RunOutcome] = []
    prepared: dict[str, PreparedRun] = {}
    taken: set[str] = set()
    for run_dir in run_dirs:
        # Run ids come from directory names, which repeat across tests and results trees
        # (two runs started in the same microsecond): a repeat gets a suffix for this job.
        base = run_id_for(Path(run_dir))
        run_id, n = base, 1
        while run_id in taken:
            n += 1
            run_id = f"{base}+{n}"
        taken.add(run_id)
        try:
            run = prepare_run(run_dir, run_id)
        except (AnalyzeError, HistoryFormatError) as exc:
            outcomes.append(RunOutcome(Path(run_dir), error=str(exc)))
            continue
        prepared[run_id] = run
        outcomes.append(RunOutcome(run.path, notes=run.notes, run_id=run_id))
    if prepared:
        rows = sum(run.conversion.rows for run in prepared.values())
        spark = make_spark(spark_master=spark_master, spark_conf=spark_conf, small=rows < SMALL_ROWS)
        results = check_many({run_id: run.path for run_id, run in prepared.items()},
                             {run_id: run.inputs for run_id, run in prepared.items()}, spark,
                             final_phases={run_id: run.final_phase for run_id, run in prepared.items()
                                           if run.final_phase is not None})
        for outcome in outcomes:
            if outcome.run_id is not None:
                outcome.result = finish_run(prepared[outcome.run_id], results[outcome.run_id])
    return outcomes


@dataclass
class RunOutcome:
    """One run of a many-run analysis: its result, or why it could not be checked."""

    path: Path
    result: Any = None  # CheckResult
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    run_id: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_BAD_ARGUMENTS if self.result is None else self.result.exit_code


def expand_run_dirs(arguments: list[str]) -> list[Path]:
    """The run directories the arguments name: a run directory (it holds history.jsonl) is
    itself; a suite directory (index.json of `logquake suite`) stands for the runs it lists;
    a results root for every run under it (harness/store.py); anything else is an error."""
    found: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if not path.is_dir():
            raise AnalyzeError(f"{path}: not a directory")
        if (path / HISTORY_JSONL).is_file() or (path / SPEC_JSON).is_file():
            found.append(path)
            continue
        suite_runs = _suite_runs(path)
        if suite_runs is not None:
            found.extend(suite_runs)
            continue
        runs = [run for run in store.find_runs(path) if (run / HISTORY_JSONL).is_file()]
        if not runs:
            raise AnalyzeError(f"{path}: neither a run directory (no {HISTORY_JSONL}), a suite directory "
                               "(no index.json) nor a results directory with recorded runs")
        found.extend(sorted(runs))
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)  # a run named twice is checked once
    return list(unique.values())


def _suite_runs(path: Path) -> list[Path] | None:
    index, _ = store.read_json_object(path / "index.json")
    if index is None or not isinstance(index.get("runs"), list):
        return None
    runs = []
    for row in index["runs"]:
        run_dir = row.get("run_dir") if isinstance(row, dict) else None
        if isinstance(run_dir, str) and (path / run_dir / HISTORY_JSONL).is_file():
            runs.append((path / run_dir).resolve())
    return runs


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
        run_dirs = expand_run_dirs(args.run_dir)
        if len(args.run_dir) == 1 and run_dirs == [Path(args.run_dir[0])]:
            code = analyze(args.run_dir[0], spark_master=args.spark_master, spark_conf=conf)
        else:
            return analyze_many(run_dirs, spark_master=args.spark_master, spark_conf=conf,
                                junit_xml=args.junit_xml, started_at=started_at)
    except (AnalyzeError, HistoryFormatError, SparkMasterConflict) as exc:
        print(f"logquake analyze: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    _write_report(Path(args.run_dir[0]))
    if args.junit_xml is not None:
        _write_junit([Path(args.run_dir[0])], args.junit_xml, started_at)
    return code


def analyze_many(run_dirs: list[Path], *, spark_master: str | None, spark_conf: dict[str, str],
                 junit_xml: str | None, started_at, out=None) -> int:
    """analyze_runs, then per run its notes, verdict and report (as `analyze` prints them for
    one run, under a header naming the run), one index per results tree, the JUnit file; the
    exit code is the worst run's."""
    out = sys.stdout if out is None else out
    print(f"logquake analyze: {len(run_dirs)} run(s) in one Spark job", file=out, flush=True)
    outcomes = analyze_runs(run_dirs, spark_master=spark_master, spark_conf=spark_conf)
    roots: dict[Path, None] = {}
    for outcome in outcomes:
        print(f"== {outcome.path}", file=out)
        if outcome.result is None:
            print(f"logquake analyze: {outcome.error}", file=sys.stderr)
            print(f"  not checked: {outcome.error}", file=out)
            continue
        for note in outcome.notes:
            print(f"note: {note}", file=out)
        print_verdict(outcome.result, out)
        _write_report(outcome.path, index=False)
        root = store.results_root_of(outcome.path.resolve())
        if root is not None:
            roots.setdefault(root, None)
    for root in roots:
        _write_index(root)
    checked = [outcome.path for outcome in outcomes if outcome.result is not None]
    if junit_xml is not None and checked:
        _write_junit(checked, junit_xml, started_at)
    codes = {outcome.exit_code for outcome in outcomes}
    code = next(code for code in EXIT_RANK if code in codes)
    counts = {}
    for outcome in outcomes:
        verdict = "not checked" if outcome.result is None else \
            {True: "valid", False: "invalid", "unknown": "unknown"}[outcome.result.valid]
        counts[verdict] = counts.get(verdict, 0) + 1
    print(f"logquake analyze: {', '.join(f'{n} {v}' for v, n in counts.items())}; exit {code}", file=out)
    return code


def _write_junit(run_dirs: list[Path], path: str, started_at) -> None:
    """The re-checked runs as JUnit XML (harness/junit.py), a testsuite per run, each named,
    seeded and reproducible from its spec.json."""
    from harness.junit import RunRecord, load_result, now_utc, suite_for_run, write_junit

    suites = []
    for run_dir in run_dirs:
        spec, _ = store.read_json_object(run_dir / SPEC_JSON)
        spec = spec or {}
        seed = spec.get("seed")
        record = RunRecord(name=str(spec.get("name") or run_dir.name), status="checked", started_at=started_at,
                           elapsed_s=(now_utc() - started_at).total_seconds(),
                           message="re-checked by logquake analyze", run_dir=run_dir.resolve(),
                           seed=seed if isinstance(seed, int) else None,
                           reproduce_command=spec.get("command") if isinstance(spec.get("command"), str) else None,
                           result=load_result(run_dir))
        suites.append(suite_for_run(record))
    try:
        print(f"junit: {write_junit(path, suites)}")
    except OSError as exc:
        print(f"logquake analyze: cannot write the JUnit file {path}: {exc}", file=sys.stderr)


def _write_report(run_dir: Path, *, index: bool = True) -> None:
    """The re-checked run gets a fresh report (and its store a fresh index, unless the caller
    writes it once for many runs). A report that cannot be written is said, but does not
    change the verdict's exit code."""
    from harness.report import write_report

    try:
        print(f"report: {write_report(run_dir)}")
    except Exception as exc:
        print(f"logquake analyze: could not write the report: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    if index:
        root = store.results_root_of(run_dir.resolve())
        if root is not None:
            _write_index(root)


def _write_index(root: Path) -> None:
    from harness.report import write_index

    try:
        print(f"index: {write_index(root)}")
    except Exception as exc:
        print(f"logquake analyze: could not write the index: {type(exc).__name__}: {exc}", file=sys.stderr)
