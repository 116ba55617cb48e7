"""TestSpec, run() and Result: `logquake test` as a Python call.

Nothing here parses options or composes runs a second time: a TestSpec becomes the argument
list of `logquake test`, which the command line's own parser and `harness.testcmd.build_spec`
turn into a RunSpec (so a spec is refused exactly when the command would refuse it), and the
run itself is `python -m harness.testcmd` in a child process. The child gives each run what the
command gives it: its own signal handling, its own network namespace when it has faults, its
own Spark session, and no handlers or threads left behind in the caller's process.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from checkers.result import Anomaly, CheckResult, CheckerError, Claim, Witness
from harness import store
from harness.cli import EXIT_BAD_ARGUMENTS, EXIT_HARNESS_ERROR, ArgumentParser
from harness.spec import RunSpec, SpecError
from harness.testcmd import BadArgument, build_spec, probe_bootstrap_servers, register, test_argv

__all__ = ["Anomaly", "Result", "RunError", "SpecError", "TestSpec", "Witness", "run", "prepare"]

Verdict = Literal["valid", "invalid", "unknown"]
EXIT_INTERRUPTED = 130
# How long an interrupted run may take to heal its faults and tear its cluster down before it
# is killed (its brokers die with it: they carry a parent-death signal).
INTERRUPT_GRACE_S = 120.0


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    return parser


# `logquake test`'s defaults, read from its parser so the two cannot drift apart.
_DEFAULTS = _parser().parse_args(["test"])


@dataclass(frozen=True)
class TestSpec:
    """One test, field for field `logquake test`'s options (see the README), with its
    defaults. Units are in the names: `time_limit_s` is `--time-limit`, `rate_hz` is `--rate`.
    `seed=None` picks a random seed, which the Result reports. Config values are strings, as
    on the command line. `--test-count` has no field: call `run` once per seed."""

    __test__ = False  # not a pytest test class, although its name starts with "Test"

    workload: str = _DEFAULTS.workload
    nemesis: Sequence[str] = ()
    nemesis_interval_s: float = _DEFAULTS.nemesis_interval
    nemesis_options: Mapping[str, str] = field(default_factory=dict)  # --nemesis-option, e.g. partition_targets
    time_limit_s: float = _DEFAULTS.time_limit
    final_time_limit_s: float = _DEFAULTS.final_time_limit
    quiet_period_s: float = _DEFAULTS.quiet_period
    concurrency: int = _DEFAULTS.concurrency
    rate_hz: float = _DEFAULTS.rate
    brokers: int = _DEFAULTS.brokers
    seed: int | None = None
    client_config: Mapping[str, str] = field(default_factory=dict)
    cluster_config: Mapping[str, str] = field(default_factory=dict)
    workload_options: Mapping[str, Any] = field(default_factory=dict)
    bootstrap_servers: str | None = None
    toxiproxy_url: str | None = None  # --toxiproxy-url: a Toxiproxy server for the latency, bandwidth and flaky faults
    name: str | None = None
    sim: bool = False  # --sim: the whole test in this process on virtual time (see run())
    # --fault-schedule (with sim): a schedule of logquake.strategies.Fault's, or the path of a schedule file
    fault_schedule: Sequence[Any] | str | os.PathLike[str] | None = None

    def argv(self, results_dir: str | os.PathLike[str] = "results") -> list[str]:
        """The `logquake test` arguments of this spec (without a seed when it has none)."""
        if isinstance(self.nemesis, str):
            raise SpecError(f"nemesis: {self.nemesis!r} must be a list of fault names, e.g. ['kill', 'partition']")
        out = ["--workload", self.workload, "--nemesis", ",".join(self.nemesis),
               "--nemesis-interval", repr(float(self.nemesis_interval_s)),
               "--time-limit", repr(float(self.time_limit_s)), "--final-time-limit", repr(float(self.final_time_limit_s)),
               "--quiet-period", repr(float(self.quiet_period_s)), "--concurrency", str(self.concurrency),
               "--rate", repr(float(self.rate_hz)), "--brokers", str(self.brokers),
               "--results-dir", os.fspath(results_dir)]
        if self.seed is not None:
            out += ["--seed", str(self.seed)]
        for flag, items in (("--client-config", self.client_config), ("--cluster-config", self.cluster_config),
                            ("--workload-option", self.workload_options), ("--nemesis-option", self.nemesis_options)):
            for key, value in items.items():
                out += [flag, f"{key}={value}"]
        if self.bootstrap_servers is not None:
            out += ["--bootstrap-servers", self.bootstrap_servers]
        if self.toxiproxy_url is not None:
            out += ["--toxiproxy-url", self.toxiproxy_url]
        if self.name is not None:
            out += ["--name", self.name]
        if self.sim:
            out += ["--sim"]
        if self.fault_schedule is not None:
            if not isinstance(self.fault_schedule, (str, os.PathLike)):
                raise SpecError("fault_schedule: run() writes a schedule of faults to a file; argv() takes its path")
            out += ["--fault-schedule", os.fspath(self.fault_schedule)]
        return out


@dataclass(frozen=True)
class Prepared:
    """A TestSpec checked and composed by the command line's code: the RunSpec it runs as
    (seed chosen, reproduce command written) and the child's command line."""

    run_spec: RunSpec
    command: list[str]
    results_dir: Path


