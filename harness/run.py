"""A run: the runtime handles behind a RunSpec, and the phases that use them.

Phases (DESIGN.md §4): set up the cluster and topics → main phase (workload at the spec's
rate, fault schedule on the nemesis) → heal every fault → quiet period → final phase (every
consumer reads to the end) → tear down → check → report. A stop request (SIGINT/SIGTERM)
ends generation; outstanding ops are completed as info, faults are healed and the cluster
is torn down as usual, and the history stays readable. Checking and the report are skipped
for an interrupted run (the final phase never ran, so a verdict would mislead).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from harness import store
from harness.analyze import analyze_run
from harness.generator import (
    Completion, Generator, Invocation, Rand, Sleep, Stagger, Stream, TimeLimit, clients, derive_seed,
    nemesis as on_nemesis, with_nemesis,
)
from harness.generator.combinators import Seq
from harness.history import HistoryWriter
from harness.interpreter import OP_TIMEOUT_S, Interpreter
from harness.phase_watchdog import PhaseWatchdog, phase_budgets_s
from harness.progress import Progress
from harness.report import write_index, write_report
from harness.spec import RunSpec
from workloads import registry

LOGGER_NAME = "logquake"


class HarnessError(RuntimeError):
    """The harness itself could not do its job (exit 255), as opposed to a bad argument."""


@dataclass
class RunOutcome:
    run_dir: Path
    valid: Any  # True | False | "unknown" | None when no check ran
    exit_code: int
    interrupted: bool
    message: str


@dataclass
class Run:
    """Runtime handles of one run. Created by `open_run`; `execute` drives the phases."""

    spec: RunSpec
    run_dir: Path
    history: HistoryWriter
    log: logging.Logger
    start_ns: int
    progress: Progress | None = None
    bootstrap_servers: str | None = None
    cluster: Any = None
    control: Any = None
    packages: list[Any] = field(default_factory=list)
    interpreter: Interpreter | None = None
    stop_requested: threading.Event = field(default_factory=threading.Event)
    healed: bool = False
    watchdog: PhaseWatchdog | None = None  # real runs only (harness.phase_watchdog)
    _log_handler: logging.Handler | None = None

    def request_stop(self) -> None:
        self.stop_requested.set()
        if self.interpreter is not None:
            self.interpreter.stop()

    def set_phase(self, phase: str) -> None:
        self.log.info("phase: %s", phase)
        if self.progress is not None:
            self.progress.phase = phase
        if self.watchdog is not None:
            self.watchdog.enter(phase)

    def close(self) -> None:
        self.history.close()
        if self._log_handler is not None:
            self._log_handler.close()
            self.log.removeHandler(self._log_handler)


def open_run(spec: RunSpec, results_root: str | Path, *, progress: Progress | None = None) -> Run:
    """Make the run directory, write spec.json, start harness.log and history.jsonl."""
    run_dir = store.create_run_dir(results_root, spec.name)
    spec.save(run_dir / store.SPEC_FILE)
    log = logging.getLogger(LOGGER_NAME)
    log.setLevel(logging.DEBUG)
    handler = logging.FileHandler(run_dir / store.HARNESS_LOG_FILE, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"))
    log.addHandler(handler)
    history = HistoryWriter(run_dir / store.HISTORY_FILE)
    run = Run(spec=spec, run_dir=run_dir, history=history, log=log, start_ns=time.monotonic_ns(),
              progress=progress, _log_handler=handler)
    log.info("run %s seed %d: %s", run_dir, spec.seed, spec.command)
    return run


# -- the system under test ------------------------------------------------------------

@contextlib.contextmanager
def bundled_cluster(run: Run) -> Iterator[None]:
    """Start the bundled cluster with its data, logs and clock files inside the run
    directory, and the control API the nemeses act through."""
    try:
        launcher = importlib.import_module("cluster.launcher")
        control_api = importlib.import_module("cluster.control")
    except ImportError as exc:
        raise HarnessError(f"the bundled cluster is not available in this checkout ({exc}); "
                           "point the run at a cluster with --bootstrap-servers") from None
    spec = run.spec
    # Clock skew needs every broker started under libfaketime; only pay for it when asked.
    clocks = control_api.BrokerClocks(run.run_dir / "clocks") if "clock" in spec.nemeses else None
    proxies = routed_links(spec)
    try:
        cluster = launcher.LocalCluster(brokers=spec.brokers, controllers=spec.controllers, base_dir=run.run_dir / "cluster",
                                        config=dict(spec.cluster_config),
                                        seed=derive_seed(spec.seed, "cluster") % 2**31,
                                        extra_env=clocks.extra_env if clocks is not None else None,
                                        proxies=proxies)
    except ValueError as exc:
        raise HarnessError(f"cannot build the bundled cluster: {exc}") from None

    def started() -> None:
        if proxies is not None:
            run.log.info("every link through a proxy on %s: %s", proxies.api_url,
                         ", ".join(f"{link['name']} {link['listen']}" for link in proxies.describe()))
        run.log.info("bundled cluster of %d broker(s) at %s", spec.brokers, run.bootstrap_servers)

    with _serving(run, cluster, lambda: control_api.ClusterControl(cluster, clocks), started):
        yield


@contextlib.contextmanager
def _serving(run: Run, cluster: Any, make_control: Callable[[], Any], started: Callable[[], None]) -> Iterator[None]:
    """The bundled cluster (local processes or containers) up for the run, its control at
    the nemeses' door; the control closed however the run ends, and with several
    controllers their metadata logs judged after they stopped (both back ends keep the
    controllers' data directories where the harness reads them: the Docker one on its bind
    mount)."""
    with cluster:
        run.cluster = cluster
        run.bootstrap_servers = cluster.bootstrap_servers
        run.control = make_control()
        started()
        try:
            yield
        finally:
            try:
                run.control.close()
            except Exception:
                run.log.exception("closing the cluster control")
            run.cluster = None
    if len(cluster.controllers) > 1:
        from harness.quorum_report import record_quorum

        record_quorum(run.run_dir, {c.broker_id: c.data_dir for c in cluster.controllers}, run.log)


def routed_links(spec: RunSpec) -> Any:
    """A cluster.proxy_routing.ProxyRouting when a nemesis faults the links through proxies
    (every link gets one; on --toxiproxy-url's server, else logquake's own), else None: the
    default path keeps its direct links."""
    from harness.spec import PROXY_NEMESES

    if not any(name in PROXY_NEMESES for name in spec.nemeses):
        return None
    routing = importlib.import_module("cluster.proxy_routing")
    return routing.ProxyRouting(spec.toxiproxy_url, seed=derive_seed(spec.seed, "proxy") % 2**63)


@contextlib.contextmanager
def docker_cluster(run: Run) -> Iterator[None]:
    """The bundled cluster in containers (cluster.docker_backend), from the node image of
    this source tree (built now if missing: harness.image), with the control the nemeses
    act through. The containers, network and nft table go at the end, however it ends."""
    from cluster import docker_backend
    from cluster.control import BrokerClocks
    from harness.image import ImageError, ensure_image

    spec = run.spec
    try:
        client = docker_backend.docker_client()
        image = ensure_image(client, log=lambda message: run.log.info("%s", message))
    except (docker_backend.DockerUnavailable, ImageError) as exc:
        raise HarnessError(f"--backend docker: {exc}") from None
    clocks = (BrokerClocks(run.run_dir / "clocks", library_path=docker_backend.IMAGE_FAKETIME_LIBRARY)
              if "clock" in spec.nemeses else None)
    cluster = docker_backend.DockerCluster(brokers=spec.brokers, controllers=spec.controllers, image=image,
                                           base_dir=run.run_dir / "cluster", config=dict(spec.cluster_config), client=client,
                                           seed=derive_seed(spec.seed, "cluster") % 2**31,
                                           extra_env=clocks.extra_env if clocks is not None else None,
                                           shared_dirs=[clocks.clock_dir] if clocks is not None else [])

    def started() -> None:
        run.log.info("bundled cluster of %d broker(s) and %d controller(s) in containers of image %s on network %s (%s) at %s",
                     spec.brokers, len(cluster.controllers), image, cluster.network_name, cluster.subnet, run.bootstrap_servers)

    with _serving(run, cluster, lambda: docker_backend.DockerControl(cluster, clocks), started):
        yield


@contextlib.contextmanager
def compose_cluster(run: Run) -> Iterator[None]:
    """The user's Compose project (cluster.docker_compose): brought up under a project name
    of the run's own, waited for until every node answers Kafka, faulted through its control,
    and removed (down -v) at the end, however it ends. The node image is built first only when
    the file names it (LOGQUAKE_NODE_IMAGE)."""
    from cluster import docker_backend, docker_compose
    from harness.image import ImageError, ensure_image

    spec = run.spec
    assert spec.docker_compose is not None
    try:
        client = docker_backend.docker_client()
        docker_compose.compose_command()
        image = None
        if "LOGQUAKE_NODE_IMAGE" in Path(spec.docker_compose).read_text(encoding="utf-8", errors="replace"):
            image = ensure_image(client, log=lambda message: run.log.info("%s", message))
    except (docker_backend.DockerUnavailable, ImageError, OSError) as exc:
        raise HarnessError(f"--docker-compose: {exc}") from None
    nodes = [docker_compose.ComposeNode.parse(node) for node in spec.nodes]
    try:
        cluster = docker_compose.ComposeCluster(spec.docker_compose, nodes, client=client, node_image=image,
                                                log=lambda message: run.log.info("%s", message))
    except ValueError as exc:
        raise HarnessError(f"--docker-compose: {exc}") from None
    try:
        cluster.__enter__()
    except (docker_compose.ComposeError, docker_compose.BrokerStartError) as exc:
        raise HarnessError(f"--docker-compose {spec.docker_compose}: {exc}") from None
    try:
        if spec.bootstrap_servers is None:
            unreachable = cluster.unreachable_advertised()
            if unreachable:
                raise HarnessError(f"--docker-compose {spec.docker_compose}: the clients run on this host and follow "
                                   f"the addresses the nodes advertise, which it cannot reach: {'; '.join(unreachable)}; "
                                   "advertise addresses the host reaches (e.g. static IPs on the network) or name a "
                                   "listener it reaches with --bootstrap-servers")
        run.cluster = cluster
        run.bootstrap_servers = spec.bootstrap_servers or cluster.bootstrap_servers
        run.control = docker_compose.ComposeControl(cluster)
        run.log.info("Compose project %s of %s on network %s (%s): nodes %s; clients bootstrap from %s", cluster.project,
                     spec.docker_compose, cluster.network_name, cluster.subnet,
                     ", ".join(f"{cluster.service(b.broker_id)}=node {b.broker_id} at {b.address}" for b in cluster.brokers),
                     run.bootstrap_servers)
        try:
            yield
        finally:
            try:
                run.control.close()
            except Exception:
                run.log.exception("closing the cluster control")
            run.cluster = None
    finally:
        cluster.close()


@contextlib.contextmanager
def system_under_test(run: Run) -> Iterator[None]:
    if run.spec.docker_compose is not None:
        with compose_cluster(run):
            yield
    elif run.spec.bootstrap_servers is not None:
        run.bootstrap_servers = run.spec.bootstrap_servers
        run.log.info("external cluster at %s", run.bootstrap_servers)
        yield
    elif run.spec.backend == "docker":
        with docker_cluster(run):
            yield
    else:
        with bundled_cluster(run):
            yield


def external_settings_record(run: Run) -> Any:
    """For an external cluster: the record of what was asked of it (cluster-config.json),
    saved at once with a warning for each typed setting no topic can carry. None for the
    bundled cluster, whose brokers run with every typed setting."""
    if not run.spec.external_cluster:
        return None
    from harness.cluster_settings import start_record

    record = start_record(run.spec.cluster_config)
    for warning in record.warnings:
        run.log.warning("%s", warning)
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    if record.requested_topic_config:
        run.log.info("test topics are created with %s", record.requested_topic_config)
    record.save(run.run_dir)
    return record


def read_cluster_settings(run: Run, record: Any, workload: Any, when: str) -> None:
    """Read the test topics' and brokers' effective settings into cluster-config.json."""
    from harness.cluster_settings import read_into

    read_into(record, when=when, bootstrap_servers=run.bootstrap_servers or "", client_config=run.spec.client_config,
              topics=tuple(workload.topics), owns_topic=workload.owns_topic, log=run.log)
    record.save(run.run_dir)


# -- faults ---------------------------------------------------------------------------

class NemesisRouter:
    """The nemesis thread's client: hands each scheduled fault op to the combined schedule,
    which knows the package that performs it."""

    def __init__(self, combined: Any):
        self.combined = combined

    def invoke(self, invocation: Invocation) -> Completion:
        return Completion("info", self.combined.invoke(invocation.f, invocation.value))

    def close(self) -> None:
        pass


def build_packages(run: Run) -> list[Any]:
    if not run.spec.nemeses:
        return []
    control = run.control
    if control is None and run.spec.toxiproxy_url is not None:
        # An external cluster behind the user's Toxiproxy: the link faults act on its proxies.
        from nemeses.base import NemesisError
        from nemeses.toxics import ServerLinks

        try:
            control = ServerLinks(run.spec.toxiproxy_url, run.bootstrap_servers or "")
        except NemesisError as exc:
            raise HarnessError(str(exc)) from None
    if control is None:
        raise HarnessError("the nemeses need the bundled cluster's control API")
    from nemeses.base import NemesisError, build_packages as build

    try:
        return list(build(list(run.spec.nemeses), control, run.spec))
    except NemesisError as exc:
        raise HarnessError(str(exc)) from None


def combine(packages: list[Any]) -> Any:
    from nemeses.base import NemesisOptions
    from nemeses.combined import Combined

    return Combined(packages, quiet_probability=NemesisOptions().quiet_probability)


def fault_schedule(spec: RunSpec, combined: Any | None) -> Generator:
    """The packages' seeded schedule (rounds of faults and quiet periods), one op every
    nemesis interval on average (uniform gaps in [0, 2·interval)), after an initial calm."""
    if combined is None:
        return Seq()
    rng = random.Random(derive_seed(spec.seed, "nemesis"))
    ops = Stagger(spec.nemesis_interval_s, Stream(combined.schedule(rng)), Rand.from_seed(spec.seed, "nemesis-gaps"))
    return on_nemesis(Seq(Sleep(spec.initial_quiet_s), ops))


# -- phases ---------------------------------------------------------------------------

def main_generator(spec: RunSpec, workload_gen: Generator, faults: Generator) -> Generator:
    workload = Stagger(1.0 / spec.rate_hz, workload_gen, Rand.from_seed(spec.seed, "rate"))
    return TimeLimit(spec.time_limit_s, with_nemesis(faults, workload))


def execute(run: Run) -> RunOutcome:
    spec = run.spec
    module = registry.load(spec.workload)
    interrupted = False
    run.watchdog = PhaseWatchdog(run.log, run.run_dir / store.HARNESS_LOG_FILE, phase_budgets_s(spec, OP_TIMEOUT_S))
    with run.watchdog, contextlib.ExitStack() as stack:
        run.set_phase("setup")
        stack.enter_context(system_under_test(run))
        workload = module.build(spec, run.bootstrap_servers)
        settings = external_settings_record(run)
        workload.setup()
        if settings is not None:
            read_cluster_settings(run, settings, workload, "after-setup")
        run.packages = build_packages(run)
        combined = combine(run.packages) if run.packages else None
        interp = Interpreter(concurrency=spec.concurrency, open_client=workload.open_client, history=run.history,
                             nemesis=NemesisRouter(combined) if combined else None, log=run.log,
                             on_op=run.progress.observe if run.progress else None, start_ns=run.start_ns)
        run.interpreter = interp
        stack.callback(interp.close)
        stack.callback(heal, run)  # heal even if a phase raises
        if run.stop_requested.is_set():
            interp.stop()
        run.set_phase("main")
        interrupted = not interp.run(main_generator(spec, workload.generator, fault_schedule(spec, combined)))
        heal(run)
        if not interrupted:
            run.set_phase("quiet")
            interrupted = run.stop_requested.wait(spec.quiet_period_s)
        if not interrupted and workload.final_generator is not None:
            run.set_phase("final")
            interrupted = not interp.run(TimeLimit(spec.final_time_limit_s, clients(workload.final_generator)))
        if settings is not None and not interrupted:
            read_cluster_settings(run, settings, workload, "end")
        run.set_phase("teardown")
    run.history.close()
    if interrupted:
        return RunOutcome(run.run_dir, None, 130, True, "interrupted: history kept, faults healed, cluster torn down")
    run.set_phase("check")
    valid, message = check(run)
    report(run)
    from checkers.result import EXIT_CODES

    return RunOutcome(run.run_dir, valid, EXIT_CODES[valid], False, message)


# The network heals first: a restarted broker becomes ready only once it has registered with
# the controller, which it cannot do while a partition still cuts it off (or while seconds of
# latency, a zero bandwidth or a black hole sit on its link to the controller). Paused
# processes resume, clocks reset, and only then are killed brokers started again.
HEAL_FIRST = ("partition", "latency", "bandwidth", "flaky", "clock", "pause")


def heal_rank(package: Any) -> int:
    return HEAL_FIRST.index(package.name) if package.name in HEAL_FIRST else len(HEAL_FIRST)


def heal(run: Run) -> None:
    """Undo every fault of every package, once, recording it like any nemesis op."""
    if not run.packages or run.interpreter is None or run.healed:
        return
    run.healed = True
    run.set_phase("heal")
    for package in sorted(run.packages, key=heal_rank):
        run.interpreter.record_nemesis(f"stop-{package.name}", "heal", package.heal,
                                       extra={"nemesis": package.name, "heal": True})


def check(run: Run) -> tuple[Any, str]:
    """Run the checkers on the finished history (history.jsonl -> Parquet -> claims from
    spec.json -> one Spark job -> results.json). A crash is 'unknown', never a crashed run."""
    try:
        result = analyze_run(run.run_dir)
    except Exception as exc:
        run.log.exception("the checkers crashed")
        return "unknown", f"the checkers crashed ({type(exc).__name__}: {exc}): verdict unknown"
    record_throughput(run, result)
    bad = sorted(a.name for a in result.anomalies if not a.allowed)
    errors = sorted({e.checker for e in result.errors})
    detail = (f"; bad anomalies: {', '.join(bad)}" if bad else "") + \
             (f"; checker errors: {', '.join(errors)}" if errors else "")
    return result.valid, f"valid={result.valid}{detail}"


def record_throughput(run: Run, result: Any) -> None:
    """Per-phase ok rates, availability and recovery (harness/report/phases.py) go into
    results.json's stats and are printed, so a chaos run says whether it kept exercising
    the system after each heal."""
    from harness.history import iter_history
    from harness.report.phases import format_table, phase_throughput

    try:
        throughput = phase_throughput(iter_history(run.run_dir / store.HISTORY_FILE))
        result.stats["throughput"] = throughput.as_json()
        result.save(run.run_dir / store.RESULTS_FILE)
    except Exception:
        run.log.exception("computing the per-phase throughput failed")
        return
    pre = throughput.pre_fault_ok_per_s
    text = (f"per-phase throughput (ok ops/s; pre-fault {pre if pre is not None else '-'} ok/s; recovery: first 1-s "
            f"window at >= {throughput.recovery_fraction:.0%} of it):\n{format_table(throughput)}")
    run.log.info("%s", text)
    print(text, file=sys.stderr, flush=True)


def report(run: Run) -> None:
    """Write the run's report.html and rebuild the results index (results/<name>/<ts>/)."""
    try:
        path = write_report(run.run_dir)
        run.log.info("report: %s", path)
        write_index(run.run_dir.parent.parent)
    except Exception:
        run.log.exception("writing the report or the results index failed")
