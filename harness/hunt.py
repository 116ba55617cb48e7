"""`logquake hunt`: search for a failing simulated run, shrink its fault schedule, replay it.

Hypothesis draws fault schedules (`logquake.strategies.fault_schedules`: which faults, on
which brokers, when, for how long) for the workload and cluster given with `logquake
test`'s options. Each example is a simulated run (harness.sim, the run's seed) whose history
the real checkers judge, in one Spark session for the whole hunt. The first invalid verdict
stops the search; Hypothesis then shrinks the schedule to a minimal one that still fails,
and each of its faults is tried without (`drop_needless_faults`).
That schedule is written to a file and run once more as a normal run directory (results,
report, `fault-schedule.json`), and the command that replays it is printed.

The example database lives under the results directory (`hunt-db/`): a second hunt of the
same workload and cluster replays the failures stored there before drawing new schedules.
A hunt is deterministic for its seed unless the budget cuts it short (the budget is wall
time; `--max-examples` bounds it by count instead).

Exit codes as `logquake test`: 1 a failure found (and replayed invalid), 0 the budget spent
with none, 2 the replay's verdict unknown or valid (not reproduced), 254 bad arguments, 255 a
harness error. A simulated run that raises (anything but a HarnessError: a bug in the harness
or the simulated cluster, not a finding) ends the hunt at once with 255, naming the error and
the schedule; the schedule and the run's directory are kept under `<results>/hunt/<time>/`
with the command that replays it.

`--find ANOMALY[,ANOMALY]` hunts for a run whose results show one of those anomalies
(checkers.claims.VIOLATES names them: lost-write, unseen, ...) whether the run's claims allow
it or not, e.g. the losses Kafka documents under unclean leader election: the search, the
shrink and the replay all keep that predicate. Its exit codes: 3 (EXIT_FOUND_ALLOWED) the
replay shows a sought anomaly and the claims allow every anomaly of the run (valid: a
documented loss, not a bug), 1 the replay shows one and the verdict is invalid, 0 none found,
2 the replay does not show one (not reproduced) or its verdict is unknown.

`--base-schedule FILE` (a `--fault-schedule` file: its `faults` list) keeps those faults in
every example: each schedule is the base faults plus the drawn ones, the shrink removes only
drawn ones, and the minimal schedule written for the replay (and hunt.json) holds both. A
package holds one fault at a time, so the base's kinds must not be among --nemesis (a drawn
fault of the kind would end the base's early); the run gets their packages all the same.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from harness.cli import EXIT_BAD_ARGUMENTS, EXIT_HARNESS_ERROR

PROG = "logquake hunt"
EXIT_UNKNOWN = 2
# --find: the sought anomaly was found and the run's claims allow it (a valid verdict).
EXIT_FOUND_ALLOWED = 3
DB_DIR = "hunt-db"
SCRATCH_DIR = "hunt-scratch"
DEFAULT_BUDGET_S = 600.0
DEFAULT_MAX_EXAMPLES = 200
# Options of `logquake test` a hunt does not take: it is simulated, one search, its own schedule.
NOT_HUNT_OPTIONS = frozenset({"--sim", "--test-count", "--junit-xml", "--bootstrap-servers", "--toxiproxy-url",
                              "--fault-schedule", "--nemesis-interval", "--name"})


def register(subparsers: Any) -> None:
    from harness.testcmd import register as register_test

    p = subparsers.add_parser("hunt", help="search simulated runs for a failing fault schedule, shrink it, replay it",
                              description=__doc__.splitlines()[0])
    # `logquake test`'s own option definitions, so the two cannot drift apart.
    scratch = argparse.ArgumentParser(add_help=False).add_subparsers()
    register_test(scratch)
    test_parser = scratch.choices["test"]
    for action in test_parser._actions:
        if action.option_strings and not NOT_HUNT_OPTIONS & set(action.option_strings) and "-h" not in action.option_strings:
            p._add_action(action)
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, metavar="S",
                   help=f"wall seconds for the search and the shrink together (default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES, metavar="N",
                   help=f"most schedules to draw (default {DEFAULT_MAX_EXAMPLES}); with a budget that is not reached, "
                        "a seed gives the same hunt")
    p.add_argument("--max-faults", type=int, default=4, metavar="N", help="most faults in a schedule (default 4)")
    p.add_argument("--max-fault-targets", default=None, metavar="KIND=N[,KIND=N]",
                   help="most brokers one fault of KIND takes (kill, pause, clock, disk), e.g. kill=1: one broker "
                        "down at a time (default: any)")
    p.add_argument("--max-fault-duration", type=float, default=None, metavar="S",
                   help="longest fault in simulated seconds (default: the time limit)")
    p.add_argument("--max-shrinks", type=int, default=None, metavar="N",
                   help="most runs spent shrinking after the first failure (default: as many as the budget allows), "
                        "besides one run per fault of the shrunk schedule, tried without it; a count, unlike the "
                        "budget, keeps a seeded hunt deterministic")
    p.add_argument("--find", default=None, metavar="ANOMALY[,ANOMALY]",
                   help="stop at the first run whose results show one of these anomalies (e.g. lost-write), "
                        f"allowed by its claims or not; exit {EXIT_FOUND_ALLOWED} when found and allowed")
    p.add_argument("--live-links", default=None, metavar="SPEC[,SPEC]",
                   help="live targets the link kinds draw besides explicit links, resolved when the fault starts: "
                        "client>primary, client>primaries, primary>client, primaries>client (the client's links to "
                        "or from the leaders; default: none)")
    p.add_argument("--live-nodes", default=None, metavar="SPEC[,SPEC]",
                   help="live targets kill, pause and partition draw besides node ids and the other live specs, "
                        "resolved when the fault starts: raft-leader (the leader of the highest Raft epoch, its "
                        "LeaderChange committed or not; needs --nemesis-option node_kinds naming controller), primary "
                        "(kill and pause: the broker leading the most tested partitions), raft-leaders (partition, a chase: "
                        "the Raft leader cut off, then each later election's winner a drawn 0-1 s after it won) "
                        "(default: none)")
    p.add_argument("--base-schedule", default=None, metavar="FILE",
                   help="faults every example keeps (a --fault-schedule file with its 'faults' list, as a hunt "
                        "writes it): each schedule is these plus the drawn ones, and the shrink keeps them; their "
                        "kinds must not be among --nemesis")
    p.add_argument("--no-database", action="store_true",
                   help=f"neither replay nor store failures in <results>/{DB_DIR}")
    p.set_defaults(handler=handle, sim=True, test_count=1, junit_xml=None, bootstrap_servers=None, toxiproxy_url=None,
                   fault_schedule=None, nemesis_interval=10.0, name=None)


@dataclass
class Tally:
    """What the search did, for the summary line and hunt.json."""

    examples: int = 0
    invalid: int = 0
    errors: int = 0
    started_s: float = field(default_factory=time.monotonic)
    first_failure_s: float | None = None
    first_failure_example: int | None = None  # its number among the runs
    first_failure: tuple | None = None
    example_wall_s: float = 0.0
    search_wall_s: float = 0.0  # the search and the shrink, without the replay
    check_wall_s: float = 0.0
    last_error: str | None = None


class HuntAborted(BaseException):
    """A simulated run raised something other than a HarnessError: a bug in the harness or
    the simulated cluster, not a finding. It ends the search at once. A BaseException so that
    Hypothesis passes it through: an Exception is a failing example to Hypothesis, which it
    shrinks and replays, and a replay past the budget (not run: passing) made it a
    FlakyFailure that named neither the error nor a way to replay it."""

    def __init__(self, schedule: tuple, error: str, run_dir: Path):
        super().__init__(error)
        self.schedule = schedule
        self.error = error
        self.run_dir = run_dir  # the crashed run's directory, left in the scratch directory


class Hunt:
    """Runs one schedule at a time as a simulated run and judges it. Results are cached by
    schedule, so Hypothesis's final replay of the minimal example never re-runs it."""

    def __init__(self, spec: Any, scratch: Path, deadline_s: float, out: Any = None,
                 max_shrinks: int | None = None, find: frozenset[str] | None = None) -> None:
        self.spec = spec
        # None: hunt for an invalid verdict; else for a run showing one of these anomalies.
        self.find = find
        self.scratch = scratch
        self.deadline_s = deadline_s
        self.max_shrinks = max_shrinks
        # Runs allowed past max_shrinks: drop_needless_faults's, one per drawn fault it tries.
        self.extra_shrinks = 0
        self.out = out if out is not None else sys.stdout
        self.tally = Tally()
        self.verdicts: dict[str, Any] = {}

    def out_of_budget(self) -> bool:
        if self.max_shrinks is not None and self.tally.first_failure_example is not None:
            if self.tally.examples - self.tally.first_failure_example >= self.max_shrinks + self.extra_shrinks:
                return True
        return time.monotonic() >= self.deadline_s

    def key(self, schedule: tuple) -> str:
        """Schedules with the same ops are the same run (a fault cut to nothing by the next
        of its kind, two kills of one broker set at one instant): one run for all of them."""
        from logquake.strategies import ops

        return json.dumps(ops(schedule, self.spec.brokers, self.spec.time_limit_s, self.spec.controllers), sort_keys=True)

    def fails(self, schedule: tuple) -> bool:
        """True when the simulated run with this schedule is checked invalid (with `find`:
        when its results show one of the sought anomalies, allowed or not)."""
        key = self.key(schedule)
        if key in self.verdicts:
            return self.verdicts[key] is False
        if self.out_of_budget():
            return False  # not run: treated as passing, which ends the search and the shrink
        valid = self.judge(schedule)
        self.verdicts[key] = valid
        if valid is False:
            self.tally.invalid += 1
            if self.tally.first_failure_s is None:
                self.tally.first_failure_s = time.monotonic() - self.tally.started_s
                self.tally.first_failure_example = self.tally.examples
                self.tally.first_failure = schedule
        return valid is False

    def judge(self, schedule: tuple) -> Any:
        """The checked verdict of one simulated run of `schedule` (None: it could not run)."""
        self.tally.examples += 1
        started = time.monotonic()
        with _quiet_asyncio():
            return self._judge(schedule, started)

    def _judge(self, schedule: tuple, started: float) -> Any:
        from harness.analyze import analyze_run
        from harness.run import HarnessError, open_run
        from harness.sim.run import FaultOp, execute_sim
        from logquake.strategies import ops

        fault_ops = [FaultOp.from_json(op) for op in ops(schedule, self.spec.brokers, self.spec.time_limit_s,
                                                         self.spec.controllers)]
        run = open_run(self.spec, self.scratch)
        keep = False
        try:
            try:
                execute_sim(run, fault_ops, check_history=False)
            except HarnessError as exc:
                self.tally.errors += 1
                self.tally.last_error = str(exc)
                self._say(schedule, "harness error", started, detail=str(exc))
                return None
            except Exception as exc:  # not a verdict: the hunt stops and keeps the run (handle)
                self.tally.errors += 1
                self.tally.last_error = f"{type(exc).__name__}: {exc}"
                self._say(schedule, "CRASHED", started, detail=self.tally.last_error)
                keep = True
                raise HuntAborted(schedule, self.tally.last_error, run.run_dir) from exc
            finally:
                run.close()
            checked = time.monotonic()
            try:
                result = analyze_run(run.run_dir)
            except Exception as exc:  # a history the checkers cannot read is not a finding
                self.tally.errors += 1
                self.tally.last_error = f"{type(exc).__name__}: {exc}"
                self._say(schedule, "check failed", started, detail=self.tally.last_error)
                return None
            self.tally.check_wall_s += time.monotonic() - checked
            if self.find is not None:
                return self._sought(schedule, result, started)
            bad = sorted({a.name for a in result.anomalies if not a.allowed})
            self._say(schedule, {True: "valid", False: "INVALID"}.get(result.valid, str(result.valid)), started,
                      detail=", ".join(bad))
            return result.valid
        finally:
            self.tally.example_wall_s += time.monotonic() - started
            if not keep:
                shutil.rmtree(run.run_dir, ignore_errors=True)

    def _sought(self, schedule: tuple, result: Any, started: float) -> bool | None:
        """--find's verdict of a checked run, as `valid` is read without it: False when it
        shows a sought anomaly (the search stops), True when not, None when its verdict is
        unknown and it shows none (the checkers could not judge all of it)."""
        seen = sought_anomalies(result.anomalies, self.find or frozenset())
        if seen:
            verdict = "FOUND"
        else:
            verdict = {True: "valid", False: "invalid"}.get(result.valid, str(result.valid))
        self._say(schedule, verdict, started, detail=", ".join(f"{n} {'allowed' if ok else 'not allowed'}"
                                                               for n, ok in sorted(seen.items())))
        if seen:
            return False
        return None if result.valid not in (True, False) else True

    def _say(self, schedule: tuple, verdict: str, started: float, detail: str = "") -> None:
        faults = "; ".join(describe_fault(f) for f in schedule)
        print(f"{PROG}: #{self.tally.examples} {verdict} in {time.monotonic() - started:.1f} s: {faults}"
              + (f" ({detail})" if detail else ""), file=self.out, flush=True)


