"""DockerCluster: the bundled cluster with each controller and each broker in a container of its own.

    with DockerCluster(brokers=3, image=tag, base_dir=run_dir / "cluster") as cluster:
        control = DockerControl(cluster)
        Producer({"bootstrap.servers": cluster.bootstrap_servers})
        control.kill(0); control.start(0); control.pause(1); control.resume(1)

Layout. Each cluster gets a user-defined bridge network of its own, `logquake-<run id>`, on a
/24 subnet picked free from 10.213.0.0/16, with the same host numbers as LocalCluster's loopback
addresses: the controller at .9 (with `controllers=3` or 5, controllers 1000, 1001, ... at .9,
.8, ...), broker i at .(10+i), so the addresses a test reads are the container IPs and the
harness (clients included) reaches them from the host over the bridge. Every node is given
`controller.quorum.voters` naming the controllers' static addresses, as on the local back end.
Containers get static addresses, so a container that is killed and started again comes back
where it was. The cluster's base directory is bind-mounted at the same path inside every
container: data directories, logs, ready files and clock files are where LocalCluster would put
them, and the host reads them as it does for local processes.

Faults. kill is `docker kill` (SIGKILL) and start is `docker start` of the same container (its
data directory survives on the bind mount); pause is `docker pause` (the cgroup freezer, which
a process cannot notice or resist, unlike SIGSTOP); stop is SIGTERM with a timeout. Partitions
are nftables rules in the host's `bridge` family, in a table of the run's own
(`logquake_<run id>`), on the forward hook: the frames between two containers of the network
cross the host's bridge, so one atomic `nft -f` transaction per topology cuts exactly the
chosen pairs, and the rules stay in force across a container's restart (rules inside a
container's own network namespace vanish with it, and would leave a killed-and-restarted broker
unpartitioned until re-applied). The host's traffic to the containers is bridge output, not
forward, so the harness keeps reaching every node, as Jepsen's control node does. The rules are
written by nemeses.net.nft's bridge_partitioner from the control's bridge_cut (table and
subnet); this module only deletes the table at teardown. Clock skew:
brokers run with libfaketime preloaded from the image, reading their timestamp file on
the bind mount (BrokerClocks with IMAGE_FAKETIME_LIBRARY).

Cleanup. Every object carries the labels `org.logquake.run` (the run id) and
`org.logquake.owner_pid` (the process that made it). close() removes the containers, the
network and the nft table; a SIGINT/SIGTERM reaches close() through the harness's teardown.
For a harness that dies without tearing down (SIGKILL, a crash), a reaper process started with
the cluster removes the run's objects once the owner is gone, and `sweep_stale()`, called
before every new cluster, removes any logquake object whose owner process no longer runs.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.control import ClusterControl, pid_running
from cluster.launcher import (CONTROLLER_COUNTS, CONTROLLER_NODE_ID, FIRST_HOST_OCTET, MAX_BROKERS, BrokerProcess, BrokerStartError,
                              active_controller_of, is_controller_id, probe, probe_controller)
from cluster.protocol.client import ProtocolClientError

LABEL_RUN = "org.logquake.run"
LABEL_OWNER_PID = "org.logquake.owner_pid"
LABEL_ROLE = "org.logquake.role"
NETWORK_PREFIX = "logquake-"
NFT_TABLE_PREFIX = "logquake_"
SUBNET_POOL = ipaddress.IPv4Network("10.213.0.0/16")
CONTROLLER_HOST_NUMBER = 9
BROKER_PORT = 9092
CONTROLLER_PORT = 9093
# The node image's python (Debian's) and the libfaketime build of its PyPI wheel (harness/image.py).
IMAGE_PYTHON = "/usr/bin/python3"
IMAGE_FAKETIME_LIBRARY = "/usr/local/lib/python3.11/dist-packages/libfaketime/vendor/libfaketime/src/libfaketime.so.1"
# Where scripts/ensure-docker puts the private daemon's socket.
PRIVATE_DOCKER_HOST = "unix:///var/lib/logquake-docker/docker.sock"
DOCKER_API_TIMEOUT_S = 60
NFT_TIMEOUT_S = 10.0
STATE_TIMEOUT_S = 10.0

class DockerUnavailable(RuntimeError):
    """No Docker daemon answers, or the SDK is missing; the message says what to run."""


# -- the daemon -------------------------------------------------------------------------

def docker_client() -> Any:
    """A docker.DockerClient for the first daemon that answers: $DOCKER_HOST, the system
    socket, then the private daemon scripts/ensure-docker starts."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable("the Docker back end needs the Python package `docker` (pip install -e . installs it)") from None
    candidates = [os.environ["DOCKER_HOST"]] if os.environ.get("DOCKER_HOST") else []
    candidates += ["unix:///var/run/docker.sock", PRIVATE_DOCKER_HOST]
    problems = []
    for base_url in dict.fromkeys(candidates):
        if base_url.startswith("unix://") and not os.path.exists(base_url[len("unix://"):]):
            problems.append(f"{base_url}: no socket")
            continue
        try:
            client = docker.DockerClient(base_url=base_url, timeout=DOCKER_API_TIMEOUT_S)
            client.ping()
            return client
        except Exception as exc:
            problems.append(f"{base_url}: {exc}")
    raise DockerUnavailable("no Docker daemon answers (" + "; ".join(problems) + "): run scripts/ensure-docker, which "
                            "installs docker.io and starts a private daemon (scripts/ensure-docker stop ends it)")


