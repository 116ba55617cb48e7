"""`logquake test`: run a Jepsen-style test end to end and exit with its verdict.

The first and last lines printed give the seed and the exact command that reproduces the
run. Bad input exits 254 with a one-line reason; a broken harness exits 255; otherwise the
exit code is the verdict (0 valid, 1 invalid, 2 unknown; 130 when interrupted).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import signal
import socket
import sys
import time
from typing import Any

from harness.cli import EXIT_BAD_ARGUMENTS, EXIT_HARNESS_ERROR
from harness.spec import (BACKENDS, NEMESIS_NAMES, PROCESS_CONTROL_NEMESES, PROXY_NEMESES, SIM_ONLY_NEMESES, RunSpec, SpecError,
                          parse_key_values)
from workloads.registry import WORKLOAD_NAMES, load as load_workload

PROBE_TIMEOUT_S = 2.0
PROG = "logquake test"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("test", help="run a test: workload + faults against a cluster, then check the history",
                              description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="queue", help=f"one of {', '.join(WORKLOAD_NAMES)} (default queue)")
    p.add_argument("--nemesis", default="", help=f"comma list of faults: {', '.join(NEMESIS_NAMES)}; with --sim also "
                                                 f"{', '.join(SIM_ONLY_NEMESES)} (default none)")
    p.add_argument("--nemesis-interval", type=float, default=10.0, metavar="S",
                   help="mean seconds between fault ops of each kind (default 10)")
    p.add_argument("--nemesis-option", action="append", default=[], metavar="KEY=VALUE",
                   help="fault option, e.g. partition_targets=primaries (comma lists of targets; repeatable)")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="main phase length (default 60)")
    p.add_argument("--final-time-limit", type=float, default=60.0, metavar="S",
                   help="longest the final read-to-the-end phase may take (default 60)")
    p.add_argument("--quiet-period", type=float, default=5.0, metavar="S",
                   help="pause after healing, before the final phase (default 5)")
    p.add_argument("--concurrency", type=int, default=5, help="client threads (default 5)")
    p.add_argument("--rate", type=float, default=100.0, metavar="HZ", help="target ops/s across all clients (default 100)")
    p.add_argument("--brokers", type=int, default=default_brokers(),
                   help=f"brokers in the bundled cluster (default {default_brokers()})")
    p.add_argument("--controllers", type=int, default=1, choices=(1, 3, 5),
                   help="controllers of the bundled cluster: 1, or a Raft metadata quorum of 3 or 5 (default 1)")
    p.add_argument("--seed", type=int, default=None, help="run seed (default: random, printed)")
    p.add_argument("--test-count", type=int, default=1, help="run the test this many times (default 1)")
    p.add_argument("--client-config", action="append", default=[], metavar="KEY=VALUE",
                   help="librdkafka setting for every client (repeatable)")
    p.add_argument("--cluster-config", action="append", default=[], metavar="KEY=VALUE",
                   help="broker setting, Kafka names (repeatable); with --bootstrap-servers only the topic-level "
                        "ones apply, to the topics the test creates")
    p.add_argument("--workload-option", action="append", default=[], metavar="KEY=VALUE",
                   help="workload option, e.g. sub_via=subscribe or commit_mode=before (repeatable)")
    p.add_argument("--bootstrap-servers", default=None, metavar="HOST:PORT,...",
                   help="test an external Kafka-protocol cluster instead of the bundled one")
    p.add_argument("--toxiproxy-url", default=None, metavar="http://HOST:PORT",
                   help="a Toxiproxy server to carry the cluster's proxies for the latency, bandwidth and flaky nemeses "
                        "(default: logquake's own proxy, in the run)")
    p.add_argument("--name", default=None, help="test name: results/<name>/<timestamp>/ (default from workload and faults)")
    p.add_argument("--results-dir", default="results", help="results root (default ./results)")
    p.add_argument("--junit-xml", default=None, metavar="PATH",
                   help="also write the verdict as JUnit XML for CI: a testsuite per run, a testcase per claim")
    p.add_argument("--sim", action="store_true",
                   help="run the whole test in this process on virtual time (simulated cluster, aiokafka clients); "
                        "phase lengths are simulated seconds, and a seed replays exactly")
    p.add_argument("--backend", default="local", choices=BACKENDS,
                   help="where the bundled cluster runs: local (processes in the run's private network namespace) or "
                        "docker (a container per node on a bridge network, from `logquake image build`'s image; "
                        "see README, Docker back end) (default local)")
    p.add_argument("--docker-compose", default=None, metavar="FILE",
                   help="bring up this Compose file's project for the run and test the services --nodes names, with "
                        "kill, pause and partition faults on them; removed (down -v) at the end (see README, Docker "
                        "Compose)")
    p.add_argument("--nodes", default=None, metavar="SERVICE[:PORT],...",
                   help="with --docker-compose: the services that are the Kafka brokers (port of their Kafka "
                        "listener, default 9092)")
    p.add_argument("--fault-schedule", default=None, metavar="FILE",
                   help="with --sim: perform this fault schedule (JSON ops, as `logquake hunt` writes) instead of the "
                        "packages' seeded one; --nemesis must name every package it uses")
    p.set_defaults(handler=handle)


def default_brokers() -> int:
    """3, as Jepsen's Kafka tests and Kafka's replication defaults assume."""
    return 3


class BadArgument(ValueError):
    pass


IN_FLIGHT_KEYS = ("max.in.flight.requests.per.connection", "max.in.flight")
IDEMPOTENT_MAX_IN_FLIGHT = "5"
JEPSEN_MAX_IN_FLIGHT = "1000000"  # Jepsen's non-idempotent producer: unbounded, so retries reorder


def _conflicts_with_idempotence(overrides: dict[str, str]) -> bool:
    acks = overrides.get("acks", overrides.get("request.required.acks"))
    if acks is not None and str(acks).strip().lower() not in ("all", "-1"):
        return True
    retries = overrides.get("retries", overrides.get("message.send.max.retries"))
    if retries is not None and str(retries).strip() == "0":
        return True
    in_flight = next((overrides[k] for k in IN_FLIGHT_KEYS if k in overrides), None)
    try:
        return in_flight is not None and int(str(in_flight)) > int(IDEMPOTENT_MAX_IN_FLIGHT)
    except ValueError:
        return False  # librdkafka names the bad value itself


def effective_client_config(defaults: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """The workload's defaults under the user's --client-config. A transactional.id turns
    idempotence on (librdkafka refuses one without it). Unless the user chose a value (then
    theirs to answer for), an idempotent or transactional producer gets 5 requests in flight
    (librdkafka allows at most 5 with idempotence, as the Java client does), and a
    non-idempotent one Jepsen's unbounded in-flight requests."""
    config = {**defaults, **overrides}
    if "transactional.id" in config and "enable.idempotence" not in overrides:
        config["enable.idempotence"] = "true"  # transactions need idempotence
    elif "enable.idempotence" not in overrides and _conflicts_with_idempotence(overrides):
        # The default idempotence is a default, as in Kafka's Java client (3.0+), which turns
        # it off when the user asks for what it cannot give (acks other than all, no retries,
        # more than 5 in flight); librdkafka would refuse the producer instead.
        config["enable.idempotence"] = "false"
    idempotent = (str(config.get("enable.idempotence", "false")).strip().lower() in ("true", "1", "yes")
                  or "transactional.id" in config)
    if not any(key in overrides for key in IN_FLIGHT_KEYS):
        for key in IN_FLIGHT_KEYS:
            config.pop(key, None)
        config["max.in.flight.requests.per.connection"] = IDEMPOTENT_MAX_IN_FLIGHT if idempotent else JEPSEN_MAX_IN_FLIGHT
    return config


