"""logquake's pytest plugin, registered through the `pytest11` entry point.

Fixtures (nothing happens unless a test asks for one, so other suites are unchanged):

``logquake_cluster``
    A bundled cluster (`logquake.LocalCluster`). Size, settings and sharing come from the
    marker ``@pytest.mark.logquake_cluster(brokers=1, config={...}, scope="module")``
    (defaults: `logquake test`'s broker count, no settings, module scope). Tests of one module
    with the same brokers and config share one cluster (module scope); ``scope="function"``
    gives the test a cluster of its own.

``logquake_runner``
    ``logquake_runner.run(spec=None, *, check=True, **fields) -> logquake.Result`` runs a
    ``logquake.TestSpec`` (or one built from ``fields``) against ``--logquake-bootstrap-servers``
    when given, else against ``logquake_cluster``; a spec with faults (``nemesis``) runs on a
    bundled cluster of its own, which the harness controls. With ``check`` (the default) an
    invalid verdict fails the test with each forbidden anomaly and a witness, the report's path
    and the command that reproduces the run; ``unknown`` skips it, or fails or xfails it
    (``--logquake-unknown``). Every run's seed and reproduce command are shown in a
    "logquake" report section and in the session summary, as Hypothesis shows its seeds.

Simulated runs (``sim=True``, a spec with a ``fault_schedule``) need no cluster fixture: they
run in the test's own process, which makes a Hypothesis ``@given`` test over fault schedules
(``logquake.strategies.fault_schedules``) cheap enough to run many examples::

    from hypothesis import HealthCheck, given, settings
    from logquake.strategies import fault_schedules

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(schedule=fault_schedules(brokers=3, time_limit_s=5, kinds=("kill", "partition")))
    def test_kills_and_partitions_lose_nothing(logquake_runner, schedule):
        logquake_runner.run(sim=True, time_limit_s=5, nemesis=["kill", "partition"], fault_schedule=schedule, seed=1)

Each run's seed and report path are also test properties (``logquake_seed``,
``logquake_report``), so pytest's ``--junit-xml`` carries them.

Options: ``--logquake-seed N`` (the seed of every run whose spec has none),
``--logquake-results DIR`` (results root; default ``logquake-results`` under pytest's base
temporary directory), ``--logquake-bootstrap-servers``, ``--logquake-unknown=skip|xfail|fail``.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

if TYPE_CHECKING:  # the API imports the harness; load it only when a test uses a fixture
    from logquake.api import Result, TestSpec
    from logquake.local_cluster import LocalCluster

MARKER = "logquake_cluster"
SECTION = "logquake"
_RUNS_KEY = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("logquake", "logquake (Jepsen-style tests of Kafka-protocol systems)")
    group.addoption("--logquake-seed", type=int, default=None, metavar="N",
                    help="seed of every logquake run whose spec does not fix one (default: random, printed)")
    group.addoption("--logquake-results", default=None, metavar="DIR",
                    help="results root of logquake runs (default: logquake-results under pytest's basetemp)")
    group.addoption("--logquake-bootstrap-servers", default=None, metavar="HOST:PORT,...",
                    help="run logquake_runner's specs against this cluster instead of a bundled one "
                         "(a spec's brokers= sizes its topics there: replication factor min(3, brokers))")
    group.addoption("--logquake-unknown", choices=("skip", "xfail", "fail"), default="skip",
                    help="what an 'unknown' verdict does to the test (default skip)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(brokers=N, config={{...}}, scope='module'|'function'): "
                   "the bundled cluster the logquake_cluster fixture gives this test")


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("--logquake-seed")
    return f"logquake: --logquake-seed={seed}" if seed is not None else None


# -- the cluster ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ClusterRequest:
    brokers: int
    config: tuple[tuple[str, str], ...]
    scope: str

    @classmethod
    def of(cls, node: pytest.Item) -> "ClusterRequest":
        from logquake.api import TestSpec

        marker = node.get_closest_marker(MARKER)
        kwargs = dict(marker.kwargs) if marker is not None else {}
        if marker is not None and marker.args:
            raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.{MARKER} takes keywords: brokers=, config=, scope=")
        unknown = set(kwargs) - {"brokers", "config", "scope"}
        if unknown:
            raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.{MARKER} has unknown argument(s) {sorted(unknown)}")
        scope = kwargs.get("scope", "module")
        if scope not in ("module", "function"):
            raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.{MARKER} scope={scope!r}: 'module' or 'function'")
        config = {str(k): str(v) for k, v in dict(kwargs.get("config") or {}).items()}
        return cls(brokers=int(kwargs.get("brokers", TestSpec().brokers)), config=tuple(sorted(config.items())),
                   scope=scope)

    def start(self, base_dir: Path) -> "LocalCluster":
        from logquake.local_cluster import LocalCluster

        cluster = LocalCluster(brokers=self.brokers, config=dict(self.config), base_dir=base_dir)
        return cluster.__enter__()


class _ModuleClusters:
    """The module's shared clusters, one per (brokers, config), closed when the module ends."""

    def __init__(self, tmp_root: Path) -> None:
        self.tmp_root = tmp_root
        self.clusters: dict[ClusterRequest, LocalCluster] = {}

    def get(self, want: ClusterRequest) -> "LocalCluster":
        if want not in self.clusters:
            self.clusters[want] = want.start(self.tmp_root / f"cluster-{len(self.clusters)}")
        return self.clusters[want]

    def close(self) -> None:
        clusters, self.clusters = list(self.clusters.values()), {}
        for cluster in clusters:
            cluster.close()


@pytest.fixture(scope="module")
def _logquake_module_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ModuleClusters]:
    clusters = _ModuleClusters(tmp_path_factory.mktemp("logquake-clusters"))
    try:
        yield clusters
    finally:
        clusters.close()