@contextlib.contextmanager
def _quiet_asyncio() -> Iterator[None]:
    """asyncio logs each abandoned client future ("exception was never retrieved") when the
    simulation's clients are torn down: hundreds of lines per hunt that say nothing about
    the verdict. The run's own harness.log keeps the clients' log."""
    log = logging.getLogger("asyncio")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def sought_anomalies(anomalies: Any, find: frozenset[str]) -> dict[str, bool]:
    """{name: allowed} of the anomalies among `find` (Anomaly objects or results.json dicts)."""
    seen: dict[str, bool] = {}
    for a in anomalies:
        name, allowed = (a["name"], a["allowed"]) if isinstance(a, dict) else (a.name, a.allowed)
        if name in find:
            seen[name] = seen.get(name, True) and bool(allowed)
    return seen


def parse_max_targets(text: str | None) -> dict[str, int] | None:
    """--max-fault-targets KIND=N[,KIND=N] (BadArgument naming the bad item)."""
    from harness.testcmd import BadArgument

    if text is None:
        return None
    bounds: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        kind, sep, count = item.partition("=")
        if not sep or not count.strip().isdigit():
            raise BadArgument(f"--max-fault-targets {item!r}: expected KIND=N, e.g. kill=1")
        bounds[kind.strip()] = int(count)
    return bounds