# -- partitions ---------------------------------------------------------------------------
# The partitioner itself is nemeses.net.nft's (bridge_partitioner: the table
# `bridge logquake_<run id>` on the host's forward hook); the cluster only names the table and
# the subnet (BridgeCut, the control's bridge_cut) and deletes the table at teardown, since the
# cluster package may not import the nemeses.

@dataclass(frozen=True)
class BridgeCut:
    """Where a run's partitions go: the nft table (bridge family) and the only subnet it may cut."""
    table: str
    subnet: ipaddress.IPv4Network


def remove_nft_table(table: str) -> None:
    """Delete the bridge-family table `table` (absent is fine)."""
    if shutil.which("nft") is not None:
        subprocess.run(["nft", "-f", "-"], input=f"add table bridge {table}\ndelete table bridge {table}\n",
                       capture_output=True, text=True, timeout=NFT_TIMEOUT_S)


def logquake_nft_tables(prefix: str = NFT_TABLE_PREFIX) -> list[str]:
    """The bridge-family tables whose name starts with `prefix` (the docker back end's own by default)."""
    if shutil.which("nft") is None:
        return []
    result = subprocess.run(["nft", "-j", "list", "tables", "bridge"], capture_output=True, text=True, timeout=NFT_TIMEOUT_S)
    if result.returncode != 0:
        return []
    return [item["table"]["name"] for item in json.loads(result.stdout).get("nftables", [])
            if "table" in item and item["table"]["name"].startswith(prefix)]


# -- cleanup ----------------------------------------------------------------------------

def remove_run(client: Any, run_id: str) -> list[str]:
    """Remove every container, network and nft table of run `run_id`; returns what went."""
    removed = []
    for container in client.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_RUN}={run_id}"}):
        try:
            container.remove(force=True, v=True)
            removed.append(f"container {container.name}")
        except Exception:
            pass  # already going (a concurrent close); the network removal below names a leftover
    for network in client.networks.list(filters={"label": f"{LABEL_RUN}={run_id}"}):
        try:
            network.remove()
            removed.append(f"network {network.name}")
        except Exception:
            pass
    for volume in client.volumes.list(filters={"label": f"{LABEL_RUN}={run_id}"}):
        try:
            volume.remove(force=True)
            removed.append(f"volume {volume.name}")
        except Exception:
            pass
    table = NFT_TABLE_PREFIX + run_id
    if table in logquake_nft_tables():
        remove_nft_table(table)
        removed.append(f"nft table bridge {table}")
    return removed


def sweep_stale(client: Any) -> list[str]:
    """Remove the objects of every logquake run whose owner process is gone (a harness
    killed outright, a crash); runs whose owner still runs are left alone. Lists skip a
    container removed between listing and inspecting it (`ignore_removed`): another run on
    the same daemon may be tearing down meanwhile (docker-py raises NotFound otherwise)."""
    runs: set[str] = set()
    live: set[str] = set()
    for kind in (client.containers.list(all=True, ignore_removed=True, filters={"label": LABEL_RUN}), client.networks.list(filters={"label": LABEL_RUN})):
        for obj in kind:
            labels = obj.attrs.get("Labels") or obj.attrs.get("Config", {}).get("Labels") or {}
            run_id = labels.get(LABEL_RUN)
            if not run_id:
                continue
            runs.add(run_id)
            try:
                if pid_running(int(labels.get(LABEL_OWNER_PID, "0"))):
                    live.add(run_id)
            except ValueError:
                pass
    networks = {n.name for n in client.networks.list()}
    removed = []
    for run_id in sorted(runs - live):
        removed += remove_run(client, run_id)
    for table in logquake_nft_tables():
        run_id = table[len(NFT_TABLE_PREFIX):]
        if run_id not in live and NETWORK_PREFIX + run_id not in networks:
            remove_nft_table(table)
            removed.append(f"nft table bridge {table}")
    return removed


