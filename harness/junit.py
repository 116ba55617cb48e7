"""JUnit XML for CI systems: one <testsuite> per run, one <testcase> per claim plus one for
the harness itself.

CI systems (Jenkins, GitLab, GitHub reporters, Buildkite, ...) read the Jenkins dialect of
JUnit XML (the xunit plugin's junit-10.xsd, which pytest's --junitxml also follows); what we
write validates against it (tests/harness/test_junit.py checks with the schema and a JUnit
parser). A run becomes test cases that a person can act on:

- `harness`: did the run complete (set-up, workload and faults, heal, final read, check) and
  did it make progress (checkers/progress.py). A harness failure or an interrupt is an
  <error>; so is a run the progress check could not judge (verdict `unknown`).
- `claim <name>`, one per claim of the run (results.json's claims): a <failure> listing every
  anomaly the claims forbid that breaks it, with counts and one witness each, the report and
  the reproduce command. A claim the configuration does not make is <skipped> (with the
  reason, and the anomalies it allowed); so is every claim of an `unknown` run that no anomaly
  broke: it was not judged, so it must not show as passed.
- `checker <name>`, only when that checker itself failed (an <error>: verdict unknown).
- `anomalies outside the claims`, only when an anomaly no claim names was found (a <failure>:
  unknown anomaly types are bad, as in Jepsen).
- `expectation`, only for a suite entry that expects `invalid` (harness/suite_file.py): it
  fails when the run was not flagged, or flagged something else.

`unknown` is an <error>, not a skip: a run that could not be judged must neither turn a CI
green nor disappear among skipped tests, and an error stays distinct from a failure (an
anomaly found). The run's seed, run directory, report and reproduce command are properties
of its <testsuite>. Files are written atomically (a temporary file renamed over the target).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Sequence

from checkers.claims import VIOLATES
from checkers.result import Anomaly, CheckerError, CheckResult

Outcome = Literal["passed", "failure", "error", "skipped"]
RunStatus = Literal["checked", "harness-error", "interrupted"]
# Progress and history errors say the run did not exercise its claims: the harness's case.
HARNESS_CHECKERS = frozenset({"progress", "history"})
WITNESS_DETAIL_CHARS = 600


@dataclass(frozen=True)
class JUnitCase:
    name: str
    classname: str
    outcome: Outcome = "passed"
    message: str = ""
    text: str = ""  # the failure's, error's or skip's body
    output: str = ""  # <system-out>: what a person may want to read although the case passed
    time_s: float = 0.0


@dataclass(frozen=True)
class JUnitSuite:
    name: str
    started_at: datetime
    time_s: float
    properties: list[tuple[str, str]] = field(default_factory=list)
    cases: list[JUnitCase] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for case in self.cases if case.outcome == outcome)


@dataclass(frozen=True)
class Expectation:
    """What a suite entry expects of its run. `valid`: a valid verdict (`anomalies` then names
    the allowed ones it may list, for the reader). `invalid`: flagged for at least one of
    `anomalies` (any anomaly when empty), and for nothing outside `anomalies` and
    `also_allowed` (e.g. the order anomalies that follow a loss)."""

    verdict: Literal["valid", "invalid"] = "valid"
    anomalies: tuple[str, ...] = ()
    also_allowed: tuple[str, ...] = ()

    def met_by(self, verdict: str, bad_anomalies: Sequence[str]) -> bool:
        if self.verdict == "valid":
            return verdict == "valid"
        return (verdict == "invalid" and self.covers(bad_anomalies)
                and (not self.anomalies or bool(set(bad_anomalies) & set(self.anomalies))))

    def covers(self, bad_anomalies: Sequence[str]) -> bool:
        """Every one of these forbidden anomalies is one the entry expects or allows."""
        return not self.anomalies or set(bad_anomalies) <= set(self.anomalies) | set(self.also_allowed)


@dataclass(frozen=True)
class RunRecord:
    """One run as the JUnit writer needs it. `result` is the run's CheckResult (None when no
    check ran: a harness error or an interrupt); `message` says what happened in one line."""

    name: str
    status: RunStatus
    started_at: datetime
    elapsed_s: float
    message: str = ""
    run_dir: Path | None = None
    seed: int | None = None
    reproduce_command: str | None = None
    result: CheckResult | None = None
    expectation: Expectation | None = None
    extra_properties: list[tuple[str, str]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.status == "interrupted":
            return "interrupted"
        if self.status == "harness-error":
            return "harness-error"
        if self.result is None:
            return "unknown"  # checked, but no results.json: the checkers crashed
        return {True: "valid", False: "invalid"}.get(self.result.valid, "unknown")  # type: ignore[arg-type]

    @property
    def check_result(self) -> CheckResult | None:
        """The run's CheckResult; for a checked run without results.json (the checkers
        crashed, which makes the verdict unknown) one that says so."""
        if self.status != "checked" or self.result is not None:
            return self.result
        return CheckResult(valid="unknown", errors=[CheckerError("check", self.message or "no results.json was written")])

    @property
    def report_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "report.html"


def load_result(run_dir: Path | None) -> CheckResult | None:
    """The run's results.json, or None when there is none (or it is unreadable)."""
    if run_dir is None:
        return None
    try:
        return CheckResult.load(run_dir / "results.json")
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- runs to suites -------------------------------------------------------------------