def build_spec(args: argparse.Namespace, seed: int) -> RunSpec:
    """The spec for one run of these arguments; raises BadArgument with a one-line reason."""
    try:
        if args.workload not in WORKLOAD_NAMES:
            raise BadArgument(f"unknown workload {args.workload!r}; known: {', '.join(WORKLOAD_NAMES)}")
        nemeses = [n.strip() for n in args.nemesis.split(",") if n.strip()]
        for nemesis in nemeses:
            if nemesis in SIM_ONLY_NEMESES:
                if not getattr(args, "sim", False):
                    raise BadArgument(f"--nemesis {nemesis} runs only in the simulation, whose network draws each "
                                      "message's fate from the seed: add --sim")
            elif nemesis not in NEMESIS_NAMES:
                raise BadArgument(f"unknown nemesis {nemesis!r}; known: {', '.join(NEMESIS_NAMES)}")
        compose = _compose_nodes(args)
        if args.bootstrap_servers is not None and compose is None:
            refused = [n for n in nemeses if n in PROCESS_CONTROL_NEMESES and n not in PROXY_NEMESES]
            if refused:
                raise BadArgument(f"--nemesis {','.join(refused)} needs control of the broker processes, which an "
                                  "external cluster (--bootstrap-servers) does not give; drop --nemesis or use the "
                                  "bundled cluster")
        if args.test_count < 1:
            raise BadArgument(f"--test-count must be at least 1, got {args.test_count}")
        backend = getattr(args, "backend", "local")
        if backend != "local" and getattr(args, "sim", False):
            raise BadArgument(f"--sim runs the cluster's simulation in this process; --backend {backend} runs real nodes")
        if getattr(args, "sim", False) and args.bootstrap_servers is not None:
            raise BadArgument("--sim runs the bundled cluster's simulation in this process; it cannot test an external "
                              "cluster (--bootstrap-servers)")
        client_overrides = parse_key_values(args.client_config, "--client-config")
        cluster_config = parse_key_values(args.cluster_config, "--cluster-config")
        if args.bootstrap_servers is not None or compose is not None:
            from workloads.topic_settings import TopicSettingError, split_cluster_config

            try:
                split_cluster_config(cluster_config)  # the topic configs an external run creates its topics with
            except TopicSettingError as exc:
                raise BadArgument(str(exc)) from None
        workload_options: dict[str, Any] = parse_key_values(args.workload_option, "--workload-option")
        nemesis_options = parse_key_values(args.nemesis_option, "--nemesis-option")
        _check_nemesis_options(nemesis_options, simulated=bool(getattr(args, "sim", False)))
        module = load_workload(args.workload)
        brokers = args.brokers
        if compose is not None:
            # The nodes are the brokers: the workloads size their topics by them (min(3, brokers)).
            if brokers not in (default_brokers(), len(compose)):
                raise BadArgument(f"--brokers {brokers} disagrees with --nodes, which names {len(compose)} services")
            brokers = len(compose)
        try:
            module.validate_options(workload_options, brokers, args.concurrency)
        except ValueError as exc:
            raise BadArgument(str(exc)) from None
        client_config = effective_client_config(module.default_client_config(workload_options), client_overrides)
        name = args.name or f"{args.workload}-{'-'.join(nemeses) or 'no-faults'}"
        fields = dict(name=name, workload=args.workload, seed=seed, time_limit_s=args.time_limit,
                      concurrency=args.concurrency, rate_hz=args.rate, brokers=brokers, controllers=args.controllers, nemeses=tuple(nemeses),
                      nemesis_interval_s=args.nemesis_interval, nemesis_options=nemesis_options,
                      workload_options=workload_options,
                      bootstrap_servers=args.bootstrap_servers, client_config=client_config,
                      client_config_overrides=client_overrides, cluster_config=cluster_config,
                      quiet_period_s=args.quiet_period, final_time_limit_s=args.final_time_limit,
                      toxiproxy_url=getattr(args, "toxiproxy_url", None), backend=backend,
                      docker_compose=None if compose is None else os.path.abspath(args.docker_compose),
                      nodes=tuple(str(n) for n in compose or ()))
        checked = RunSpec(**fields)  # validate before composing the command
        if getattr(args, "sim", False):
            _check_simulated(checked)
        fault_schedule_ops(args, nemeses)
        return RunSpec(**fields, command=reproduce_command(args, seed, name))
    except SpecError as exc:
        raise BadArgument(_as_flag(str(exc))) from None


