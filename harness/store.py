"""The results store: where runs live on disk, the `latest` links, and the list of runs.

Layout (DESIGN.md §6), following Jepsen's store:

    results/
      index.html                       every run, newest first (harness.report.write_index)
      latest -> <name>/<timestamp>     the newest run of any test
      <name>/
        latest -> <timestamp>          the newest run of this test
        <timestamp>/                   one run: spec.json, history.jsonl, results.json, ...

Timestamps are UTC, `YYYYMMDDTHHMMSS.ffffff`, so names sort in time order. Links are
relative, so a results tree can be moved, copied or zipped and still work, and they are
swapped atomically (a new link renamed over the old one): a reader never sees a missing
`latest`.

Listing tolerates anything a crash or a person can leave behind: a run without results.json
is "incomplete", a corrupt spec.json or results.json is reported as a problem of that run,
and stray files or directories that are not runs are ignored. Listing never raises for the
contents of a run.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

RUN_TIMESTAMP_FORMAT = "%Y%m%dT%H%M%S.%f"
LATEST = "latest"
INDEX_FILE = "index.html"
SPEC_FILE = "spec.json"
RESULTS_FILE = "results.json"
HISTORY_FILE = "history.jsonl"
REPORT_FILE = "report.html"
HARNESS_LOG_FILE = "harness.log"

# Names a test may not take, because the store itself uses them at the results root.
_RESERVED_NAMES = frozenset({LATEST, INDEX_FILE})

# The verdict of a run as the index shows it: the three Jepsen values, plus "incomplete"
# for a run that has no results.json (still running, or the harness died before checking).
Verdict = Literal["valid", "invalid", "unknown", "incomplete"]


class StoreError(ValueError):
    """Bad input to the store: an unusable test name, or a path that is not a run."""


@dataclass(frozen=True)
class AnomalyCount:
    name: str
    count: int
    allowed: bool


@dataclass
class RunSummary:
    """One run as the index sees it. Fields are None when the file that holds them is
    missing or unreadable; `problems` says which and why."""

    name: str
    timestamp: str
    started_at: datetime
    path: Path
    relative_path: str  # from the results root, with "/" separators
    verdict: Verdict
    workload: str | None = None
    nemeses: list[str] = field(default_factory=list)
    seed: Any = None
    command: str | None = None
    anomalies: list[AnomalyCount] = field(default_factory=list)
    checker_errors: int = 0
    has_report: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def bad_anomalies(self) -> list[AnomalyCount]:
        return [a for a in self.anomalies if not a.allowed]


def check_test_name(name: str) -> str:
    """Return `name` if it can be a directory under results/, else raise StoreError."""
    if not isinstance(name, str) or not name.strip():
        raise StoreError("test name must be a non-empty string")
    if "/" in name or "\\" in name or "\0" in name:
        raise StoreError(f"test name {name!r} must not contain '/', '\\' or NUL")
    if name.startswith("."):
        raise StoreError(f"test name {name!r} must not start with '.'")
    if name in _RESERVED_NAMES:
        raise StoreError(f"test name {name!r} is reserved by the results store")
    return name


def format_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise StoreError("run timestamps need a timezone-aware datetime")
    return moment.astimezone(timezone.utc).strftime(RUN_TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> datetime | None:
    """The UTC time a run directory name stands for, or None if it is not a run name."""
    try:
        return datetime.strptime(text, RUN_TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def create_run_dir(results_root: str | os.PathLike[str], name: str, *, now: datetime | None = None) -> Path:
    """Make `results/<name>/<timestamp>/` and point both `latest` links at it.

    Two runs started in the same microsecond get distinct directories (the later one moves
    on by a microsecond), so a directory is never shared.
    """
    check_test_name(name)
    root = Path(results_root)
    moment = now or datetime.now(timezone.utc)
    test_dir = root / name
    test_dir.mkdir(parents=True, exist_ok=True)
    while True:
        run_dir = test_dir / format_timestamp(moment)
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            moment = moment + timedelta(microseconds=1)
    update_latest(run_dir, results_root=root)
    return run_dir


def update_latest(run_dir: str | os.PathLike[str], *, results_root: str | os.PathLike[str] | None = None) -> None:
    """Point `results/latest` and `results/<name>/latest` at `run_dir`, atomically."""
    run = Path(run_dir)
    root = Path(results_root) if results_root is not None else run.parent.parent
    if parse_timestamp(run.name) is None or not run.is_dir():
        raise StoreError(f"{run} is not a run directory (results/<name>/<timestamp>)")
    if run.parent.parent.resolve() != root.resolve():
        raise StoreError(f"{run} is not inside the results root {root}")
    _replace_symlink(root / LATEST, f"{run.parent.name}/{run.name}")
    _replace_symlink(run.parent / LATEST, run.name)


def _replace_symlink(link: Path, target: str) -> None:
    if link.exists() and not link.is_symlink():
        raise StoreError(f"{link} exists and is not a symlink; refusing to replace it")
    temporary = link.parent / f".{link.name}.{os.getpid()}.{uuid.uuid4().hex}"
    os.symlink(target, temporary)
    try:
        os.replace(temporary, link)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def find_runs(results_root: str | os.PathLike[str]) -> list[Path]:
    """Every run directory under the results root, newest first (ties by name)."""
    root = Path(results_root)
    if not root.is_dir():
        return []
    found: list[tuple[datetime, str, Path]] = []
    for test_dir in root.iterdir():
        if test_dir.name.startswith(".") or test_dir.name in _RESERVED_NAMES or test_dir.is_symlink():
            continue
        if not test_dir.is_dir():
            continue
        for run_dir in test_dir.iterdir():
            if run_dir.is_symlink() or not run_dir.is_dir():
                continue
            started = parse_timestamp(run_dir.name)
            if started is not None:
                found.append((started, test_dir.name, run_dir))
    found.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [path for _, _, path in found]


def read_json_object(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(object, None) for a readable JSON object; (None, reason) otherwise."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        return None, f"{path.name} is missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path.name} is unreadable: {exc}"
    if not isinstance(raw, dict):
        return None, f"{path.name} is not a JSON object"
    return raw, None


def verdict_of(valid: Any) -> Verdict:
    if valid is True:
        return "valid"
    if valid is False:
        return "invalid"
    return "unknown"


def summarize_run(run_dir: str | os.PathLike[str], *, results_root: str | os.PathLike[str] | None = None) -> RunSummary:
    run = Path(run_dir)
    root = Path(results_root) if results_root is not None else run.parent.parent
    started = parse_timestamp(run.name)
    if started is None:
        raise StoreError(f"{run} is not a run directory: {run.name!r} is not a run timestamp")
    summary = RunSummary(
        name=run.parent.name,
        timestamp=run.name,
        started_at=started,
        path=run,
        relative_path=run.relative_to(root).as_posix() if run.is_relative_to(root) else run.as_posix(),
        verdict="incomplete",
        has_report=(run / REPORT_FILE).is_file(),
    )
    spec, problem = read_json_object(run / SPEC_FILE)
    if problem:
        summary.problems.append(problem)
    if spec is not None:
        _fill_from_spec(summary, spec)
    results, problem = read_json_object(run / RESULTS_FILE)
    if results is None:
        if problem and not problem.endswith("is missing"):
            summary.verdict = "unknown"
            summary.problems.append(problem)
    else:
        _fill_from_results(summary, results)
    return summary


def _fill_from_spec(summary: RunSummary, spec: dict[str, Any]) -> None:
    workload = spec.get("workload")
    summary.workload = workload if isinstance(workload, str) else (None if workload is None else str(workload))
    nemeses = spec.get("nemeses")
    if isinstance(nemeses, list):
        summary.nemeses = [str(n) for n in nemeses]
    elif nemeses is not None:
        summary.problems.append("spec.json: nemeses is not a list")
    summary.seed = spec.get("seed")
    command = spec.get("command")
    summary.command = command if isinstance(command, str) else None


def _fill_from_results(summary: RunSummary, results: dict[str, Any]) -> None:
    if "valid" not in results:
        summary.verdict = "unknown"
        summary.problems.append("results.json has no 'valid' field")
    else:
        summary.verdict = verdict_of(results["valid"])
    anomalies = results.get("anomalies", [])
    if not isinstance(anomalies, list):
        summary.problems.append("results.json: anomalies is not a list")
        anomalies = []
    for entry in anomalies:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            summary.problems.append("results.json: an anomaly without a name")
            continue
        count = entry.get("count")
        summary.anomalies.append(
            AnomalyCount(name=entry["name"], count=count if isinstance(count, int) else 0, allowed=bool(entry.get("allowed")))
        )
    errors = results.get("errors", [])
    summary.checker_errors = len(errors) if isinstance(errors, list) else 0


def list_runs(results_root: str | os.PathLike[str]) -> list[RunSummary]:
    """Every run under the results root, newest first, each summarised from its files."""
    return [summarize_run(run, results_root=results_root) for run in find_runs(results_root)]


def results_root_of(run_dir: str | os.PathLike[str]) -> Path | None:
    """The results root holding run_dir (results/<name>/<timestamp>), recognised by the
    store's `latest` link; None for a run directory outside a results store."""
    run_dir = Path(run_dir)
    root = run_dir.parent.parent
    return root if (root / LATEST).is_symlink() and parse_timestamp(run_dir.name) else None