def parse_find(text: str | None) -> frozenset[str] | None:
    """--find's anomaly names, checked against the checkers' (BadArgument names the unknown)."""
    from checkers.claims import VIOLATES
    from harness.testcmd import BadArgument

    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise BadArgument("--find: name the anomalies to hunt for, e.g. --find lost-write,unseen")
    unknown = [n for n in names if n not in VIOLATES]
    if unknown:
        raise BadArgument(f"--find {','.join(unknown)}: not an anomaly the checkers report; known: "
                          f"{', '.join(sorted(VIOLATES))}")
    return frozenset(names)


def describe_fault(fault: Any) -> str:
    """kill[0,1] 1+2s; clock[2] +1500 ms 0+1s; link-delay[0>1,client>0] delay_ms=8,jitter_ms=0 1+2s;
    disk[1] slow-fsync delay_ms=64 0+1s."""
    if isinstance(fault.targets, str):
        targets = fault.targets
    else:
        targets = ",".join(">".join(map(str, t)) if isinstance(t, tuple) else str(t) for t in fault.targets)
    how = f" {fault.delta_ms:+d} ms" if fault.kind == "clock" else ""
    how += f" {fault.variant}" if getattr(fault, "variant", "") else ""
    params = getattr(fault, "params", ())
    how += " " + ",".join(f"{k}={v:g}" for k, v in params) if params else ""
    return f"{fault.kind}[{targets}]{how} {fault.start_s:g}+{fault.duration_s:g}s"