def _compose_nodes(args: argparse.Namespace) -> list[Any] | None:
    """--docker-compose's nodes (cluster.docker_compose.ComposeNode), checked against the file's
    services (Compose validates the file); None without --docker-compose."""
    file, nodes = getattr(args, "docker_compose", None), getattr(args, "nodes", None)
    if file is None:
        if nodes is not None:
            raise BadArgument("--nodes names services of a Compose file: give --docker-compose FILE")
        return None
    if nodes is None:
        raise BadArgument("--docker-compose needs --nodes: the services that are the Kafka brokers, e.g. "
                          "--nodes kafka-1,kafka-2,kafka-3")
    if getattr(args, "sim", False):
        raise BadArgument("--sim runs the bundled cluster's simulation in this process; --docker-compose runs your "
                          "Compose file's containers")
    if getattr(args, "backend", "local") != "local":
        raise BadArgument(f"--backend {args.backend} runs the bundled cluster; --docker-compose runs your Compose "
                          "file's services instead")
    from cluster.docker_backend import DockerUnavailable
    from cluster.docker_compose import ComposeError, check_nodes, parse_nodes

    try:
        parsed = parse_nodes(nodes)
    except ValueError as exc:
        raise BadArgument(f"--nodes {nodes!r}: {exc}") from None
    try:
        check_nodes(args.docker_compose, parsed)
    except ComposeError as exc:
        raise BadArgument(f"--docker-compose {exc}") from None
    except DockerUnavailable as exc:
        raise BadArgument(f"--docker-compose: {exc}") from None
    return parsed