def suite_for_run(run: RunRecord) -> JUnitSuite:
    classname = f"logquake.{run.name}"
    footer = _footer(run)
    cases = [_harness_case(run, classname, footer)]
    result = run.check_result
    if run.status == "checked" and result is not None:
        expected = run.expectation if run.expectation is not None and run.expectation.verdict == "invalid" else None
        judged = not result.errors
        claim_names = {claim.name for claim in result.claims}
        for claim in result.claims:
            cases.append(_claim_case(claim, result.anomalies, classname, footer, judged, expected))
        outside = [a for a in result.anomalies if not a.allowed and not (set(a.violates) & claim_names)]
        if outside:
            cases.append(_outside_case(outside, classname, footer, expected))
        for checker in sorted({e.checker for e in result.errors} - HARNESS_CHECKERS):
            errors = [e.error for e in result.errors if e.checker == checker]
            cases.append(JUnitCase(f"checker {checker}", classname, "error", f"the {checker} checker failed: verdict "
                                   f"unknown: {_first_line(errors[0])}", "\n\n".join(errors) + footer))
        if run.expectation is not None and run.expectation.verdict == "invalid":
            cases.append(_expectation_case(run, result, classname, footer))
    properties = [("verdict", run.verdict), ("seed", "" if run.seed is None else str(run.seed)),
                  ("run_dir", "" if run.run_dir is None else str(run.run_dir)),
                  ("report", "" if run.report_path is None else str(run.report_path)),
                  ("reproduce_command", run.reproduce_command or ""), *run.extra_properties]
    if run.expectation is not None:
        expectation = run.expectation
        properties.append(("expect", expectation.verdict
                           + (f" ({', '.join(expectation.anomalies)})" if expectation.anomalies else "")
                           + (f"; also allowed: {', '.join(expectation.also_allowed)}" if expectation.also_allowed
                              else "")))
    return JUnitSuite(name=run.name, started_at=run.started_at, time_s=run.elapsed_s, properties=properties,
                      cases=cases)


def _harness_case(run: RunRecord, classname: str, footer: str) -> JUnitCase:
    if run.status == "interrupted":
        return JUnitCase("harness", classname, "error", "interrupted: the run did not finish, no verdict",
                         run.message + footer, time_s=run.elapsed_s)
    result = run.check_result
    if run.status == "harness-error" or result is None:
        return JUnitCase("harness", classname, "error", f"harness error: {_first_line(run.message)}",
                         run.message + footer, time_s=run.elapsed_s)
    progress = [e.error for e in result.errors if e.checker in HARNESS_CHECKERS]
    if progress:
        return JUnitCase("harness", classname, "error",
                         f"verdict unknown: the run did not exercise its claims: {_first_line(progress[0])}",
                         "\n".join(progress) + footer, time_s=run.elapsed_s)
    stats = result.stats
    output = f"completed: {stats.get('history_ops', stats.get('ops', '?'))} ops, {stats.get('ok_ops', '?')} ok; " \
             f"faults run: {', '.join(stats.get('faults', [])) or 'none'}"
    return JUnitCase("harness", classname, "passed", output=output + footer, time_s=run.elapsed_s)


def _claim_case(claim, anomalies: list[Anomaly], classname: str, footer: str, judged: bool,
                expected: Expectation | None) -> JUnitCase:
    name = f"claim {claim.name}"
    mine = [a for a in anomalies if claim.name in a.violates or claim.name in VIOLATES.get(a.name, ())]
    bad = [a for a in mine if not a.allowed and claim.name in a.violates]
    allowed = [a for a in mine if a.allowed]
    allowed_text = (f"\nallowed anomalies: {_counts(allowed)}" if allowed else "")
    if not claim.holds:
        return JUnitCase(name, classname, "skipped", f"not claimed by this run's configuration: {claim.reason}",
                         output=f"{claim.description}{allowed_text}")
    if bad:
        if expected is not None and expected.covers([a.name for a in bad]):
            return JUnitCase(name, classname, "passed", output=f"flagged as the suite expects: {_counts(bad)}\n"
                             + _anomaly_text(bad) + footer)
        return JUnitCase(name, classname, "failure", f"{_counts(bad)} (breaks {claim.name}: {claim.description})",
                         _anomaly_text(bad) + allowed_text + footer)
    if not judged:
        return JUnitCase(name, classname, "skipped", "not judged: the checks could not judge this run "
                         "(verdict unknown; see the harness and checker test cases)")
    return JUnitCase(name, classname, "passed", output=f"{claim.description} ({claim.reason}){allowed_text}")


