"""RunSpec: everything that defines a run, as pure data. spec.json is its serialised form.

A spec alone re-runs or re-analyses a run: the checkers derive the claims under test from
`workload`, `workload_options`, `client_config` and `cluster_config`; the report shows it;
`command` is the exact command line that reproduces the run. Runtime handles (processes,
files, clocks) live in `harness.run.Run`, never here.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from cluster.launcher import MAX_BROKERS
from workloads.registry import WORKLOAD_NAMES

# Fault packages the nemeses implement (nemeses/). All of them act on broker processes or
# their network, so none can run against an external cluster.
NEMESIS_NAMES: tuple[str, ...] = ("kill", "pause", "partition", "clock", "brokers-down", "lone-leader-crash")
# Faults on the cluster's links, through proxies (nemeses.toxics): the bundled cluster runs
# with every link through a proxy when one of them is chosen.
PROXY_NEMESES: tuple[str, ...] = ("latency", "bandwidth", "flaky")
NEMESIS_NAMES += PROXY_NEMESES
NEMESIS_NAMES += ("disk",)  # the brokers' disks (nemeses.disk)
PROCESS_CONTROL_NEMESES: frozenset[str] = frozenset(NEMESIS_NAMES)
# Message faults on chosen links (nemeses.link_faults): only simulated runs (--sim) have a
# network that can delay, lose, copy or reorder chosen messages from a seed. A spec may name
# them; a real run refuses them when its packages are built, naming --sim.
SIM_ONLY_NEMESES: tuple[str, ...] = ("link-delay", "link-loss", "link-duplicate", "link-reorder")

# The bundled cluster's back ends (--backend) and the faults the docker one offers: its links
# are direct (no proxies for latency, bandwidth, flaky) and it is not simulated.
BACKENDS: tuple[str, ...] = ("local", "docker")
DOCKER_NEMESES: tuple[str, ...] = ("kill", "pause", "partition", "clock", "brokers-down", "lone-leader-crash")
# A user's Compose project (--docker-compose): the faults that act on any image's containers, and
# why the others cannot (cluster.docker_compose).
COMPOSE_NEMESES: tuple[str, ...] = ("kill", "pause", "partition", "brokers-down", "lone-leader-crash")
COMPOSE_REFUSED: Mapping[str, str] = {
    "clock": "clock skew needs libfaketime preloaded in every node at a path logquake knows and a clock file it "
             "can write, which an arbitrary image has neither of (the bundled image has both: --backend docker)",
    "latency": "the link faults run on proxies in front of every link, and a Compose project's nodes talk directly",
    "bandwidth": "the link faults run on proxies in front of every link, and a Compose project's nodes talk directly",
    "flaky": "the link faults run on proxies in front of every link, and a Compose project's nodes talk directly",
    "disk": "disk faults need the bundled broker's fault hooks in its storage, which another image's broker lacks",
}

SPEC_VERSION = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._,=+-]*$")
_HOST_PORT_RE = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")
_TOXIPROXY_URL_RE = re.compile(r"^http://[A-Za-z0-9._\-\[\]:]+:\d{1,5}/?$")


class SpecError(ValueError):
    """A spec that cannot describe a run; the message names the field and the problem."""


@dataclass(frozen=True)
class RunSpec:
    name: str
    workload: str
    seed: int
    time_limit_s: float = 60.0
    concurrency: int = 5
    rate_hz: float = 100.0
    brokers: int = 3
    # Controllers of the bundled cluster: 1, or a Raft metadata quorum of 3 or 5 (issue 19).
    controllers: int = 1
    nemeses: tuple[str, ...] = ()
    nemesis_interval_s: float = 10.0
    # --nemesis-option key=value, verbatim (e.g. partition_targets=primaries); the fault
    # packages read them through nemeses.base.NemesisOptions.from_object.
    nemesis_options: Mapping[str, str] = field(default_factory=dict)
    workload_options: Mapping[str, Any] = field(default_factory=dict)
    bootstrap_servers: str | None = None
    # Effective librdkafka settings: the workload's defaults overlaid with the user's.
    client_config: Mapping[str, str] = field(default_factory=dict)
    # What the user passed with --client-config, verbatim.
    client_config_overrides: Mapping[str, str] = field(default_factory=dict)
    cluster_config: Mapping[str, str] = field(default_factory=dict)
    quiet_period_s: float = 5.0
    final_time_limit_s: float = 60.0
    # Seconds of calm before the first fault (Bufstream's harness found early faults can
    # leave a cluster that never finished starting permanently unusable).
    initial_quiet_s: float = 5.0
    # A Toxiproxy server (http://HOST:PORT) that carries the routed cluster's proxies instead
    # of logquake's own proxy (--toxiproxy-url); only with the proxy nemeses.
    toxiproxy_url: str | None = None
    # Where the bundled cluster runs: "local" (processes on 127.0.0.x in the run's private
    # namespace) or "docker" (a container per node on a bridge network, cluster.docker_backend).
    backend: str = "local"
    # A user's Compose file (absolute path) brought up for the run, and its services that are
    # the Kafka brokers (SERVICE or SERVICE:PORT), whom the faults hit (cluster.docker_compose).
    # The cluster is then an external one for the claims: they come from its DescribeConfigs.
    docker_compose: str | None = None
    nodes: tuple[str, ...] = ()
    command: str = ""
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        # Normalise containers so equal specs compare equal whatever the caller passed.
        object.__setattr__(self, "nemeses", tuple(self.nemeses))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        for name in ("workload_options", "client_config", "client_config_overrides", "cluster_config", "nemesis_options"):
            object.__setattr__(self, name, dict(getattr(self, name)))
        self.validate()

    def validate(self) -> None:
        _check(isinstance(self.name, str) and bool(_NAME_RE.match(self.name)),
               "name", f"{self.name!r} must start with a letter or digit and use only letters, digits, spaces and ._,=+-")
        _check(self.workload in WORKLOAD_NAMES, "workload",
               f"unknown workload {self.workload!r}; known: {', '.join(WORKLOAD_NAMES)}")
        _check(_is_int(self.seed) and 0 <= self.seed < 2**63, "seed", f"{self.seed!r} must be an integer in [0, 2^63)")
        _check(_is_positive(self.time_limit_s), "time_limit_s", f"{self.time_limit_s!r} must be a positive number of seconds")
        _check(_is_int(self.concurrency) and self.concurrency >= 1, "concurrency", f"{self.concurrency!r} must be an integer ≥ 1")
        _check(_is_positive(self.rate_hz), "rate_hz", f"{self.rate_hz!r} must be a positive rate in ops/s")
        _check(_is_int(self.brokers) and 1 <= self.brokers <= 200, "brokers", f"{self.brokers!r} must be an integer in [1, 200]")
        _check(self.controllers in (1, 3, 5), "controllers", f"{self.controllers!r} must be 1, 3 or 5")
        if self.controllers != 1:
            _check(self.bootstrap_servers is None and self.backend in ("local", "docker"), "controllers",
                   f"{self.controllers} controllers run in the bundled cluster (local or docker backend) only")
        if not self.external_cluster:
            # Checked here, not when the launcher refuses it after the run directory exists.
            _check(self.brokers <= MAX_BROKERS, "brokers",
                   f"{self.brokers} brokers: the bundled cluster runs at most {MAX_BROKERS}")
        for nemesis in self.nemeses:
            _check(nemesis in NEMESIS_NAMES or nemesis in SIM_ONLY_NEMESES, "nemeses",
                   f"unknown nemesis {nemesis!r}; known: {', '.join(NEMESIS_NAMES + SIM_ONLY_NEMESES)}")
        _check(len(set(self.nemeses)) == len(self.nemeses), "nemeses", f"{list(self.nemeses)} names a nemesis twice")
        _check(_is_positive(self.nemesis_interval_s), "nemesis_interval_s", f"{self.nemesis_interval_s!r} must be a positive number of seconds")
        for name in ("quiet_period_s", "initial_quiet_s"):
            value = getattr(self, name)
            _check(_is_number(value) and value >= 0, name, f"{value!r} must be a non-negative number of seconds")
        _check(_is_positive(self.final_time_limit_s), "final_time_limit_s", f"{self.final_time_limit_s!r} must be a positive number of seconds")
        if self.bootstrap_servers is not None:
            servers = str(self.bootstrap_servers).split(",")
            for server in servers:
                _check(bool(_HOST_PORT_RE.match(server.strip())), "bootstrap_servers", f"{server!r} is not host:port")
            # The link faults reach an external cluster through the user's Toxiproxy, if named.
            behind_proxies = [n for n in self.nemeses if n in PROXY_NEMESES]
            _check(not behind_proxies or self.toxiproxy_url is not None, "nemeses",
                   f"{', '.join(behind_proxies)} needs the cluster's links behind Toxiproxy proxies: against an external "
                   "cluster (--bootstrap-servers), name your Toxiproxy server with --toxiproxy-url")
            needs_control = [n for n in self.nemeses
                             if (n in PROCESS_CONTROL_NEMESES and n not in PROXY_NEMESES) or n in SIM_ONLY_NEMESES]
            _check(not needs_control or self.docker_compose is not None, "nemeses",
                   f"{', '.join(needs_control)} needs control of the broker processes and cannot run against an "
                   "external cluster (--bootstrap-servers); run without --nemesis or on the bundled cluster")
        if self.toxiproxy_url is not None:
            _check(isinstance(self.toxiproxy_url, str) and bool(_TOXIPROXY_URL_RE.match(self.toxiproxy_url)),
                   "toxiproxy_url", f"{self.toxiproxy_url!r} is not http://HOST:PORT")
            _check(any(n in PROXY_NEMESES for n in self.nemeses), "toxiproxy_url",
                   f"a Toxiproxy server is only used by the {', '.join(PROXY_NEMESES)} nemeses; choose one of them")
            others = [n for n in self.nemeses if n not in PROXY_NEMESES]
            # The run then stays in the host's network (where the server can reach the
            # brokers), not in the private namespace the other faults need.
            _check(not others, "toxiproxy_url", f"{', '.join(others)} needs the run's private network namespace, "
                   "where a Toxiproxy server outside it cannot reach the brokers; with a Toxiproxy server choose only "
                   f"{', '.join(PROXY_NEMESES)}")
        _check(self.backend in BACKENDS, "backend", f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        if self.backend == "docker":
            _check(self.bootstrap_servers is None, "backend",
                   "docker runs the bundled cluster in containers; an external cluster (--bootstrap-servers) has none")
            refused = [n for n in self.nemeses if n not in DOCKER_NEMESES]
            _check(not refused, "backend", f"{', '.join(refused)} cannot run on the docker backend (it offers "
                   f"{', '.join(DOCKER_NEMESES)}); use the local backend")
        if self.docker_compose is not None:
            _check(isinstance(self.docker_compose, str) and os.path.isabs(self.docker_compose), "docker_compose",
                   f"{self.docker_compose!r} must be an absolute path")
            _check(bool(self.nodes), "nodes", "--docker-compose needs --nodes: the services that are the Kafka brokers")
            _check(self.backend == "local", "backend", f"--backend {self.backend} runs the bundled cluster; "
                   "--docker-compose runs your Compose file's services instead")
            _check(self.brokers == len(self.nodes), "brokers",
                   f"{self.brokers} brokers but --nodes names {len(self.nodes)} services")
            for nemesis in self.nemeses:
                _check(nemesis in COMPOSE_NEMESES, "nemeses",
                       f"{nemesis} cannot run on a Compose project: "
                       f"{COMPOSE_REFUSED.get(nemesis, 'it needs the bundled cluster')} "
                       f"(a Compose project offers {', '.join(COMPOSE_NEMESES)})")
        else:
            _check(not self.nodes, "nodes", "--nodes names services of a Compose file: give --docker-compose FILE")
        for name in ("client_config", "client_config_overrides", "cluster_config", "nemesis_options"):
            for key, value in getattr(self, name).items():
                _check(isinstance(key, str) and key.strip() == key and key != "" and isinstance(value, str),
                       name, f"{key!r}={value!r}: keys and values must be non-empty strings")
        for key in self.workload_options:
            _check(isinstance(key, str) and key != "", "workload_options", f"option name {key!r} must be a non-empty string")
        _check(self.version == SPEC_VERSION, "version", f"spec version {self.version!r} is not {SPEC_VERSION}")

    @property
    def external_cluster(self) -> bool:
        """Not the bundled cluster: --bootstrap-servers, or a user's Compose project (whose
        settings, like any external cluster's, are read back rather than typed)."""
        return self.bootstrap_servers is not None or self.docker_compose is not None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["nemeses"] = list(self.nemeses)
        out["nodes"] = list(self.nodes)
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "RunSpec":
        if not isinstance(raw, Mapping):
            raise SpecError(f"spec must be a JSON object, not {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SpecError(f"spec has unknown field(s): {', '.join(unknown)}")
        for required in ("name", "workload", "seed"):
            if required not in raw:
                raise SpecError(f"spec is missing field {required!r}")
        kwargs = dict(raw)
        if "nemeses" in kwargs:
            if not isinstance(kwargs["nemeses"], list):
                raise SpecError(f"nemeses: {kwargs['nemeses']!r} must be a list of names")
            kwargs["nemeses"] = tuple(kwargs["nemeses"])
        if "nodes" in kwargs:
            if not isinstance(kwargs["nodes"], list):
                raise SpecError(f"nodes: {kwargs['nodes']!r} must be a list of services")
            kwargs["nodes"] = tuple(kwargs["nodes"])
        for name in ("workload_options", "client_config", "client_config_overrides", "cluster_config", "nemesis_options"):
            if name in kwargs and not isinstance(kwargs[name], Mapping):
                raise SpecError(f"{name}: {kwargs[name]!r} must be an object")
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "RunSpec":
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}: not valid JSON: {exc}") from None
        try:
            return cls.from_json(raw)
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None


def _check(ok: bool, name: str, problem: str) -> None:
    if not ok:
        raise SpecError(f"{name}: {problem}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_positive(value: Any) -> bool:
    return _is_number(value) and value > 0


def parse_key_values(items: list[str] | None, what: str) -> dict[str, str]:
    """`["acks=all", "linger.ms=5"]` -> {"acks": "all", "linger.ms": "5"}; names the bad item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise SpecError(f"{what}: {item!r} is not key=value")
        if any(c.isspace() for c in key):
            raise SpecError(f"{what}: key {key!r} contains whitespace")
        out[key] = value
    return out