def _check_simulated(spec: RunSpec) -> None:
    """Refuse, naming it, what a simulated run cannot do (a workload without a simulated
    client, a client setting aiokafka cannot honour, a scripted fault)."""
    from harness.sim.workload import NotSimulated, check_simulated
    from nemeses.sim_control import not_simulated

    try:
        check_simulated(spec)
    except NotSimulated as exc:
        raise BadArgument(f"--sim: {exc}") from None
    for nemesis in spec.nemeses:
        why = not_simulated(nemesis)
        if why:
            raise BadArgument(f"--sim: --nemesis {nemesis} cannot run in a simulation: {why}")


def fault_schedule_ops(args: argparse.Namespace, nemeses: list[str]) -> list[Any] | None:
    """--fault-schedule's ops (harness.hunt_schedule), or None; BadArgument when the file is
    bad, the run is not simulated, or a package it names is not in --nemesis."""
    path = getattr(args, "fault_schedule", None)
    if path is None:
        return None
    if not getattr(args, "sim", False):
        raise BadArgument("--fault-schedule needs --sim: a schedule given as data lands at exact times only on the "
                          "simulation's virtual clock")
    from harness.hunt_schedule import ScheduleError, check_targets, packages_needed, read_schedule

    try:
        ops, _ = read_schedule(path)
        check_targets(ops, args.brokers, getattr(args, "controllers", 1), path)
    except ScheduleError as exc:
        raise BadArgument(str(exc)) from None
    missing = [name for name in packages_needed(ops) if name not in nemeses]
    if missing:
        raise BadArgument(f"--fault-schedule {path} uses {', '.join(missing)}: add it to --nemesis")
    return ops


def _check_nemesis_options(options: dict[str, str], simulated: bool) -> None:
    from nemeses.base import NemesisError, checked_options, simulation_only

    try:
        checked = checked_options(options)
    except NemesisError as exc:
        raise BadArgument(f"--nemesis-option: {exc}") from None
    refused = None if simulated else simulation_only(checked)
    if refused:
        raise BadArgument(refused)  # before any cluster starts (build_packages refuses it too)


def _as_flag(message: str) -> str:
    """Spec field names -> the flags a user typed."""
    for field_name, flag in (("time_limit_s", "--time-limit"), ("rate_hz", "--rate"), ("concurrency", "--concurrency"),
                             ("brokers", "--brokers"), ("controllers", "--controllers"),
                             ("nemesis_interval_s", "--nemesis-interval"), ("seed", "--seed"),
                             ("final_time_limit_s", "--final-time-limit"), ("quiet_period_s", "--quiet-period"),
                             ("bootstrap_servers", "--bootstrap-servers"), ("name", "--name"),
                             ("toxiproxy_url", "--toxiproxy-url"), ("backend", "--backend"),
                             ("docker_compose", "--docker-compose"), ("nodes", "--nodes")):
        if message.startswith(field_name + ":"):
            return flag + message[len(field_name):]
    return message


def reproduce_command(args: argparse.Namespace, seed: int, name: str) -> str:
    return shlex.join(["logquake", "test", *test_argv(args, seed, name)])