def database_key(spec: Any, kinds: list[str], args: argparse.Namespace) -> bytes:
    """Failures are stored per workload, cluster, clients, fault kinds and schedule bounds
    (not per seed: a failure found under one seed is worth replaying under another)."""
    material = json.dumps({"workload": spec.workload, "workload_options": spec.workload_options, "brokers": spec.brokers,
                           "cluster_config": spec.cluster_config, "client_config": spec.client_config,
                           "kinds": kinds, "time_limit_s": spec.time_limit_s, "max_faults": args.max_faults,
                           "max_fault_duration": args.max_fault_duration, "rate_hz": spec.rate_hz,
                           "concurrency": spec.concurrency}, sort_keys=True, default=str)
    if getattr(args, "max_targets", None):
        material += json.dumps({"max_targets": args.max_targets}, sort_keys=True)
    if getattr(args, "live_links", None):
        material += json.dumps({"live_links": args.live_links})
    if getattr(args, "live_nodes", None):
        material += json.dumps({"live_nodes": args.live_nodes})
    if getattr(args, "base_faults", None):
        # Other fixed faults, other runs (a hunt without a base keeps its old key).
        material += json.dumps({"base": [f.as_json() for f in args.base_faults]}, sort_keys=True)
    if spec.controllers != 1 or "node_kinds" in spec.nemesis_options:
        # Controllers as targets draw other schedules (a hunt on one controller keeps its old key).
        material += json.dumps({"controllers": spec.controllers, "node_kinds": spec.nemesis_options.get("node_kinds")})
    find = getattr(args, "find_names", None)
    if find:
        # Another predicate, other stored examples (a hunt without --find keeps its old key).
        material += json.dumps({"find": sorted(find)})
    return b"logquake-hunt:" + hashlib.sha256(material.encode()).hexdigest().encode()


