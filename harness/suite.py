"""`logquake suite FILE`: run a TOML matrix of tests one after another (Jepsen's test-all).

The file (harness/suite_file.py) is read, expanded and checked before anything runs. Each
test is `logquake test` in a child process (logquake.run: its own signal handling, network
namespace and Spark session), its output kept in the suite directory's logs/; the terminal
gets one line per test. After each test the suite directory's index.json, index.html and
junit.xml (harness/junit.py: a testsuite per run) are rewritten atomically, so an interrupted
suite keeps what finished. Ctrl-C stops the running test as `logquake test` does (faults
healed, cluster torn down), records it as interrupted and exits 130.

Exit code: the worst over the runs, with `logquake test`'s codes: 1 if a run was invalid
against its expectation (an expected-valid run flagged, or an expected-invalid one not
flagged or flagged for something else), else 255 if the harness failed on one, else 2 if one
was unknown, else 0; 254 for a bad suite file.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from harness import store
from harness.cli import EXIT_BAD_ARGUMENTS, EXIT_HARNESS_ERROR
from harness.junit import RunRecord, load_result, now_utc, suite_for_run, write_junit

PROG = "logquake suite"
EXIT_INTERRUPTED = 130
SUITES_DIR = "suites"  # under the results root: suites/<name>/<timestamp>/
# Worst first: a finding beats a broken harness beats an unjudged run beats a pass.
EXIT_RANK = (1, EXIT_HARNESS_ERROR, EXIT_BAD_ARGUMENTS, 2, 0)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("suite", help="run a TOML matrix of tests; one index, one JUnit file, worst verdict",
                              description=__doc__.splitlines()[0])
    p.add_argument("file", help="suite file (TOML), e.g. suites/ci.toml")
    p.add_argument("--results-dir", default=None, help="results root (default: the file's [suite] results_dir, "
                                                       "else ./results)")
    p.add_argument("--junit-xml", default=None, metavar="PATH",
                   help="also write the JUnit file here (it is always in the suite directory)")
    p.add_argument("--list", action="store_true", help="check the file and print its tests without running them")
    p.set_defaults(handler=handle)


@dataclass
class Finished:
    """One run of the suite, as the index and the JUnit file record it."""

    run: Any  # harness.suite_file.SuiteRun
    record: RunRecord
    exit_code: int
    outcome: str  # one line: "valid", "invalid as expected (lost-write x3)", "INVALID: ...", ...
    log_path: Path
    anomalies: list[dict[str, Any]] = field(default_factory=list)


def handle(args: argparse.Namespace) -> int:
    from harness.suite_file import SuiteFileError, load_suite

    try:
        suite = load_suite(args.file, results_dir=args.results_dir)
    except SuiteFileError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    if args.list:
        for run in suite.runs:
            print(f"[{run.index}/{len(suite.runs)}] {run.id}: expect {run.expectation.verdict}: {run.command}")
        return 0
    return run_suite(suite, junit_copy=args.junit_xml)


def run_suite(suite: Any, *, junit_copy: str | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    started_at = now_utc()
    suite_dir = store.create_run_dir(suite.results_dir / SUITES_DIR, suite.name, now=started_at)
    logs = suite_dir / "logs"
    logs.mkdir()
    print(f"{PROG}: {suite.name} ({suite.path}): {len(suite.runs)} test(s); index {suite_dir / 'index.html'}", file=out,
          flush=True)
    finished: list[Finished] = []
    interrupted = False
    # SIGTERM (a CI runner cancelling the job) stops the suite as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        interrupted = _run_all(suite, suite_dir, started_at, logs, finished, junit_copy, out)
    except KeyboardInterrupt:
        interrupted = True  # between tests, or while writing the outputs: what finished is kept
    finally:
        signal.signal(signal.SIGTERM, previous)
    code = EXIT_INTERRUPTED if interrupted else combined_exit_code(f.exit_code for f in finished)
    _write_outputs(suite, suite_dir, started_at, finished, interrupted, junit_copy, out, exit_code=code)
    counts: dict[str, int] = {}
    for item in finished:
        key = {0: "as expected", 1: "unexpected", 2: "unknown", EXIT_INTERRUPTED: "interrupted"}.get(
            item.exit_code, "harness error")
        counts[key] = counts.get(key, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in counts.items()) or "none run"
    print(f"{PROG}: {'interrupted; ' if interrupted else ''}{len(finished)} of {len(suite.runs)} test(s): {summary}; "
          f"exit {code}", file=out, flush=True)
    # Each run was checked as it finished (its verdict is reported live); all of them can be
    # re-checked in one Spark job from the suite directory (harness/analyze.py).
    print(f"{PROG}: index {suite_dir / 'index.html'}; junit {suite_dir / 'junit.xml'}; re-check every run in "
          f"one Spark job: logquake analyze {suite_dir}", file=out, flush=True)
    return code


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _run_all(suite: Any, suite_dir: Path, started_at: datetime, logs: Path, finished: list[Finished],
             junit_copy: str | None, out: TextIO) -> bool:
    """Run every test in order; True when interrupted."""
    from logquake.api import RunError, SpecError, run as run_test

    total = len(suite.runs)
    interrupted = False
    for run in suite.runs:
        log_path = logs / f"{run.index:03d}-{run.id}.log"
        began, began_s = now_utc(), time.monotonic()
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                log.write(f"$ {run.command}\n")
                log.flush()
                result = run_test(run.spec, suite.results_dir, output=log)
        except KeyboardInterrupt as exc:
            record = _record(run, "interrupted", began, began_s, str(exc) or "interrupted")
            finished.append(_finish(run, record, log_path))
            interrupted = True
        except RunError as exc:
            record = _record(run, "harness-error", began, began_s, str(exc), run_dir=exc.run_dir)
            finished.append(_finish(run, record, log_path))
        except SpecError as exc:
            record = _record(run, "harness-error", began, began_s, f"refused: {exc}")
            finished.append(_finish(run, record, log_path))
        else:
            record = _record(run, "checked", began, began_s, result.message, run_dir=result.run_dir)
            finished.append(_finish(run, record, log_path))
        item = finished[-1]
        print(f"[{run.index}/{total}] {run.id}: {item.outcome} ({record.elapsed_s:.0f} s)"
              + (f"; report {record.report_path}" if record.report_path and record.report_path.exists() else
                 f"; log {log_path}"), file=out, flush=True)
        _write_outputs(suite, suite_dir, started_at, finished, interrupted, junit_copy, out)
        if interrupted:
            break
    return interrupted


def combined_exit_code(codes: Any) -> int:
    seen = set(codes)
    return next((code for code in EXIT_RANK if code in seen), 0)


def _record(run: Any, status: str, began: datetime, began_s: float, message: str,
            run_dir: Path | None = None) -> RunRecord:
    return RunRecord(name=run.id, status=status, started_at=began,  # type: ignore[arg-type]
                     elapsed_s=time.monotonic() - began_s, message=message, run_dir=run_dir, seed=run.spec.seed,
                     reproduce_command=run.command, result=load_result(run_dir) if status == "checked" else None,
                     expectation=run.expectation,
                     extra_properties=[("suite_test", run.entry), ("configuration", run.configuration or "")])


def _finish(run: Any, record: RunRecord, log_path: Path) -> Finished:
    result = record.check_result
    anomalies = [] if result is None else [
        {"name": a.name, "count": a.count, "allowed": a.allowed, "violates": a.violates} for a in result.anomalies]
    bad = [a for a in anomalies if not a["allowed"]]
    counts = ", ".join(f"{a['name']} x{a['count']}" for a in bad)
    allowed = ", ".join(f"{a['name']} x{a['count']}" for a in anomalies if a["allowed"])
    verdict = record.verdict
    expectation = run.expectation
    if record.status == "interrupted":
        return Finished(run, record, EXIT_INTERRUPTED, "interrupted", log_path, anomalies)
    if record.status == "harness-error":
        return Finished(run, record, EXIT_HARNESS_ERROR, f"HARNESS ERROR: {record.message.splitlines()[0]}",
                        log_path, anomalies)
    if verdict == "unknown":
        reasons = "; ".join(e.error.splitlines()[0] for e in result.errors) if result else ""
        return Finished(run, record, 2, f"UNKNOWN: {reasons}", log_path, anomalies)
    if expectation.met_by(verdict, [a["name"] for a in bad]):
        if verdict == "invalid":
            text = f"invalid as expected ({counts})"
        else:
            text = "valid" + (f" (allowed: {allowed})" if allowed else "")
        return Finished(run, record, 0, text, log_path, anomalies)
    if verdict == "invalid" and expectation.verdict == "valid":
        text = f"INVALID: {counts}"
    elif verdict == "invalid" and not expectation.covers([a["name"] for a in bad]):
        extra = sorted({a["name"] for a in bad} - set(expectation.anomalies) - set(expectation.also_allowed))
        text = f"INVALID, not as expected: also {', '.join(extra)} ({counts})"
    elif verdict == "invalid":
        text = f"INVALID, not as expected: none of {', '.join(expectation.anomalies)} ({counts})"
    else:
        text = f"VALID, expected invalid ({', '.join(expectation.anomalies) or 'any anomaly'}): not detected"
    return Finished(run, record, 1, text, log_path, anomalies)


def _write_outputs(suite: Any, suite_dir: Path, started_at: datetime, finished: list[Finished], interrupted: bool,
                   junit_copy: str | None, out: TextIO, exit_code: int | None = None) -> None:
    from harness.suite_index import write_index

    suites = [suite_for_run(item.record) for item in finished]
    write_junit(suite_dir / "junit.xml", suites, name=f"logquake suite {suite.name}")
    if junit_copy is not None:
        try:
            write_junit(junit_copy, suites, name=f"logquake suite {suite.name}")
        except OSError as exc:
            print(f"{PROG}: cannot write the JUnit file {junit_copy}: {exc}", file=sys.stderr)
    write_index(suite_dir, suite=suite, started_at=started_at, finished=finished, interrupted=interrupted,
                exit_code=exit_code)