def test_argv(args: argparse.Namespace, seed: int, name: str | None, test_count: int = 1) -> list[str]:
    """The arguments of `logquake test` that repeat these choices exactly, with every
    default spelled out."""
    parts = ["--workload", args.workload]
    if args.nemesis.strip():
        parts += ["--nemesis", ",".join(n.strip() for n in args.nemesis.split(",") if n.strip()),
                  "--nemesis-interval", f"{args.nemesis_interval:g}"]
    for item in args.nemesis_option:
        parts += ["--nemesis-option", item]
    parts += ["--time-limit", f"{args.time_limit:g}", "--final-time-limit", f"{args.final_time_limit:g}",
              "--quiet-period", f"{args.quiet_period:g}", "--concurrency", str(args.concurrency),
              "--rate", f"{args.rate:g}"]
    # --brokers also sizes an external run's topics (the workloads' replication factor is
    # min(3, brokers)), so the command repeats it there too.
    brokers = args.brokers
    if getattr(args, "docker_compose", None) is not None and getattr(args, "nodes", None):
        brokers = len([n for n in args.nodes.split(",") if n.strip()])  # the nodes are the brokers
    parts += ["--brokers", str(brokers)]
    if getattr(args, "controllers", 1) != 1:
        parts += ["--controllers", str(args.controllers)]
    if args.bootstrap_servers is not None:
        parts += ["--bootstrap-servers", args.bootstrap_servers]
    if getattr(args, "toxiproxy_url", None) is not None:
        parts += ["--toxiproxy-url", args.toxiproxy_url]
    parts += ["--seed", str(seed)]
    if test_count != 1:
        parts += ["--test-count", str(test_count)]
    for flag, items in (("--client-config", args.client_config), ("--cluster-config", args.cluster_config),
                        ("--workload-option", args.workload_option)):
        for item in items:
            parts += [flag, item]
    if name is not None:
        parts += ["--name", name]
    if getattr(args, "sim", False):
        parts += ["--sim"]
    if getattr(args, "backend", "local") != "local":
        parts += ["--backend", args.backend]
    if getattr(args, "docker_compose", None) is not None:
        parts += ["--docker-compose", os.path.abspath(args.docker_compose), "--nodes", args.nodes]
    if getattr(args, "fault_schedule", None) is not None:
        parts += ["--fault-schedule", os.path.abspath(args.fault_schedule)]
    if args.results_dir != "results":
        parts += ["--results-dir", args.results_dir]
    return parts


