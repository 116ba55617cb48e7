"""ComposeCluster: a Kafka-protocol cluster a user describes in a Docker Compose file, as the
cluster under test, with process and network faults on the services it names.

    with ComposeCluster("compose.yaml", nodes=[ComposeNode("kafka-1"), ...], client=docker_client()) as cluster:
        control = ComposeControl(cluster)
        Producer({"bootstrap.servers": cluster.bootstrap_servers})
        control.kill(1); control.start(1); control.pause(2); control.resume(2)

The project. Every cluster is a Compose project of its own, `logquake-<run id>-<owner pid>`
(`docker-compose -p`), so two runs of one file never share a container, network or volume, and
every object Compose makes carries the project in its `com.docker.compose.project` label. The
owner pid in the name is what the sweep reads: a project whose owner process is gone is
removed by the next cluster's start-up sweep or by hand (`python -m cluster.docker_compose
sweep`), and a reaper process started with each cluster removes the project once its owner
exits (a harness killed outright cannot run its teardown). close() runs `docker-compose down
-v` (containers, networks, volumes), then removes by label whatever Compose left, and the nft
table.

Compose is run with a few variables in its environment that a file may use (the example in
examples/compose/ does): LOGQUAKE_NET, the first three octets of a /24 no other Docker
network holds (taken free from 10.214.0.0/16, so a file can give its network a subnet and its
nodes static addresses without two runs colliding), LOGQUAKE_SUBNET (that /24) and, when the
caller passes it, LOGQUAKE_NODE_IMAGE (the bundled node image's tag).

The nodes. `nodes` names the services that are Kafka brokers (each with the port of its Kafka
listener, 9092 by default); each must run one container. A node's address is its IP on the
network every node shares. The cluster is up once every node answers ApiVersions and Metadata
there and lists every node among its brokers; each node's Kafka node id is read from that
Metadata answer (the broker entry whose host is the node's IP, service name, container name,
hostname or a network alias), so the control speaks in Kafka's own broker ids. A service
labelled `org.logquake.role: controller` is the cluster's controller for the partition nemesis
(a broker cut off from a majority is cut off from it too, as with the bundled cluster); it is
never killed or paused.

Faults. kill is `docker kill` (SIGKILL) and start `docker start` of the same container
(volumes keep the data); pause is `docker pause` (the cgroup freezer). Partitions are cut on
the shared network's bridge with nftables, as the docker back end does (bridge_cut: the table
and subnet; nemeses.net.nft.bridge_partitioner writes the rules). The cut is by address: a
node without a static address that comes back from a restart with a new one is cut by its new
address from the next topology on.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.control import pid_running
from cluster.docker_backend import (BridgeCut, DockerControl, DockerUnavailable, docker_client, logquake_nft_tables,
                                    reaper_cli, remove_nft_table, start_reaper)
from cluster.launcher import BrokerProcess, BrokerStartError
from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.protocol.versions import ApiKey

PROJECT_PREFIX = "logquake-"
PROJECT_RE = re.compile(r"^logquake-([0-9a-f]{12})-(\d+)$")
LABEL_PROJECT = "com.docker.compose.project"
LABEL_SERVICE = "com.docker.compose.service"
LABEL_ROLE = "org.logquake.role"
CONTROLLER_ROLE = "controller"
# Not the docker back end's `logquake_` prefix: its sweep removes `logquake_<id>` tables that
# have no `logquake-<id>` network, which a Compose project's table never has.
NFT_TABLE_PREFIX = "lqcompose_"
SUBNET_POOL = ipaddress.IPv4Network("10.214.0.0/16")  # the docker back end takes 10.213.0.0/16
DEFAULT_KAFKA_PORT = 9092
COMPOSE_TIMEOUT_S = 600.0  # `up` may build images the file names
DOWN_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10
STATE_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 2.0
METADATA_VERSION = 12
MAX_UP_ATTEMPTS = 4  # another run may take the /24 between our look and our `up`
# How long the nodes may take to answer after `up` and after each restart (real Kafka takes
# 10-30 s to start); the environment variable overrides it.
STARTUP_TIMEOUT_ENV = "LOGQUAKE_COMPOSE_STARTUP_TIMEOUT_S"
DEFAULT_STARTUP_TIMEOUT_S = 120.0


def configured_startup_timeout_s() -> float:
    """LOGQUAKE_COMPOSE_STARTUP_TIMEOUT_S, else 120 s; ValueError naming a bad value."""
    raw = os.environ.get(STARTUP_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_STARTUP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{STARTUP_TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return value


class ComposeError(RuntimeError):
    """Compose refused the file or the project (the message holds its output), or a named
    service is not what the cluster needs."""


@dataclass(frozen=True)
class ComposeNode:
    """A service that is a Kafka broker, and the port of its Kafka listener."""
    service: str
    port: int = DEFAULT_KAFKA_PORT

    @classmethod
    def parse(cls, text: str) -> ComposeNode:
        """`kafka-1` or `kafka-1:9092`; ValueError naming the bad item."""
        service, sep, port = text.strip().partition(":")
        if not service or any(c.isspace() for c in service):
            raise ValueError(f"{text!r} is not a service name (SERVICE or SERVICE:PORT)")
        if not sep:
            return cls(service)
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r}: the port must be a number in 1-65535")
        return cls(service, int(port))

    def __str__(self) -> str:
        return self.service if self.port == DEFAULT_KAFKA_PORT else f"{self.service}:{self.port}"


def parse_nodes(text: str) -> list[ComposeNode]:
    """`--nodes`' comma list; ValueError naming the bad item or a service named twice."""
    nodes = [ComposeNode.parse(part) for part in text.split(",") if part.strip()]
    if not nodes:
        raise ValueError("names no service")
    services = [n.service for n in nodes]
    twice = sorted({s for s in services if services.count(s) > 1})
    if twice:
        raise ValueError(f"names {', '.join(twice)} twice")
    return nodes