def prepare(spec: TestSpec, results_dir: str | os.PathLike[str] = "results") -> Prepared:
    """Check `spec` as `logquake test` checks its options; raises SpecError with the
    command's one-line reason."""
    results_root = Path(results_dir).resolve()
    spec = _with_schedule_file(spec, results_root)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = _parser().parse_args(["test", *spec.argv(results_root)])
    except SystemExit:
        raise SpecError(stderr.getvalue().strip().splitlines()[-1]) from None
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    try:
        run_spec = build_spec(args, seed)
    except BadArgument as exc:
        raise SpecError(str(exc)) from None
    command = [sys.executable, "-m", "harness.testcmd", *test_argv(args, seed, args.name)]
    return Prepared(run_spec=run_spec, command=command, results_dir=results_root)


def _with_schedule_file(spec: TestSpec, results_root: Path) -> TestSpec:
    """A schedule given as faults is written to `<results>/fault-schedules/<digest>.json`
    (named by its content, so a repeated schedule is one file) and passed by path."""
    schedule = spec.fault_schedule
    if schedule is None or isinstance(schedule, (str, os.PathLike)):
        return spec
    from logquake.strategies import Fault, schedule_json

    faults = list(schedule)
    if not all(isinstance(f, Fault) for f in faults):
        raise SpecError("fault_schedule: expected logquake.strategies.Fault's (or a schedule file's path)")
    try:
        text = schedule_json(faults, spec.brokers, spec.time_limit_s)
    except ValueError as exc:
        raise SpecError(f"fault_schedule: {exc}") from None
    folder = results_root / "fault-schedules"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return dataclasses.replace(spec, fault_schedule=str(path))


class RunError(RuntimeError):
    """The harness could not do its job (`logquake test` exit 255); no verdict."""

    def __init__(self, message: str, run_dir: Path | None, output: str) -> None:
        super().__init__(message)
        self.run_dir = run_dir
        self.output = output


@dataclass(frozen=True)
class Result:
    """The outcome of one run, from its results.json."""

    verdict: Verdict
    message: str
    run_dir: Path
    seed: int
    reproduce_command: str
    anomalies: list[Anomaly] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    checker_errors: list[CheckerError] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.verdict == "valid"

    @property
    def bad_anomalies(self) -> list[Anomaly]:
        """The anomalies the run's claims forbid: the reasons for an invalid verdict."""
        return [a for a in self.anomalies if not a.allowed]

    @property
    def report_path(self) -> Path:
        return self.run_dir / store.REPORT_FILE

    def describe(self) -> str:
        """A few lines for a person: verdict, every forbidden anomaly with one witness, the
        allowed ones by name, checker errors, the report and the command that reproduces it."""
        lines = [f"logquake verdict: {self.verdict} ({self.message})"]
        for anomaly in self.bad_anomalies:
            lines.append(f"  {anomaly.name} x{anomaly.count}"
                         + (f" (breaks {', '.join(anomaly.violates)})" if anomaly.violates else "")
                         + f": {anomaly.explanation}")
            if anomaly.witnesses:
                witness = anomaly.witnesses[0]
                lines.append(f"    witness: history ops {witness.op_indices} {witness.detail}")
        allowed = [f"{a.name} x{a.count}" for a in self.anomalies if a.allowed]
        if allowed:
            lines.append(f"  allowed by the run's claims: {', '.join(allowed)}")
        for error in self.checker_errors:
            lines.append(f"  checker {error.checker} failed: {error.error}")
        lines.append(f"  report: {self.report_path}")
        lines.append(f"  seed {self.seed}; reproduce with: {self.reproduce_command}")
        return "\n".join(lines)