def _outside_case(outside: list[Anomaly], classname: str, footer: str, expected: Expectation | None) -> JUnitCase:
    name = "anomalies outside the claims"
    if expected is not None and expected.covers([a.name for a in outside]):
        return JUnitCase(name, classname, "passed", output="flagged as the suite expects:\n" + _anomaly_text(outside))
    return JUnitCase(name, classname, "failure", f"{_counts(outside)}: no claim names these anomaly types, "
                     "so they are bad (as in Jepsen)", _anomaly_text(outside) + footer)


def _expectation_case(run: RunRecord, result: CheckResult, classname: str, footer: str) -> JUnitCase:
    assert run.expectation is not None
    bad = [a for a in result.anomalies if not a.allowed]
    verdict = run.verdict
    wanted = ", ".join(run.expectation.anomalies) or "any anomaly"
    if run.expectation.met_by(verdict, [a.name for a in bad]):
        return JUnitCase("expectation", classname, "passed", output=f"expected invalid ({wanted}); flagged: "
                         f"{_counts(bad)}")
    if verdict == "valid":
        message = f"expected invalid ({wanted}), but the run was valid: the fault mix did not expose it this time"
    elif verdict == "invalid" and not run.expectation.covers([a.name for a in bad]):
        extra = sorted({a.name for a in bad} - set(run.expectation.anomalies) - set(run.expectation.also_allowed))
        message = f"expected invalid ({wanted}), but the run also flagged {', '.join(extra)}"
    elif verdict == "invalid":
        message = f"expected invalid ({wanted}), but the run flagged only {_counts(bad)}"
    else:
        message = f"expected invalid ({wanted}), but the verdict was {verdict}"
    return JUnitCase("expectation", classname, "error" if verdict == "unknown" else "failure", message,
                     _anomaly_text(bad) + footer)


def _counts(anomalies: Sequence[Anomaly]) -> str:
    return ", ".join(f"{a.name} x{a.count}" for a in anomalies)


def _anomaly_text(anomalies: Sequence[Anomaly]) -> str:
    lines = []
    for anomaly in anomalies:
        lines.append(f"{anomaly.name} x{anomaly.count}"
                     + (f" (breaks {', '.join(anomaly.violates)})" if anomaly.violates else "")
                     + f": {anomaly.explanation}")
        if anomaly.witnesses:
            witness = anomaly.witnesses[0]
            detail = json.dumps(witness.detail, default=str, sort_keys=True)
            if len(detail) > WITNESS_DETAIL_CHARS:
                detail = detail[:WITNESS_DETAIL_CHARS] + " ..."
            lines.append(f"  witness: history ops {witness.op_indices} {detail}")
    return "\n".join(lines)


def _footer(run: RunRecord) -> str:
    lines = []
    if run.report_path is not None:
        lines.append(f"report: {run.report_path}")
    if run.seed is not None or run.reproduce_command:
        lines.append(f"seed {run.seed}; reproduce with: {run.reproduce_command}")
    return ("\n\n" + "\n".join(lines)) if lines else ""


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


# -- XML ------------------------------------------------------------------------------

def to_xml(suites: Sequence[JUnitSuite], name: str = "logquake") -> bytes:
    """The JUnit document: <testsuites> holding one <testsuite> per run."""
    hostname = socket.gethostname()
    root = ET.Element("testsuites", {
        "name": name,
        "tests": str(sum(len(s.cases) for s in suites)),
        "failures": str(sum(s.count("failure") for s in suites)),
        "errors": str(sum(s.count("error") for s in suites)),
        "time": _time(sum(s.time_s for s in suites)),
    })
    for suite in suites:
        element = ET.SubElement(root, "testsuite", {
            "name": suite.name,
            "tests": str(len(suite.cases)),
            "failures": str(suite.count("failure")),
            "errors": str(suite.count("error")),
            "skipped": str(suite.count("skipped")),
            "time": _time(suite.time_s),
            "timestamp": suite.started_at.astimezone(timezone.utc).isoformat(timespec="seconds"),
            "hostname": hostname,
        })
        properties = ET.SubElement(element, "properties")
        for key, value in suite.properties:
            ET.SubElement(properties, "property", {"name": key, "value": _clean(value)})
        for case in suite.cases:
            item = ET.SubElement(element, "testcase", {"classname": case.classname, "name": case.name,
                                                      "time": _time(case.time_s)})
            if case.outcome != "passed":
                tag = {"failure": "failure", "error": "error", "skipped": "skipped"}[case.outcome]
                body = ET.SubElement(item, tag, {"message": _clean(case.message),
                                                 "type": "unknown" if tag == "error" and "unknown" in case.message
                                                 else tag})
                body.text = _clean(case.text) or None
            if case.output:
                ET.SubElement(item, "system-out").text = _clean(case.output)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _time(seconds: float) -> str:
    # junit-10.xsd's SUREFIRE_TIME: digits, at most three decimals, no exponent.
    return f"{max(0.0, seconds):.3f}"


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters, even escaped: drop them."""
    return "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 0x20)


def write_junit(path: str | os.PathLike[str], suites: Sequence[JUnitSuite], name: str = "logquake") -> Path:
    """Write the document atomically: a reader (a CI step, a person) never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = to_xml(suites, name)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from a CI step run as another user
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