# -- the compose command ----------------------------------------------------------------

def compose_command() -> list[str]:
    """docker-compose (Debian's 1.29, which scripts/ensure-docker installs), else the CLI
    plugin `docker compose`."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                 timeout=30).returncode == 0:
        return ["docker", "compose"]
    raise DockerUnavailable("neither docker-compose nor `docker compose` is installed: run scripts/ensure-docker, "
                            "which installs Debian's docker-compose")


def compose_env(*, net: str = "10.214.0", docker_host: str | None = None, node_image: str | None = None) -> dict[str, str]:
    """The environment Compose runs in: ours, plus the LOGQUAKE_* variables a file may use."""
    env = dict(os.environ)
    env.update({"LOGQUAKE_NET": net, "LOGQUAKE_SUBNET": f"{net}.0/24"})
    if node_image is not None:
        env["LOGQUAKE_NODE_IMAGE"] = node_image
    if docker_host is not None:
        env["DOCKER_HOST"] = docker_host
    env.pop("COMPOSE_PROJECT_NAME", None)  # the project is always ours (-p)
    return env


def daemon_address(client: Any) -> str | None:
    """The DOCKER_HOST value of the daemon `client` talks to, for Compose (docker_client may
    have found the private daemon's socket without DOCKER_HOST set)."""
    api = getattr(client, "api", None)
    socket_path = getattr(getattr(api, "_custom_adapter", None), "socket_path", None)
    if socket_path:
        return "unix://" + socket_path
    base_url = getattr(api, "base_url", None)
    if base_url and not base_url.startswith("http+docker://"):
        return base_url.replace("http://", "tcp://", 1)
    return os.environ.get("DOCKER_HOST")


def _run_compose(file: str, project: str | None, args: Sequence[str], env: Mapping[str, str],
                 timeout_s: float = COMPOSE_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    command = [*compose_command(), "-f", file]
    if project is not None:
        command += ["-p", project]
    # A session of its own: a terminal's Ctrl-C is for the harness, which then stops the run and
    # tears down, not for a Compose half-way through `up`.
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout_s, env=dict(env),
                          cwd=os.path.dirname(os.path.abspath(file)), stdin=subprocess.DEVNULL, start_new_session=True)


def file_services(file: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The services of a Compose file (`config --services`, which also validates it, with the
    LOGQUAKE_* variables set); ComposeError naming the file and Compose's complaint."""
    path = os.path.abspath(file)
    if not os.path.isfile(path):
        raise ComposeError(f"{file}: no such file")
    result = _run_compose(path, None, ["config", "--services"], env if env is not None else
                          compose_env(node_image="logquake-node:check"), timeout_s=60)
    if result.returncode != 0:
        raise ComposeError(f"{file}: Compose refuses it: {_tail(result.stderr or result.stdout)}")
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def check_nodes(file: str | os.PathLike[str], nodes: Iterable[ComposeNode]) -> list[str]:
    """The file's services, once every node is one of them; ComposeError naming the others."""
    services = file_services(file)
    unknown = [n.service for n in nodes if n.service not in services]
    if unknown:
        raise ComposeError(f"{file} has no service {', '.join(repr(s) for s in unknown)} "
                           f"(its services: {', '.join(services) or 'none'})")
    return services


def _tail(text: str, lines: int = 12) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:]) or "(no output)"