@pytest.fixture
def logquake_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator["LocalCluster"]:
    """A bundled logquake cluster, as @pytest.mark.logquake_cluster(...) asks (module-shared by default)."""
    want = ClusterRequest.of(request.node)
    if want.scope == "module":
        yield request.getfixturevalue("_logquake_module_clusters").get(want)
        return
    cluster = want.start(tmp_path / "logquake-cluster")
    try:
        yield cluster
    finally:
        cluster.close()


# -- the runner -------------------------------------------------------------------------

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._,=+-]+")


class Runner:
    """`logquake_runner`: runs specs against the test's cluster and judges their verdicts."""

    def __init__(self, request: pytest.FixtureRequest, results_dir: Path) -> None:
        self._request = request
        self.results_dir = results_dir

    def spec_for(self, spec: "TestSpec | None" = None, **fields: Any) -> "TestSpec":
        """The spec as it will run: the option's seed when it has none, a test-named results
        directory, and a target cluster (the option's, else logquake_cluster, unless it has faults)."""
        from logquake.api import TestSpec

        spec = dataclasses.replace(spec, **fields) if spec is not None else TestSpec(**fields)
        config = self._request.config
        changes: dict[str, Any] = {}
        if spec.seed is None and config.getoption("--logquake-seed") is not None:
            changes["seed"] = config.getoption("--logquake-seed")
        if spec.name is None:
            changes["name"] = _NAME_UNSAFE.sub("-", self._request.node.name).strip("-.") or "logquake"
        if spec.bootstrap_servers is None and not spec.nemesis and not spec.sim:
            servers = config.getoption("--logquake-bootstrap-servers")
            if servers is None:
                cluster = self._request.getfixturevalue("logquake_cluster")
                servers = cluster.bootstrap_servers
                # The workloads size replication by the broker count; a module's runs may
                # share its cluster, so each writes topics of its own.
                changes["brokers"] = len(cluster.brokers)
                changes["workload_options"] = _own_topics(spec)
            changes["bootstrap_servers"] = servers
        return dataclasses.replace(spec, **changes)

    def run(self, spec: "TestSpec | None" = None, *, check: bool = True, **fields: Any) -> "Result":
        from logquake.api import run

        spec = self.spec_for(spec, **fields)
        runs = self._request.node.stash.setdefault(_RUNS_KEY, [])
        runs.append({"spec": spec, "result": None})
        result = run(spec, self.results_dir, output=sys.stdout)
        runs[-1]["result"] = result
        self._request.node.user_properties.append(("logquake_seed", result.seed))
        self._request.node.user_properties.append(("logquake_report", str(result.report_path)))
        if check:
            judge(result, self._request.config.getoption("--logquake-unknown"), self._how_to_rerun(spec, result))
        return result

    def _how_to_rerun(self, spec: "TestSpec", result: "Result") -> str:
        """The command above names a cluster that ended with the session; say how to get it back."""
        lines = [f"  rerun this test: pytest {self._request.node.nodeid} --logquake-seed {result.seed}"]
        if self._request.config.getoption("--logquake-bootstrap-servers") is None and not spec.nemesis and not spec.sim:
            want = ClusterRequest.of(self._request.node)
            config = " ".join(f"--config {key}={value}" for key, value in want.config)
            lines.append(f"  the command's cluster was this test's logquake_cluster; start one like it with "
                         f"`logquake cluster start --data-dir DIR --brokers {want.brokers}{' ' + config if config else ''}` "
                         f"and give the command its --bootstrap-servers")
        return "\n".join(lines)


def _own_topics(spec: "TestSpec") -> dict[str, Any]:
    options = dict(spec.workload_options)
    tag = secrets.token_hex(4)
    if spec.workload == "queue":
        options.setdefault("topic_prefix", f"lq-{tag}-t")
    elif spec.workload == "delivery":
        options.setdefault("topic", f"lq-{tag}-delivery")
    return options


def judge(result: "Result", on_unknown: str, how_to_rerun: str = "") -> None:
    """Fail (or skip, or xfail) the running test by the verdict, with what a person needs."""
    text = result.describe() + (f"\n{how_to_rerun}" if how_to_rerun else "")
    if result.verdict == "invalid":
        pytest.fail(text, pytrace=False)
    if result.verdict == "unknown":
        text = f"logquake verdict unknown: {text}"
        if on_unknown == "fail":
            pytest.fail(text, pytrace=False)
        if on_unknown == "xfail":
            pytest.xfail(text)
        pytest.skip(text)


@pytest.fixture
def logquake_runner(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runner:
    """Runs logquake.TestSpec's against this test's cluster; see logquake.pytest_plugin."""
    option = request.config.getoption("--logquake-results")
    results = Path(option) if option is not None else tmp_path_factory.getbasetemp() / "logquake-results"
    return Runner(request, results)


# -- seeds in the report ----------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    runs = item.stash.get(_RUNS_KEY, None)
    if not runs or call.when != "call":
        return
    lines = []
    for entry in runs:
        result = entry["result"]
        if result is None:
            spec = entry["spec"]
            lines.append(f"seed {spec.seed if spec.seed is not None else '(random)'}: run did not finish")
        else:
            lines.append(f"seed {result.seed}: {result.verdict}; report {result.report_path}; "
                         f"reproduce with: {result.reproduce_command}")
    outcome.get_result().sections.append((SECTION, "\n".join(lines)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per logquake test with its runs' seeds, whatever its outcome."""
    lines = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for title, content in getattr(report, "sections", ()):
                if title == SECTION:
                    lines += [f"{report.nodeid}: {line}" for line in content.splitlines()]
    if lines:
        terminalreporter.write_sep("-", "logquake seeds")
        for line in lines:
            terminalreporter.write_line(line)