def run_objects(client: Any, run_id: str) -> list[str]:
    """What of run `run_id` still exists (containers, networks, volumes, nft table)."""
    found = [f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_RUN}={run_id}"})]
    found += [f"network {n.name}" for n in client.networks.list(filters={"label": f"{LABEL_RUN}={run_id}"})]
    found += [f"volume {v.name}" for v in client.volumes.list(filters={"label": f"{LABEL_RUN}={run_id}"})]
    if NFT_TABLE_PREFIX + run_id in logquake_nft_tables():
        found.append(f"nft table bridge {NFT_TABLE_PREFIX + run_id}")
    return found


def start_reaper(module: str, key: str, owner_pid: int) -> subprocess.Popen[bytes]:
    """A detached `python -m MODULE reap KEY OWNER_PID` that removes what KEY names (a run's
    objects, a Compose project) once `owner_pid` is gone, so a harness killed outright (no
    teardown) leaves nothing behind."""
    env = dict(os.environ)
    project_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = project_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", module, "reap", key, str(owner_pid)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env, cwd=project_root)


def reap_when_gone(owner_pid: int, remove: Callable[[Any], Any]) -> int:
    """The reaper's body: wait for the owner to exit, then `remove(docker client)`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the harness
    while pid_running(owner_pid):
        time.sleep(0.5)
    try:
        remove(docker_client())
    except DockerUnavailable:
        return 1
    return 0


def _start_reaper(run_id: str, owner_pid: int) -> subprocess.Popen[bytes]:
    return start_reaper("cluster.docker_backend", run_id, owner_pid)


def reaper_cli(argv: list[str], module: str, key_name: str, remove: Callable[[Any, str], Any],
               sweep: Callable[[Any], Iterable[str]]) -> int:
    """`python -m MODULE reap KEY OWNER_PID` (the reaper: `remove(client, KEY)` once the owner
    is gone) or `python -m MODULE sweep` (what `sweep(client)` removed, a line each)."""
    if len(argv) == 3 and argv[0] == "reap" and argv[2].isdigit():
        key = argv[1]
        return reap_when_gone(int(argv[2]), lambda client: remove(client, key))
    if argv == ["sweep"]:
        for item in sweep(docker_client()):
            print(f"removed {item}")
        return 0
    print(f"usage: python -m {module} reap {key_name} OWNER_PID | sweep", file=sys.stderr)
    return 2


# -- the cluster ------------------------------------------------------------------------

class DockerCluster:
    """LocalCluster's interface (start, kill, stop, pause, resume, is_alive, brokers,
    controller, controllers, active_controller, bootstrap_servers, close) over containers; see
    the module docstring."""

    def __init__(
        self,
        brokers: int = 1,
        *,
        image: str,
        base_dir: str | os.PathLike[str] | None = None,
        config: Mapping[str, str] | None = None,
        extra_env: Callable[[int], dict[str, str]] | None = None,
        shared_dirs: Iterable[str | os.PathLike[str]] = (),
        startup_timeout_s: float = 60.0,
        seed: int | None = None,
        client: Any = None,
        reaper: bool = True,
        controllers: int = 1,
    ) -> None:
        if controllers not in CONTROLLER_COUNTS:
            raise ValueError(f"controllers={controllers}: the bundled cluster runs {', '.join(map(str, CONTROLLER_COUNTS))} controllers")
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, got {brokers}")
        if brokers > MAX_BROKERS:
            raise ValueError(f"{brokers} brokers requested; the bundled cluster runs at most {MAX_BROKERS}")
        self.image = image
        self._own_base_dir = base_dir is None
        self.base_dir = str(Path(base_dir).resolve()) if base_dir is not None else tempfile.mkdtemp(prefix="logquake-docker-")
        os.makedirs(self.base_dir, exist_ok=True)
        self.config = {"offsets.topic.replication.factor": str(min(3, brokers)),
                       "transaction.state.log.replication.factor": str(min(3, brokers)),
                       "transaction.state.log.min.isr": str(min(2, brokers)), **dict(config or {})}
        self._extra_env = extra_env
        self._shared_dirs = [str(Path(d).resolve()) for d in shared_dirs]
        self._startup_timeout_s = startup_timeout_s
        self._seed = seed
        self._client = client
        self._use_reaper = reaper
        self._reaper: subprocess.Popen[bytes] | None = None
        self.run_id = uuid.uuid4().hex[:12]
        self.network_name = NETWORK_PREFIX + self.run_id
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_cut: BridgeCut | None = None  # set once the network exists
        self._containers: dict[int, str] = {}  # node id -> container id
        self._paused: set[int] = set()
        self._closed = False
        self.brokers = [BrokerProcess(i, "", BROKER_PORT, os.path.join(self.base_dir, f"broker-{i}"),
                                      os.path.join(self.base_dir, f"broker-{i}.log")) for i in range(brokers)]
        # One controller keeps the single-controller names; a quorum's are by node id, as LocalCluster's.
        names = ["controller"] if controllers == 1 else [f"controller-{CONTROLLER_NODE_ID + i}" for i in range(controllers)]
        self.controllers = [BrokerProcess(CONTROLLER_NODE_ID + i, "", CONTROLLER_PORT, os.path.join(self.base_dir, name),
                                          os.path.join(self.base_dir, f"{name}.log")) for i, name in enumerate(names)]
        self.controller = self.controllers[0]
        self.proxies = None  # the proxied links (latency, bandwidth, flaky) are not offered here

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    def _node(self, node_id: int) -> BrokerProcess:
        for controller in self.controllers:
            if controller.broker_id == node_id:
                return controller
        if not 0 <= node_id < len(self.brokers):
            raise ValueError(f"no node {node_id}: brokers are 0-{len(self.brokers) - 1}, the controllers {self.controller_ids}")
        return self.brokers[node_id]

    @property
    def controller_ids(self) -> list[int]:
        return [c.broker_id for c in self.controllers]

    def container_name(self, node_id: int) -> str:
        if not is_controller_id(node_id):
            return f"logquake-{self.run_id}-broker-{node_id}"
        return f"logquake-{self.run_id}-controller" + ("" if len(self.controllers) == 1 else f"-{node_id}")

    @property
    def controller_voters(self) -> str:
        return ",".join(f"{c.broker_id}@{c.host}:{c.port}" for c in self.controllers)

    def active_controller(self) -> int | None:
        """The active controller's node id, as the first live, unpaused controller answers
        DescribeQuorum (None: no leader known, or none answers)."""
        return active_controller_of(self.controllers, lambda node: self.is_alive(node) and not self.is_paused(node))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def labels(self, role: str) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_OWNER_PID: str(os.getpid()), LABEL_ROLE: role}

    # ---- context manager ------------------------------------------------------------

    def __enter__(self) -> DockerCluster:
        try:
            sweep_stale(self.client)
            self.client.images.get(self.image)  # fails early, naming the image, if it is missing
            self._create_network()
            if self._use_reaper:
                self._reaper = _start_reaper(self.run_id, os.getpid())
            self.bridge_cut = BridgeCut(NFT_TABLE_PREFIX + self.run_id, self.subnet)  # type: ignore[arg-type]
            for node in [*self.controllers, *self.brokers]:
                self._create_container(node.broker_id)
            # A controller is ready once it answers, before the quorum has a leader, so they
            # start one after the other as on the local back end.
            for controller in self.controllers:
                self.start(controller.broker_id)
            with ThreadPoolExecutor(max_workers=len(self.brokers)) as pool:
                for future in [pool.submit(self.start, b.broker_id) for b in self.brokers]:
                    future.result()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _create_network(self) -> None:
        import docker.errors
        import docker.types

        subnets = list(SUBNET_POOL.subnets(new_prefix=24))
        first = int(self.run_id, 16) % len(subnets)
        last_error = None
        for step in range(len(subnets)):
            subnet = subnets[(first + step) % len(subnets)]
            pool = docker.types.IPAMPool(subnet=str(subnet), gateway=str(subnet[1]))
            try:
                self.client.networks.create(self.network_name, driver="bridge", labels=self.labels("network"),
                                            ipam=docker.types.IPAMConfig(pool_configs=[pool]), check_duplicate=True)
            except docker.errors.APIError as exc:
                last_error = exc
                if "overlap" in str(exc).lower():
                    continue  # another run's network has it
                raise
            self.subnet = subnet
            for controller in self.controllers:
                controller.host = str(subnet[CONTROLLER_HOST_NUMBER - (controller.broker_id - CONTROLLER_NODE_ID)])
            for broker in self.brokers:
                broker.host = str(subnet[FIRST_HOST_OCTET + broker.broker_id])
            return
        raise RuntimeError(f"no free /24 subnet left in {SUBNET_POOL} for the run's network: {last_error}")

    def argv(self, node_id: int) -> list[str]:
        node = self._node(node_id)
        if is_controller_id(node_id):
            argv = [IMAGE_PYTHON, "-m", "cluster.controller.main", "--node-id", str(node_id),
                    "--host", node.host, "--port", str(node.port), "--data-dir", node.data_dir,
                    "--log-file", node.log_path, "--ready-file", node.ready_file]
            config = dict(self.config)
            if len(self.controllers) > 1:
                config["controller.quorum.voters"] = self.controller_voters
        else:
            argv = [IMAGE_PYTHON, "-m", "cluster.runtime.broker_main", "--broker-id", str(node_id),
                    "--host", node.host, "--port", str(node.port), "--data-dir", node.data_dir,
                    "--log-file", node.log_path, "--ready-file", node.ready_file,
                    "--listening-file", node.listening_file]
            config = {**self.config, "controller.quorum.voters": self.controller_voters}
        if self._seed is not None:
            argv += ["--seed", str(self._seed + node_id)]
        for key, value in sorted(config.items()):
            argv += ["--config", f"{key}={value}"]
        return argv

    def _create_container(self, node_id: int) -> None:
        node = self._node(node_id)
        api = self.client.api
        env = {"PYTHONUNBUFFERED": "1"}
        # Several controllers are fault targets (clock skew among them); a single one is not.
        if self._extra_env is not None and (not is_controller_id(node_id) or len(self.controllers) > 1):
            env.update(self._extra_env(node_id))
        binds = {path: {"bind": path, "mode": "rw"} for path in dict.fromkeys([self.base_dir, *self._shared_dirs])}
        host_config = api.create_host_config(binds=binds, init=False)
        networking = api.create_networking_config({self.network_name: api.create_endpoint_config(ipv4_address=node.host)})
        created = api.create_container(self.image, command=self.argv(node_id), name=self.container_name(node_id),
                                       environment=env, labels=self.labels("controller" if is_controller_id(node_id) else "broker"),
                                       host_config=host_config, networking_config=networking, hostname=self.container_name(node_id),
                                       working_dir="/opt/logquake/src")
        self._containers[node_id] = created["Id"]

    def _state(self, node_id: int) -> dict[str, Any]:
        import docker.errors

        container = self._containers.get(node_id)
        if container is None:
            return {}
        try:
            return self.client.api.inspect_container(container)["State"]
        except docker.errors.NotFound:
            return {}

    # ---- one node -------------------------------------------------------------------

    def start(self, node_id: int, *, until: str = "ready") -> BrokerProcess:
        """Start the node's container (again) and wait until it is `until`: "ready" or
        "listening", as LocalCluster.start."""
        if until not in ("ready", "listening"):
            raise ValueError(f"until={until!r}: expected 'ready' or 'listening'")
        node = self._node(node_id)
        if self.is_alive(node_id):
            raise RuntimeError(f"node {node_id} is already running (container {self.container_name(node_id)})")
        for stale in (node.ready_file, node.listening_file):
            if os.path.exists(stale):
                os.remove(stale)
        self.client.api.start(self._containers[node_id])
        node.pid = int(self._state(node_id).get("Pid") or 0) or None
        self._paused.discard(node_id)
        is_controller = is_controller_id(node_id)
        signal_file = node.listening_file if until == "listening" and not is_controller else node.ready_file
        self._wait_ready(node, probe_controller if is_controller else probe, signal_file)
        return node

    def _wait_ready(self, node: BrokerProcess, ready_probe: Callable[[str, int], None], signal_file: str) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        last_error = f"no {os.path.basename(signal_file)} file yet"
        while time.monotonic() < deadline:
            state = self._state(node.broker_id)
            if not state.get("Running"):
                raise BrokerStartError(f"{self.container_name(node.broker_id)} exited with status {state.get('ExitCode')}:\n"
                                       f"{self._log_tail(node)}")
            if os.path.exists(signal_file):
                try:
                    ready_probe(node.host, node.port)
                    return
                except (OSError, ProtocolClientError) as error:
                    last_error = str(error)
            time.sleep(0.05)
        self.kill(node.broker_id)
        raise BrokerStartError(f"{self.container_name(node.broker_id)} not ready after {self._startup_timeout_s} s "
                               f"({last_error}):\n{self._log_tail(node)}")

    def _log_tail(self, node: BrokerProcess, lines: int = 30) -> str:
        try:
            text = Path(node.log_path).read_text(errors="replace")
        except OSError:
            text = ""
        try:
            text += self.client.api.logs(self._containers[node.broker_id], tail=lines).decode(errors="replace")
        except Exception:
            pass
        return "\n".join(text.splitlines()[-lines:]) or "(no log)"

    def is_alive(self, node_id: int) -> bool:
        self._node(node_id)
        return bool(self._state(node_id).get("Running"))

    def is_paused(self, node_id: int) -> bool:
        state = self._state(node_id)
        return bool(state.get("Running") and state.get("Paused"))

    def kill(self, node_id: int) -> None:
        """`docker kill`: SIGKILL to the node's process, then wait until the container has stopped."""
        import docker.errors

        self._node(node_id)
        container = self._containers.get(node_id)
        if container is None:
            return
        try:
            if self.is_alive(node_id):
                self.client.api.kill(container, "SIGKILL")
        except docker.errors.APIError:
            pass  # it stopped meanwhile
        self._await(node_id, lambda state: not state.get("Running"), "stop")
        self._paused.discard(node_id)

    def stop(self, node_id: int, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL after `timeout_s`; returns the exit code."""
        self._node(node_id)
        container = self._containers.get(node_id)
        if container is None or not self.is_alive(node_id):
            return None
        if self.is_paused(node_id):
            self.resume(node_id)
        self.client.api.stop(container, timeout=int(timeout_s))
        self._await(node_id, lambda state: not state.get("Running"), "stop")
        return self._state(node_id).get("ExitCode")

    def pause(self, node_id: int) -> None:
        """`docker pause` (the cgroup freezer); returns once the container is paused."""
        self._node(node_id)
        self.client.api.pause(self._containers[node_id])
        self._paused.add(node_id)
        self._await(node_id, lambda state: state.get("Paused") or not state.get("Running"), "pause")

    def resume(self, node_id: int) -> None:
        self._node(node_id)
        if self.is_paused(node_id):
            self.client.api.unpause(self._containers[node_id])
        self._paused.discard(node_id)
        self._await(node_id, lambda state: not state.get("Paused"), "unpause")

    def _await(self, node_id: int, done: Callable[[dict[str, Any]], bool], what: str) -> None:
        deadline = time.monotonic() + STATE_TIMEOUT_S
        while not done(self._state(node_id)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.container_name(node_id)} did not {what} within {STATE_TIMEOUT_S} s")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop the brokers (side by side, cleanly if they can), then the controllers, then
        remove every container, the network and the nft table; a temp base dir goes too."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._containers:
                def stop(node_id: int) -> None:
                    try:
                        self.stop(node_id)
                    except Exception:
                        self.kill(node_id)

                with ThreadPoolExecutor(max_workers=len(self.brokers)) as pool:
                    list(pool.map(stop, [b.broker_id for b in self.brokers]))
                for controller in self.controllers:
                    stop(controller.broker_id)
        finally:
            try:
                if self._client is not None:
                    remove_run(self._client, self.run_id)
            finally:
                if self._reaper is not None:
                    self._reaper.terminate()
                    self._reaper.wait(timeout=10)
                if self._own_base_dir:
                    shutil.rmtree(self.base_dir, ignore_errors=True)


class DockerControl(ClusterControl):
    """ClusterControl over a DockerCluster: a paused node is a frozen container (its
    processes are not in the stopped state SIGSTOP leaves), and partitions are cut on the
    cluster's bridge (bridge_cut: the partition nemesis builds nemeses.net.nft's
    bridge_partitioner from it)."""

    def is_paused(self, broker_id: int) -> bool:
        self._broker(broker_id)
        return self.cluster.is_paused(broker_id)  # type: ignore[attr-defined]

    NOT_RUNNING = "the Docker cluster is not running: no network to partition"

    def bridge_cut(self) -> BridgeCut:
        cut = self.cluster.bridge_cut  # type: ignore[attr-defined]
        if cut is None:
            raise RuntimeError(self.NOT_RUNNING)
        return cut


def main(argv: list[str] | None = None) -> int:
    """`python -m cluster.docker_backend reap RUN_ID OWNER_PID` (the reaper) or `sweep`."""
    return reaper_cli(sys.argv[1:] if argv is None else argv, "cluster.docker_backend", "RUN_ID", remove_run, sweep_stale)


if __name__ == "__main__":
    sys.exit(main())