# -- cleanup ----------------------------------------------------------------------------

def project_name(run_id: str, owner_pid: int) -> str:
    return f"{PROJECT_PREFIX}{run_id}-{owner_pid}"


def remove_project(client: Any, project: str) -> list[str]:
    """Remove every container, network and volume Compose made for `project`, and its nft
    table (without the Compose file: by the project label); returns what went."""
    label = {"label": f"{LABEL_PROJECT}={project}"}
    removed = []
    for container in client.containers.list(all=True, ignore_removed=True, filters=label):
        try:
            container.remove(force=True, v=True)
            removed.append(f"container {container.name}")
        except Exception:
            pass  # already going; a leftover shows in project_objects
    for network in client.networks.list(filters=label):
        try:
            network.remove()
            removed.append(f"network {network.name}")
        except Exception:
            pass
    for volume in client.volumes.list(filters=label):
        try:
            volume.remove(force=True)
            removed.append(f"volume {volume.name}")
        except Exception:
            pass
    match = PROJECT_RE.match(project)
    if match and NFT_TABLE_PREFIX + match.group(1) in compose_nft_tables():
        remove_nft_table(NFT_TABLE_PREFIX + match.group(1))
        removed.append(f"nft table bridge {NFT_TABLE_PREFIX + match.group(1)}")
    return removed


def project_objects(client: Any, project: str) -> list[str]:
    """What of `project` still exists (containers, networks, volumes, its nft table)."""
    label = {"label": f"{LABEL_PROJECT}={project}"}
    found = [f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters=label)]
    found += [f"network {n.name}" for n in client.networks.list(filters=label)]
    found += [f"volume {v.name}" for v in client.volumes.list(filters=label)]
    match = PROJECT_RE.match(project)
    if match and NFT_TABLE_PREFIX + match.group(1) in compose_nft_tables():
        found.append(f"nft table bridge {NFT_TABLE_PREFIX + match.group(1)}")
    return found


def compose_nft_tables() -> list[str]:
    return logquake_nft_tables(prefix=NFT_TABLE_PREFIX)


def logquake_projects(client: Any) -> set[str]:
    """Every project of logquake's with an object on the daemon."""
    projects: set[str] = set()
    label = {"label": LABEL_PROJECT}
    for kind in (client.containers.list(all=True, ignore_removed=True, filters=label), client.networks.list(filters=label),
                 client.volumes.list(filters=label)):
        for obj in kind:
            labels = obj.attrs.get("Labels") or obj.attrs.get("Config", {}).get("Labels") or {}
            project = labels.get(LABEL_PROJECT, "")
            if PROJECT_RE.match(project):
                projects.add(project)
    return projects


def sweep_stale(client: Any) -> list[str]:
    """Remove the projects (and nft tables) of every logquake Compose run whose owner process
    is gone; projects whose owner runs are left alone."""
    removed = []
    live_runs = set()
    for project in sorted(logquake_projects(client)):
        match = PROJECT_RE.match(project)
        assert match is not None
        if pid_running(int(match.group(2))):
            live_runs.add(match.group(1))
        else:
            removed += remove_project(client, project)
    for table in compose_nft_tables():
        if table[len(NFT_TABLE_PREFIX):] not in live_runs:
            remove_nft_table(table)
            removed.append(f"nft table bridge {table}")
    return removed


def _start_reaper(project: str, owner_pid: int) -> subprocess.Popen[bytes]:
    """A detached process that removes the project once `owner_pid` is gone."""
    return start_reaper("cluster.docker_compose", project, owner_pid)




# -- probing ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeAnswer:
    """What a node said about the cluster: its own Kafka node id (None: not in the answer
    yet) and every broker id Metadata listed."""
    node_id: int | None
    broker_ids: frozenset[int]
    advertised: Mapping[int, str] = field(default_factory=dict)  # broker id -> host:port in that answer