def read_base_schedule(path: str, kinds: list[str]) -> tuple:
    """--base-schedule's faults (logquake.strategies.Fault), in the file's order;
    BadArgument naming the file and what is wrong."""
    from harness.testcmd import BadArgument
    from logquake.strategies import Fault

    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadArgument(f"--base-schedule {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise BadArgument(f"--base-schedule {path}: not JSON ({exc})") from None
    items = raw.get("faults") if isinstance(raw, dict) else None
    if not isinstance(items, list) or not items:
        raise BadArgument(f"--base-schedule {path}: expected an object with a non-empty 'faults' list (what "
                          "logquake.strategies.schedule_json and a hunt write); its 'ops' alone are not enough")
    base = []
    for i, item in enumerate(items):
        try:
            base.append(Fault.from_json(item))
        except ValueError as exc:
            raise BadArgument(f"--base-schedule {path}: fault {i}: {exc}") from None
    shared = sorted({f.kind for f in base} & set(kinds))
    if shared:
        raise BadArgument(f"--base-schedule {path} has {', '.join(shared)} faults, which --nemesis also draws: a "
                          "package holds one fault at a time, so a drawn one would end the base's early; leave "
                          f"{', '.join(shared)} out of --nemesis")
    return tuple(base)


def check_base_schedule(path: str, base: tuple, spec: Any) -> None:
    """BadArgument when a base fault starts after the main phase or names a node the run lacks."""
    from harness.testcmd import BadArgument
    from logquake.strategies import ops

    late = [f for f in base if f.start_s >= spec.time_limit_s]
    if late:
        raise BadArgument(f"--base-schedule {path}: {describe_fault(late[0])} starts at or after the main phase's end "
                          f"({spec.time_limit_s:g} s)")
    try:
        ops(base, spec.brokers, spec.time_limit_s, spec.controllers)
    except ValueError as exc:
        raise BadArgument(f"--base-schedule {path}: {exc}") from None


def search(hunt: Hunt, strategy: Any, seed: int, database: Any, key: bytes, max_examples: int) -> tuple | None:
    """Hypothesis's search and shrink over `strategy`; the minimal failing schedule or None."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed

    found: list[tuple] = []

    class Found(Exception):
        pass

    @settings(database=database, max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False,
              phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
    @hypothesis_seed(seed)
    @given(strategy)
    def example(schedule: tuple) -> None:
        if hunt.fails(schedule):
            found[:] = [schedule]
            raise Found

    example._hypothesis_internal_database_key = key  # type: ignore[attr-defined]
    try:
        example()
    except Found:
        return found[0]
    return None


def drop_needless_faults(hunt: Hunt, minimal: tuple, base_count: int = 0) -> tuple:
    """`minimal` without each drawn fault whose removal still fails, tried one at a time,
    first to last. Hypothesis's shrinker can stop at a local minimum that keeps a fault the
    failure does not need (a 0.1-s kill of the primaries in front of the one that matters,
    about one search in ten on Hypothesis 6.170); one run per drawn fault, most of them
    cached, makes the reported schedule one from which no single fault can go. Those runs
    come on top of --max-shrinks (which Hypothesis's shrink may use up: a 4-fault schedule of
    which one would do was reported so) but within the budget. The first `base_count` faults
    are the base schedule's and stay; a run past the budget counts as passing, so the fault
    stays."""
    hunt.extra_shrinks += max(0, len(minimal) - base_count)
    kept = list(minimal)
    index = base_count
    while index < len(kept) and len(kept) > base_count + 1:
        without = (*kept[:index], *kept[index + 1:])
        if hunt.fails(without):
            kept = list(without)
        else:
            index += 1
    return tuple(kept)


def handle(args: argparse.Namespace) -> int:
    from harness.testcmd import BadArgument, build_spec

    seed = args.seed if args.seed is not None else __import__("secrets").randbelow(2**31)
    kinds = [n.strip() for n in args.nemesis.split(",") if n.strip()]
    try:
        if not kinds:
            raise BadArgument("--nemesis: name the fault kinds to search over, e.g. --nemesis kill,partition")
        if args.budget <= 0:
            raise BadArgument(f"--budget must be positive, got {args.budget:g}")
        if args.max_examples < 1 or args.max_faults < 1:
            raise BadArgument("--max-examples and --max-faults must be at least 1")
        if args.max_shrinks is not None and args.max_shrinks < 0:
            raise BadArgument(f"--max-shrinks must be at least 0, got {args.max_shrinks}")
        if args.max_fault_duration is not None and args.max_fault_duration <= 0:
            raise BadArgument(f"--max-fault-duration must be positive, got {args.max_fault_duration:g}")
        try:
            import hypothesis  # noqa: F401
        except ImportError:
            raise BadArgument("logquake hunt needs Hypothesis (pip install hypothesis)") from None
        from logquake.strategies import KINDS, fault_schedules

        args.find_names = parse_find(args.find)
        args.base_faults = read_base_schedule(args.base_schedule, kinds) if args.base_schedule else ()
        base_kinds = [k for k in dict.fromkeys(f.kind for f in args.base_faults) if k not in kinds]
        if base_kinds:
            # The run performs the base's faults too: their packages, as a replay names them.
            args.nemesis = ",".join([*kinds, *base_kinds])

        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise BadArgument(f"--nemesis {','.join(unknown)}: the hunt draws schedules of {', '.join(KINDS)} only")
        spec = build_spec(args, seed)
        if args.base_faults:
            check_base_schedule(args.base_schedule, args.base_faults, spec)
        try:
            args.max_targets = parse_max_targets(args.max_fault_targets)
            # --nemesis-option node_kinds=broker,controller: controllers are targets, as in `logquake test`.
            node_kinds = [k.strip() for k in spec.nemesis_options.get("node_kinds", "broker").split(",") if k.strip()]
            live_links = [n.strip() for n in (args.live_links or "").split(",") if n.strip()]
            live_nodes = [n.strip() for n in (args.live_nodes or "").split(",") if n.strip()]
            strategy = fault_schedules(spec.brokers, spec.time_limit_s, kinds, max_faults=args.max_faults,
                                       max_duration_s=args.max_fault_duration, max_targets=args.max_targets,
                                       controllers=spec.controllers, node_kinds=node_kinds, live_links=live_links,
                                       live_nodes=live_nodes)
            if args.base_faults:
                # The base goes first in every example; Hypothesis shrinks only what it drew.
                strategy = strategy.map(lambda drawn, base=args.base_faults: (*base, *drawn))
        except ValueError as exc:
            raise BadArgument(str(exc)) from None
    except BadArgument as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS

    from hypothesis.database import DirectoryBasedExampleDatabase

    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    database = None if args.no_database else DirectoryBasedExampleDatabase(str(results / DB_DIR))
    (results / SCRATCH_DIR).mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="hunt-", dir=results / SCRATCH_DIR))
    name = f"hunt-{args.workload}-{'-'.join(kinds)}"
    example_spec = replace(spec, name=name, command=f"(a {PROG} example; seed {seed})")
    find = args.find_names
    hunt = Hunt(example_spec, scratch, time.monotonic() + args.budget, max_shrinks=args.max_shrinks, find=find)
    print(f"{PROG}: seed {seed}; budget {args.budget:g} s, at most {args.max_examples} schedules of "
          f"{', '.join(kinds)} on {spec.brokers} brokers over {spec.time_limit_s:g} simulated s"
          + (f"; looking for {', '.join(sorted(find))}, allowed or not" if find else "")
          + (f"; every schedule starts with the base {'; '.join(describe_fault(f) for f in args.base_faults)}"
             if args.base_faults else ""), flush=True)
    try:
        minimal = search(hunt, strategy, seed, database, database_key(spec, kinds, args), args.max_examples)
        if minimal is not None:
            minimal = drop_needless_faults(hunt, minimal, len(args.base_faults))
    except HuntAborted as crash:
        return report_crash(args, spec, seed, kinds, crash, hunt.tally)
    except Exception as exc:
        print(f"{PROG}: harness error during the search: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(OSError):
            (results / SCRATCH_DIR).rmdir()  # only when no other hunt is using it
    tally = hunt.tally
    elapsed_s = tally.search_wall_s = time.monotonic() - tally.started_s
    summary = (f"{tally.examples} simulated runs in {elapsed_s:.1f} s ({tally.check_wall_s:.1f} s checking), "
               f"{tally.errors} harness errors")
    if minimal is None:
        if tally.examples == 0 and tally.errors == 0:
            print(f"{PROG}: no schedule was run within the budget", file=sys.stderr)
            return EXIT_HARNESS_ERROR
        if tally.errors and tally.errors == tally.examples:
            print(f"{PROG}: every run failed: {tally.last_error}", file=sys.stderr)
            return EXIT_HARNESS_ERROR
        print(f"{PROG}: no {'run showing ' + ', '.join(sorted(find)) if find else 'failure'} found: {summary}",
              flush=True)
        return 0
    what = f"a run showing {', '.join(sorted(find))}" if find else "failure"
    besides = f" besides the base's {len(args.base_faults)}" if args.base_faults else ""
    print(f"{PROG}: {what} found after {tally.first_failure_s:.1f} s, shrunk to {len(minimal) - len(args.base_faults)} "
          f"fault(s){besides} by "
          f"{elapsed_s:.1f} s: {'; '.join(describe_fault(f) for f in minimal)}", flush=True)
    return replay(args, spec, seed, kinds, minimal, tally, summary)


def replay(args: argparse.Namespace, spec: Any, seed: int, kinds: list[str], minimal: tuple, tally: Tally,
           summary: str) -> int:
    """Run the minimal schedule once more as a normal run directory and print the command
    that replays it from the copy of the schedule in that directory."""
    from harness.hunt_schedule import SCHEDULE_FILE
    from harness.testcmd import build_spec, run_one, test_argv
    from logquake.strategies import schedule_json

    hunt_dir = _new_hunt_dir(Path(args.results_dir))
    schedule_path = hunt_dir / SCHEDULE_FILE
    schedule_path.write_text(schedule_json(minimal, spec.brokers, spec.time_limit_s, spec.controllers), encoding="utf-8")
    test_args = argparse.Namespace(**vars(args))
    test_args.fault_schedule = str(schedule_path)
    test_args.name = f"hunt-{args.workload}-{'-'.join(kinds)}"
    try:
        replay_spec = build_spec(test_args, seed)
    except Exception as exc:
        print(f"{PROG}: the minimal schedule cannot be replayed: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    code, valid = run_one(replay_spec, args.results_dir, sim=True, fault_schedule=str(schedule_path))
    run_dir = _latest_run(Path(args.results_dir), test_args.name)
    if run_dir is not None and (run_dir / SCHEDULE_FILE).exists():
        test_args.fault_schedule = str(run_dir / SCHEDULE_FILE)
    command = shlex.join(["logquake", "test", *test_argv(test_args, seed, test_args.name)])
    find = getattr(args, "find_names", None)
    seen = _replay_anomalies(run_dir, find) if find else {}
    first = tally.first_failure or ()
    info = {"seed": seed, "search_and_shrink_s": round(tally.search_wall_s, 3), "summary": summary,
            "examples": tally.examples, "first_failure_s": tally.first_failure_s,
            "first_failure_example": tally.first_failure_example, "first_failure": [f.as_json() for f in first],
            "check_wall_s": round(tally.check_wall_s, 3), "replay_verdict": valid,
            "replay_exit_code": code, "run_dir": str(run_dir) if run_dir else None, "replay_command": command,
            "faults": [f.as_json() for f in minimal]}
    if getattr(args, "base_faults", ()):
        info["base_schedule"] = str(Path(args.base_schedule).resolve())
        info["base_faults"] = [f.as_json() for f in args.base_faults]  # the first of "faults"
    if find:
        info["find"] = sorted(find)
        info["replay_found"] = seen  # {anomaly: allowed by the run's claims}
    (hunt_dir / "hunt.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{PROG}: {summary}; minimal run in {run_dir}", flush=True)
    if find:
        return _found_exit(command, code, valid, seen, find)
    print(f"{PROG}: replay the minimal failure with: {command}", flush=True)
    if valid is True:
        # A seeded simulation replays exactly, so this is a bug of ours, not a finding: the
        # verdict is unknown rather than "no failure" (0).
        print(f"{PROG}: the replay of the minimal schedule was valid: the failure did not reproduce", file=sys.stderr)
        return EXIT_UNKNOWN
    return code


def _new_hunt_dir(results: Path) -> Path:
    """results/hunt/<UTC time>[+n]/, made."""
    hunt_dir = results / "hunt" / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    n = 1
    while hunt_dir.exists():
        n += 1
        hunt_dir = hunt_dir.with_name(f"{hunt_dir.name.split('+')[0]}+{n}")
    hunt_dir.mkdir(parents=True)
    return hunt_dir


def report_crash(args: argparse.Namespace, spec: Any, seed: int, kinds: list[str], crash: HuntAborted,
                 tally: Tally) -> int:
    """A simulated run raised (HuntAborted): keep its run directory and its schedule under
    results/hunt/<time>/, say that it is a harness error and how to replay it; exit 255."""
    from harness.hunt_schedule import SCHEDULE_FILE
    from harness.testcmd import test_argv
    from logquake.strategies import schedule_json

    hunt_dir = _new_hunt_dir(Path(args.results_dir))
    schedule_text = schedule_json(crash.schedule, spec.brokers, spec.time_limit_s, spec.controllers)
    schedule_path = hunt_dir / SCHEDULE_FILE
    schedule_path.write_text(schedule_text, encoding="utf-8")
    run_dir = hunt_dir / "crashed-run"
    try:
        shutil.move(str(crash.run_dir), run_dir)
        (run_dir / SCHEDULE_FILE).write_text(schedule_text, encoding="utf-8")  # the directory replays alone
    except OSError as exc:
        print(f"{PROG}: the crashed run's directory {crash.run_dir} could not be kept: {exc}", file=sys.stderr)
        run_dir = None
    test_args = argparse.Namespace(**vars(args))
    test_args.fault_schedule = str(schedule_path)
    test_args.name = f"hunt-{args.workload}-{'-'.join(kinds)}"
    command = shlex.join(["logquake", "test", *test_argv(test_args, seed, test_args.name)])
    faults = "; ".join(describe_fault(f) for f in crash.schedule)
    info = {"seed": seed, "error": crash.error, "examples": tally.examples, "faults": [f.as_json() for f in crash.schedule],
            "run_dir": str(run_dir) if run_dir else None, "replay_command": command,
            "first_failure_example": tally.first_failure_example,
            "first_failure": [f.as_json() for f in tally.first_failure or ()]}
    (hunt_dir / "hunt.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{PROG}: harness error: simulated run #{tally.examples} raised {crash.error} with the schedule {faults}: "
          "a bug in the harness or the simulated cluster, not a failure the checkers found", file=sys.stderr)
    if tally.first_failure is not None:
        print(f"{PROG}: run #{tally.first_failure_example} had failed before it "
              f"({'; '.join(describe_fault(f) for f in tally.first_failure)}); the hunt stopped unshrunk",
              file=sys.stderr)
    where = f"; its run directory (harness.log has the traceback) is {run_dir}" if run_dir else ""
    print(f"{PROG}: schedule kept in {schedule_path}{where}; replay it with: {command}", flush=True)
    return EXIT_HARNESS_ERROR


def _replay_anomalies(run_dir: Path | None, find: frozenset[str]) -> dict[str, bool]:
    """{sought anomaly: allowed} in the replay run's results.json (empty when it has none)."""
    from harness import store

    try:
        results = json.loads((run_dir / store.RESULTS_FILE).read_text(encoding="utf-8")) if run_dir else {}
    except (OSError, ValueError):
        return {}
    return sought_anomalies(results.get("anomalies") or [], find)


def _found_exit(command: str, code: int, valid: Any, seen: dict[str, bool], find: frozenset[str]) -> int:
    """--find's last lines and exit code (the module docstring lists them)."""
    if not seen:
        print(f"{PROG}: replay the minimal run with: {command}", flush=True)
        print(f"{PROG}: the replay of the minimal schedule shows none of {', '.join(sorted(find))}: "
              "the finding did not reproduce", file=sys.stderr)
        return EXIT_UNKNOWN
    names = ", ".join(f"{n} ({'allowed' if ok else 'not allowed'} by the run's claims)" for n, ok in sorted(seen.items()))
    print(f"{PROG}: replay the minimal run showing {', '.join(sorted(seen))} with: {command}", flush=True)
    if valid is True:
        print(f"{PROG}: found {names}; the verdict is valid: the claims allow it (exit {EXIT_FOUND_ALLOWED})",
              flush=True)
        return EXIT_FOUND_ALLOWED
    if valid is False:
        print(f"{PROG}: found {names}; the verdict is invalid (exit 1)", flush=True)
        return 1
    print(f"{PROG}: found {names}; the verdict is {valid} (exit {EXIT_UNKNOWN})", flush=True)
    return code if code not in (0, EXIT_FOUND_ALLOWED) else EXIT_UNKNOWN


def _latest_run(results: Path, name: str) -> Path | None:
    runs = sorted(p for p in (results / name).glob("2*") if p.is_dir())
    return runs[-1] if runs else None