def probe_bootstrap_servers(servers: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise BadArgument unless at least one bootstrap server accepts a TCP connection."""
    problems = []
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            problems.append(f"{server.strip()}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
    raise BadArgument(f"cannot reach any bootstrap server ({'; '.join(problems)})")


def handle(args: argparse.Namespace) -> int:
    from checkers.result import merge_valid

    base_seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    try:
        specs = []
        for i in range(max(1, args.test_count)):
            seed = base_seed if i == 0 else _nth_seed(base_seed, i)
            specs.append(build_spec(args, seed))
        if args.bootstrap_servers is not None and specs[0].docker_compose is None:  # a Compose project is not up yet
            probe_bootstrap_servers(args.bootstrap_servers)
    except BadArgument as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    # The docker backend's and a Compose project's nodes are isolated by their containers, and the
    # harness must stay in the host's network to reach them over their bridge.
    if (args.bootstrap_servers is None and specs[0].nemeses and specs[0].toxiproxy_url is None and not args.sim
            and specs[0].backend == "local" and specs[0].docker_compose is None):
        # Faults need the run (harness, clients, brokers) inside a private network namespace
        # that dies with it: re-run this exact command there, once arguments are known good.
        from nemeses.net.sandbox import NamespaceUnavailable, ensure_private_namespace

        command = [sys.executable, "-m", "harness.testcmd",
                   *test_argv(args, base_seed, args.name, test_count=args.test_count)]
        if args.junit_xml is not None:
            command += ["--junit-xml", os.path.abspath(args.junit_xml)]
        try:
            ensure_private_namespace(command)
        except NamespaceUnavailable as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_HARNESS_ERROR
    verdicts = []
    exit_code = 0
    records: list[Any] = []  # for --junit-xml: one per run, written after each
    for spec in specs:
        print(f"{PROG}: seed {spec.seed}; reproduce with: {spec.command}", flush=True)
        code, valid = run_one(spec, args.results_dir,
                              on_record=None if args.junit_xml is None else _junit_writer(args.junit_xml, records),
                              sim=args.sim, fault_schedule=getattr(args, "fault_schedule", None))
        if code in (EXIT_HARNESS_ERROR, 130):
            return code
        verdicts.append(valid)
    if len(verdicts) > 1:
        exit_code = {True: 0, False: 1, "unknown": 2}[merge_valid(verdicts)]
        print(f"{PROG}: {len(verdicts)} runs, overall {_verdict_word(merge_valid(verdicts))}", flush=True)
        return exit_code
    return {True: 0, False: 1, "unknown": 2}[verdicts[0]]


def _nth_seed(seed: int, i: int) -> int:
    from harness.generator import derive_seed

    return derive_seed(seed, "test-count", i) % 2**31


def _verdict_word(valid: Any) -> str:
    return {True: "valid", False: "INVALID", "unknown": "unknown"}.get(valid, str(valid))


def _junit_writer(path: str, records: list[Any]) -> Any:
    """A run_one callback that adds the run to the JUnit file (rewritten whole, atomically)."""
    from harness.junit import suite_for_run, write_junit

    def record(run: Any) -> None:
        records.append(run)
        try:
            write_junit(path, [suite_for_run(r) for r in records])
        except OSError as exc:
            print(f"{PROG}: cannot write the JUnit file {path}: {exc}", file=sys.stderr)
    return record


def run_one(spec: RunSpec, results_dir: str, on_record: Any = None, sim: bool = False,
            fault_schedule: str | None = None) -> tuple[int, Any]:
    """Run `spec`; returns (exit code, verdict). `on_record`, if given, receives the run's
    harness.junit.RunRecord however it ended (checked, harness error, interrupted). With
    `sim`, the run is simulated (harness.sim), performing `fault_schedule` (a file,
    harness.hunt_schedule) when given, copied into the run directory."""
    from harness.progress import Progress
    from harness.run import HarnessError, execute, open_run

    if on_record is not None:
        from harness.junit import RunRecord, load_result, now_utc

        started_at, started_s = now_utc(), time.monotonic()

        def record(status: Any, message: str, run_dir: Any) -> None:
            on_record(RunRecord(name=spec.name, status=status, started_at=started_at,
                                elapsed_s=time.monotonic() - started_s, message=message, run_dir=run_dir,
                                seed=spec.seed, reproduce_command=spec.command,
                                result=load_result(run_dir) if status == "checked" else None))
    else:
        def record(status: Any, message: str, run_dir: Any) -> None:
            pass

    progress = Progress()
    try:
        run = open_run(spec, results_dir, progress=progress)
    except OSError as exc:
        print(f"{PROG}: cannot create the run directory under {results_dir}: {exc}", file=sys.stderr)
        record("harness-error", f"cannot create the run directory under {results_dir}: {exc}", None)
        return EXIT_HARNESS_ERROR, None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, frame: Any) -> None:
        if progress.phase in ("check", "report"):
            # The cluster is gone and the history complete: stop checking at once.
            raise KeyboardInterrupt
        print(f"\n{PROG}: {signal.Signals(signum).name}: stopping, healing faults and tearing down",
              file=sys.stderr, flush=True)
        run.request_stop()

    for sig in previous:
        signal.signal(sig, on_signal)
    progress.start()
    try:
        if sim:
            from harness.sim.run import execute_sim

            fault_ops = None
            if fault_schedule is not None:
                from harness.hunt_schedule import SCHEDULE_FILE, read_schedule

                fault_ops, text = read_schedule(fault_schedule)
                (run.run_dir / SCHEDULE_FILE).write_text(text, encoding="utf-8")
            outcome = execute_sim(run, fault_ops)
        else:
            outcome = execute(run)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted while checking; the history is complete in {run.run_dir}", file=sys.stderr)
        print(f"{PROG}: seed {spec.seed}; reproduce with: {spec.command}", flush=True)
        record("interrupted", "interrupted while checking; the history is complete", run.run_dir)
        return 130, None
    except HarnessError as exc:
        run.log.error("harness error: %s", exc)
        print(f"{PROG}: harness error: {exc}", file=sys.stderr)
        print(f"{PROG}: seed {spec.seed}; results in {run.run_dir}; reproduce with: {spec.command}", flush=True)
        record("harness-error", str(exc), run.run_dir)
        return EXIT_HARNESS_ERROR, None
    except Exception as exc:
        run.log.exception("harness error")
        print(f"{PROG}: harness error: {type(exc).__name__}: {exc} (details in {run.run_dir}/harness.log)",
              file=sys.stderr)
        print(f"{PROG}: seed {spec.seed}; results in {run.run_dir}; reproduce with: {spec.command}", flush=True)
        record("harness-error", f"{type(exc).__name__}: {exc} (details in {run.run_dir}/harness.log)", run.run_dir)
        return EXIT_HARNESS_ERROR, None
    finally:
        progress.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        run.close()
    verdict = "interrupted" if outcome.interrupted else _verdict_word(outcome.valid)
    record("interrupted" if outcome.interrupted else "checked", outcome.message, outcome.run_dir)
    print(f"{PROG}: {verdict} ({outcome.message}); results in {outcome.run_dir}", flush=True)
    print(f"{PROG}: seed {spec.seed}; reproduce with: {spec.command}", flush=True)
    return outcome.exit_code, outcome.valid


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.testcmd ...`: the test subcommand on its own."""
    from harness.cli import ArgumentParser, dump_stacks_on_sigusr1

    dump_stacks_on_sigusr1()
    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