def ask_node(host: str, port: int, names: Iterable[str], timeout_s: float = PROBE_TIMEOUT_S) -> NodeAnswer:
    """ApiVersions then Metadata to host:port; the node's own id is the broker entry whose
    advertised host is `host` or one of `names`. Raises OSError or ProtocolClientError."""
    own = {host, *names}
    with WireClient(host, port, timeout_s=timeout_s, client_id="logquake-compose") as client:
        versions = client.request(ApiKey.API_VERSIONS, 3, client_software_name="logquake-probe", client_software_version="0")
        if versions.error_code.value != 0:
            raise ProtocolClientError(f"ApiVersions answered error {versions.error_code}")
        metadata = client.request(ApiKey.METADATA, METADATA_VERSION, topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
    ids = frozenset(int(b.node_id) for b in metadata.brokers)
    mine = [int(b.node_id) for b in metadata.brokers if b.host in own and int(b.port) == port]
    mine = mine or [int(b.node_id) for b in metadata.brokers if b.host in own]
    return NodeAnswer(mine[0] if len(set(mine)) == 1 else None, ids,
                      {int(b.node_id): f"{b.host}:{int(b.port)}" for b in metadata.brokers})


# -- the cluster ------------------------------------------------------------------------

@dataclass
class _Node:
    spec: ComposeNode
    container_id: str
    names: tuple[str, ...]  # service, container name, hostname, aliases: what it may advertise
    broker: BrokerProcess


class ComposeCluster:
    """LocalCluster's interface (start, kill, stop, pause, resume, is_alive, brokers,
    controller, bootstrap_servers, close) over a Compose project; see the module docstring."""

    def __init__(self, file: str | os.PathLike[str], nodes: Sequence[ComposeNode], *, client: Any = None,
                 docker_host: str | None = None, node_image: str | None = None, startup_timeout_s: float | None = None,
                 reaper: bool = True, log: Callable[[str], None] | None = None) -> None:
        if not nodes:
            raise ValueError("a Compose cluster needs at least one node (a service that is a Kafka broker)")
        self.file = os.path.abspath(file)
        self.nodes_wanted = list(nodes)
        self._client = client
        self._docker_host = docker_host
        self._node_image = node_image
        self._startup_timeout_s = (startup_timeout_s if startup_timeout_s is not None
                                  else configured_startup_timeout_s())
        self._use_reaper = reaper
        self._log = log or (lambda message: None)
        self._reaper: subprocess.Popen[bytes] | None = None
        self.run_id = uuid.uuid4().hex[:12]
        self.project = project_name(self.run_id, os.getpid())
        self.net = ""  # LOGQUAKE_NET of the project
        self.network_name: str | None = None  # the network every node is on
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_cut: BridgeCut | None = None
        self._pending: list[tuple[ComposeNode, Any]] = []  # (node, container) until their ids are known
        self._nodes: dict[int, _Node] = {}  # Kafka node id -> node
        self.brokers: list[BrokerProcess] = []
        self.controller: BrokerProcess | None = None  # the service labelled org.logquake.role=controller
        self.advertised: dict[int, str] = {}  # node id -> the host:port it advertises where logquake asks
        self.proxies = None  # no proxied links (latency, bandwidth, flaky) here
        self._up = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def env(self) -> dict[str, str]:
        return compose_env(net=self.net or "10.214.0", docker_host=self._docker_host or daemon_address(self.client),
                           node_image=self._node_image)

    # ---- context manager ------------------------------------------------------------

    def __enter__(self) -> ComposeCluster:
        try:
            for item in sweep_stale(self.client):
                self._log(f"removed {item} of an earlier run whose owner is gone")
            if self._use_reaper:
                self._reaper = _start_reaper(self.project, os.getpid())
            self._compose_up()
            self._find_nodes()
            self._wait_until_up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _free_nets(self) -> list[str]:
        """/24s of SUBNET_POOL no Docker network holds, starting at one the run id picks."""
        taken = []
        for network in self.client.networks.list():
            for config in (network.attrs.get("IPAM") or {}).get("Config") or []:
                try:
                    taken.append(ipaddress.ip_network(config.get("Subnet", ""), strict=False))
                except ValueError:
                    pass
        subnets = list(SUBNET_POOL.subnets(new_prefix=24))
        first = int(self.run_id, 16) % len(subnets)
        ordered = subnets[first:] + subnets[:first]
        free = [s for s in ordered if not any(s.overlaps(t) for t in taken if t.version == 4)]
        return [str(s.network_address).rsplit(".", 1)[0] for s in free]

    def _compose_up(self) -> None:
        last = ""
        for net in self._free_nets()[:MAX_UP_ATTEMPTS]:
            self.net = net
            self._log(f"docker-compose -p {self.project} -f {self.file} up -d (LOGQUAKE_NET={net})")
            result = _run_compose(self.file, self.project, ["up", "-d", "--no-color"], self.env())
            if result.returncode == 0:
                self._up = True
                return
            last = _tail(result.stderr or result.stdout)
            self._compose_down()
            if "overlap" not in last.lower():
                break  # not a subnet race: retrying would fail the same way
        raise ComposeError(f"docker-compose up of {self.file} failed: {last or 'no free /24 left in ' + str(SUBNET_POOL)}")

    def _compose_down(self) -> str:
        try:
            result = _run_compose(self.file, self.project, ["down", "-v", "--remove-orphans", "-t", str(STOP_TIMEOUT_S)],
                                  self.env(), timeout_s=DOWN_TIMEOUT_S)
        except (subprocess.TimeoutExpired, OSError, DockerUnavailable) as exc:
            return str(exc)
        return "" if result.returncode == 0 else _tail(result.stderr or result.stdout)

    def _containers_of(self, service: str) -> list[Any]:
        return self.client.containers.list(all=True, ignore_removed=True, filters={
            "label": [f"{LABEL_PROJECT}={self.project}", f"{LABEL_SERVICE}={service}"]})

    def _find_nodes(self) -> None:
        """Each node's container and the network they all share; the controller service."""
        found: list[tuple[ComposeNode, Any]] = []
        for node in self.nodes_wanted:
            containers = self._containers_of(node.service)
            if len(containers) != 1:
                raise ComposeError(f"service {node.service!r} runs {len(containers)} containers in the project; "
                                   "a node must be exactly one (no scale, no replicas)")
            found.append((node, containers[0]))
        shared = None
        for _, container in found:
            networks = set((container.attrs["NetworkSettings"].get("Networks") or {}))
            shared = networks if shared is None else shared & networks
        if not shared:
            raise ComposeError(f"the services {', '.join(n.service for n, _ in found)} share no network: the "
                               "partition nemesis and the clients need one network they are all on")
        self.network_name = sorted(shared)[0]
        network = self.client.networks.get(self.network_name)
        subnets = [c.get("Subnet") for c in (network.attrs.get("IPAM") or {}).get("Config") or [] if ":" not in c.get("Subnet", ":")]
        if not subnets:
            raise ComposeError(f"network {self.network_name} has no IPv4 subnet")
        self.subnet = ipaddress.IPv4Network(subnets[0], strict=False)
        self.bridge_cut = BridgeCut(NFT_TABLE_PREFIX + self.run_id, self.subnet)
        self._pending = found
        for container in self.client.containers.list(all=True, ignore_removed=True,
                                                     filters={"label": [f"{LABEL_PROJECT}={self.project}",
                                                                        f"{LABEL_ROLE}={CONTROLLER_ROLE}"]}):
            host = self._address(container)
            if host:
                self.controller = BrokerProcess(-1, host, 0, "", "")
                break

    def _address(self, container: Any) -> str:
        container.reload()
        settings = (container.attrs["NetworkSettings"].get("Networks") or {}).get(self.network_name) or {}
        return settings.get("IPAddress") or ""

    @staticmethod
    def _names(container: Any, network_name: str | None) -> tuple[str, ...]:
        config = container.attrs.get("Config") or {}
        settings = (container.attrs["NetworkSettings"].get("Networks") or {}).get(network_name) or {}
        labels = config.get("Labels") or {}
        names = [labels.get(LABEL_SERVICE, ""), container.name, config.get("Hostname", ""), *(settings.get("Aliases") or [])]
        return tuple(n for n in dict.fromkeys(names) if n)

    def _wait_until_up(self) -> None:
        """Until every node answers, names itself in its Metadata, and lists every node."""
        deadline = time.monotonic() + self._startup_timeout_s
        problems: dict[str, str] = {}
        answers: dict[str, NodeAnswer] = {}
        while True:
            for node, container in self._pending:
                container.reload()
                if not container.attrs["State"].get("Running"):
                    raise BrokerStartError(f"service {node.service!r} is not running (status "
                                           f"{container.attrs['State'].get('Status')}, exit code "
                                           f"{container.attrs['State'].get('ExitCode')}):\n{self._logs(container)}")
                host = self._address(container)
                try:
                    answers[node.service] = ask_node(host, node.port, self._names(container, self.network_name))
                    problems.pop(node.service, None)
                except (OSError, ProtocolClientError) as exc:
                    problems[node.service] = f"{host}:{node.port}: {exc}"
                    answers.pop(node.service, None)
            ids = {s: a.node_id for s, a in answers.items()}
            if len(answers) == len(self._pending) and None not in ids.values() and len(set(ids.values())) == len(ids):
                if all(set(ids.values()) <= a.broker_ids for a in answers.values()):
                    break
                problems = {"cluster": f"not every node is registered yet (node ids {sorted(ids.values())}; "
                                       f"brokers listed: {sorted(set().union(*(a.broker_ids for a in answers.values())))})"}
            else:
                for service, answer in answers.items():
                    if answer.node_id is None:
                        problems[service] = (f"its Metadata lists brokers {sorted(answer.broker_ids)} but none at its "
                                             "own address or names: the listener logquake connects to must advertise "
                                             "the node's IP on the network, service name, hostname or container name")
            if time.monotonic() > deadline:
                raise BrokerStartError(f"the nodes did not all answer Kafka ApiVersions and Metadata within "
                                       f"{self._startup_timeout_s:g} s: " + "; ".join(f"{k}: {v}" for k, v in sorted(problems.items())))
            time.sleep(0.25)
        for node, container in self._pending:
            node_id = answers[node.service].node_id
            assert node_id is not None
            broker = BrokerProcess(node_id, self._address(container), node.port, "", "",
                                   pid=int(container.attrs["State"].get("Pid") or 0) or None)
            self._nodes[node_id] = _Node(node, container.id, self._names(container, self.network_name), broker)
        self.brokers = [self._nodes[i].broker for i in sorted(self._nodes)]
        self.advertised = {i: answers[n.spec.service].advertised.get(i, "") for i, n in self._nodes.items()}

    def unreachable_advertised(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
        """The nodes whose advertised address (on the listener logquake connects to) this host
        cannot open a TCP connection to, as `service advertises host:port (why)`: clients that
        bootstrap from the nodes follow those addresses."""
        problems = []
        for node_id, address in sorted(self.advertised.items()):
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                    pass
            except (OSError, ValueError) as exc:
                problems.append(f"{self.service(node_id)} advertises {address} ({exc})")
        return problems

    def _logs(self, container: Any, lines: int = 30) -> str:
        try:
            return container.logs(tail=lines).decode(errors="replace").strip() or "(no log)"
        except Exception:
            return "(no log)"

    # ---- one node -------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        if node_id not in self._nodes:
            raise ValueError(f"no node {node_id}: the nodes are {sorted(self._nodes)} "
                             f"({', '.join(f'{i}={n.spec.service}' for i, n in sorted(self._nodes.items()))})")
        return self._nodes[node_id]

    def service(self, node_id: int) -> str:
        return self._node(node_id).spec.service

    def _state(self, node_id: int) -> dict[str, Any]:
        import docker.errors

        try:
            return self.client.api.inspect_container(self._node(node_id).container_id)["State"]
        except docker.errors.NotFound:
            return {}

    def is_alive(self, node_id: int) -> bool:
        return bool(self._state(node_id).get("Running"))

    def is_paused(self, node_id: int) -> bool:
        state = self._state(node_id)
        return bool(state.get("Running") and state.get("Paused"))

    def kill(self, node_id: int) -> None:
        """`docker kill` (SIGKILL), then wait until the container has stopped."""
        import docker.errors

        node = self._node(node_id)
        try:
            if self.is_alive(node_id):
                self.client.api.kill(node.container_id, "SIGKILL")
        except docker.errors.APIError:
            pass  # it stopped meanwhile
        self._await(node_id, lambda state: not state.get("Running"), "stop")

    def stop(self, node_id: int, timeout_s: float = 15.0) -> int | None:
        node = self._node(node_id)
        if not self.is_alive(node_id):
            return None
        if self.is_paused(node_id):
            self.resume(node_id)
        self.client.api.stop(node.container_id, timeout=int(timeout_s))
        self._await(node_id, lambda state: not state.get("Running"), "stop")
        return self._state(node_id).get("ExitCode")

    def start(self, node_id: int, *, until: str = "ready") -> BrokerProcess:
        """`docker start` of the node's container, then wait until it answers ApiVersions
        ("listening") or also lists itself among the brokers ("ready")."""
        if until not in ("ready", "listening"):
            raise ValueError(f"until={until!r}: expected 'ready' or 'listening'")
        node = self._node(node_id)
        if self.is_alive(node_id):
            raise RuntimeError(f"node {node_id} (service {node.spec.service}) is already running")
        self.client.api.start(node.container_id)
        container = self.client.containers.get(node.container_id)
        host = self._address(container)
        if host and host != node.broker.host:
            self._log(f"service {node.spec.service} came back at {host} (was {node.broker.host})")
            node.broker.host = host
        node.broker.pid = int(container.attrs["State"].get("Pid") or 0) or None
        deadline = time.monotonic() + self._startup_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            state = self._state(node_id)
            if not state.get("Running"):
                raise BrokerStartError(f"service {node.spec.service} exited with status {state.get('ExitCode')}:\n"
                                       f"{self._logs(container)}")
            try:
                answer = ask_node(node.broker.host, node.spec.port, node.names)
                if until == "listening" or node_id in answer.broker_ids:
                    return node.broker
                last = f"not among the brokers its Metadata lists ({sorted(answer.broker_ids)})"
            except (OSError, ProtocolClientError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise BrokerStartError(f"service {node.spec.service} did not answer within {self._startup_timeout_s:g} s "
                               f"of its start ({last}):\n{self._logs(container)}")

    def pause(self, node_id: int) -> None:
        """`docker pause` (the cgroup freezer); returns once the container is paused."""
        self.client.api.pause(self._node(node_id).container_id)
        self._await(node_id, lambda state: state.get("Paused") or not state.get("Running"), "pause")

    def resume(self, node_id: int) -> None:
        if self.is_paused(node_id):
            self.client.api.unpause(self._node(node_id).container_id)
        self._await(node_id, lambda state: not state.get("Paused"), "unpause")

    def _await(self, node_id: int, done: Callable[[dict[str, Any]], bool], what: str) -> None:
        deadline = time.monotonic() + STATE_TIMEOUT_S
        while not done(self._state(node_id)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"service {self.service(node_id)} did not {what} within {STATE_TIMEOUT_S} s")
            time.sleep(0.01)

    # ---- teardown -------------------------------------------------------------------

    def close(self) -> None:
        """`docker-compose down -v` (paused containers are unpaused first: a frozen process
        cannot take its SIGTERM), then whatever Compose left, by label, and the nft table."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._client is not None:
                for node_id in list(self._nodes):
                    try:
                        if self.is_paused(node_id):
                            self.client.api.unpause(self._nodes[node_id].container_id)
                    except Exception:
                        pass
                problem = self._compose_down()
                if problem:
                    self._log(f"docker-compose down of {self.project} failed ({problem}); removing by label")
                left = remove_project(self._client, self.project)
                if left:
                    self._log(f"removed after docker-compose down: {', '.join(left)}")
                remove_nft_table(NFT_TABLE_PREFIX + self.run_id)
        finally:
            if self._reaper is not None:
                self._reaper.terminate()
                self._reaper.wait(timeout=10)


class ComposeControl(DockerControl):
    """The Docker back end's control over a ComposeCluster: node ids are the cluster's Kafka
    node ids; a paused node is a frozen container; partitions are cut on the shared
    network's bridge."""

    NOT_RUNNING = "the Compose project is not up: no network to partition"


def main(argv: list[str] | None = None) -> int:
    """`python -m cluster.docker_compose reap PROJECT OWNER_PID` (the reaper) or `sweep`."""
    return reaper_cli(sys.argv[1:] if argv is None else argv, "cluster.docker_compose", "PROJECT", remove_project,
                      sweep_stale)


if __name__ == "__main__":
    sys.exit(main())