_RESULTS_IN = re.compile(r"results in (.+?)(?:; reproduce with: .*)?$")
# testcmd.run_one's verdict line: "logquake test: INVALID (<message>); results in <dir>"
_VERDICT_LINE = re.compile(r"^logquake test: \S+ \((.*)\); results in ")


def run(spec: TestSpec, results_dir: str | os.PathLike[str] = "results", *,
        output: Any = None) -> Result:
    """Run `spec` as `logquake test` would and return its Result. The run's output (seed
    line, progress, verdict) is copied to `output` (default sys.stdout) as it comes.

    A simulated spec (`sim=True`) runs in this process: it needs no network namespace, and
    the checks of every run share one Spark session (a Hypothesis test of many schedules
    would otherwise start Spark once per example)."""
    prepared = prepare(spec, results_dir)
    if spec.sim:
        return _run_here(prepared, output if output is not None else sys.stdout)
    if prepared.run_spec.bootstrap_servers is not None:
        try:
            probe_bootstrap_servers(prepared.run_spec.bootstrap_servers)
        except BadArgument as exc:
            raise SpecError(str(exc)) from None
    sink = output if output is not None else sys.stdout
    code, text = _run_child(prepared.command, sink)
    return _result(code, text, prepared)


def _result(code: int, text: str, prepared: Prepared) -> Result:
    """The Result of a finished `logquake test` from its exit code and output."""
    run_dir = _run_dir(text)
    seed, command = prepared.run_spec.seed, prepared.run_spec.command
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt(f"logquake run interrupted; history kept in {run_dir}")
    if code == EXIT_BAD_ARGUMENTS:
        raise SpecError(_last_line(text))
    if code not in (0, 1, 2) or run_dir is None:
        raise RunError(f"logquake test exited {code}: {_last_line(text)} (seed {seed}; reproduce with: {command})",
                       run_dir, text)
    verdict: Verdict = {0: "valid", 1: "invalid", 2: "unknown"}[code]  # type: ignore[assignment]
    results_path = run_dir / store.RESULTS_FILE
    check = CheckResult.load(results_path) if results_path.exists() else CheckResult(valid="unknown")
    message = next((m.group(1) for m in map(_VERDICT_LINE.match, reversed(text.splitlines())) if m), verdict)
    return Result(verdict=verdict, message=message, run_dir=run_dir, seed=seed,
                  reproduce_command=command, anomalies=check.anomalies, claims=check.claims,
                  checker_errors=check.errors)


def _run_here(prepared: Prepared, sink: Any) -> Result:
    """A simulated run in this process, through `logquake test`'s own run_one."""
    from harness.testcmd import main as test_main

    text = io.StringIO()
    tee = _Tee(text, sink)
    with contextlib.redirect_stdout(tee):  # type: ignore[type-var]
        code = test_main(prepared.command[3:])
    return _result(code, text.getvalue(), prepared)


class _Tee(io.TextIOBase):
    def __init__(self, *sinks: Any) -> None:
        self.sinks = sinks

    def write(self, data: str) -> int:
        for sink in self.sinks:
            sink.write(data)
        return len(data)

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()


def _run_child(command: list[str], sink: Any) -> tuple[int, str]:
    """Run `logquake test`'s child, copying its output to `sink`; on KeyboardInterrupt ask
    it to stop (SIGINT: heal, tear down) and wait for that before re-raising."""
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", preexec_fn=_die_with_parent)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            sink.write(line)
        return proc.wait(), "".join(lines)
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            # Keep copying its output (it says what it is doing, and a full pipe would block
            # its teardown) until it exits; kill it if that takes too long or on a second interrupt.
            killer = threading.Timer(INTERRUPT_GRACE_S, proc.kill)
            killer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    sink.write(line)
                proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            finally:
                killer.cancel()
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def _die_with_parent() -> None:
    # If the caller is killed outright, the run (and with it its brokers) goes too.
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _run_dir(text: str) -> Path | None:
    for line in reversed(text.splitlines()):
        match = _RESULTS_IN.search(line.strip())
        if match:
            return Path(match.group(1))
    return None


def _last_line(text: str) -> str:
    """The command's own reason (its progress lines interleave with it): the last line it
    prefixed with its name, other than the seed line; else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith("logquake test: ") and not line.startswith("logquake test: seed ")]
    return (own or lines or ["(no output)"])[-1]
