"""LocalCluster: a controller process on 127.0.0.9 and one process per broker, broker i bound
to its own address 127.0.0.(10+i), with readiness probes over the Kafka protocol and
guaranteed teardown.

    with LocalCluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        Producer({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.kill(0); cluster.start(0)

The controller is node CONTROLLER_NODE_ID; every per-node method (start, kill, stop, pause,
resume, is_alive) accepts it as well as a broker id. It starts first, and each node keeps
the port it got on its first start, so restarted nodes are found where they were.

With `controllers=3` (or 5) the controllers are a metadata quorum (cluster/quorum/): node ids
1000, 1001, ... on 127.0.0.9, 127.0.0.8, ..., each with a port chosen before any starts,
since every voter and broker is told `controller.quorum.voters` up front.

Hooks for fault injection: `wrap_argv(node_id, argv)` wraps a node's command (e.g. to
run it inside a network namespace) and `extra_env(node_id)` adds environment variables
(e.g. LD_PRELOAD of libfaketime); both are applied to brokers only (a single controller's
clock and placement are not under test), and `extra_env` to the controllers too when there are
several (clock faults reach the quorum). Processes get PR_SET_PDEATHSIG=SIGKILL (unless
`die_with_parent=False`, for the detached CLI), so they die even if the test process is
killed outright.

The kernel fires PR_SET_PDEATHSIG when the *thread* that forked the child exits, not when
the process does. So every broker is forked from one spawner thread per process that lives
as long as the process: a broker (re)started from a short-lived worker thread (a nemesis, a
test's helper thread) outlives that thread, and still dies with the process.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.proxy_routing import ProxyRouting
from cluster.protocol.versions import ApiKey

FIRST_HOST_OCTET = 10
MAX_BROKERS = 7
CONTROLLER_NODE_ID = 1000
CONTROLLER_HOST = "127.0.0.9"
CONTROLLER_COUNTS = (1, 3, 5)
_PR_SET_PDEATHSIG = 1


class BrokerStartError(RuntimeError):
    """A broker process exited or did not become ready in time; the message holds its log tail."""


def broker_host(broker_id: int) -> str:
    return f"127.0.0.{FIRST_HOST_OCTET + broker_id}"


def controller_host(node_id: int) -> str:
    """Controller `node_id` (1000, 1001, ...) at 127.0.0.9, 127.0.0.8, ..."""
    return f"127.0.0.{9 - (node_id - CONTROLLER_NODE_ID)}"


def is_controller_id(node_id: int) -> bool:
    return node_id >= CONTROLLER_NODE_ID


def free_port(host: str) -> int:
    """A port free on `host` now (a voter's port must be known before it starts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe_socket:
        probe_socket.bind((host, 0))
        return int(probe_socket.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_spawner_lock = threading.Lock()
_spawner: ThreadPoolExecutor | None = None


def _forget_spawner_after_fork() -> None:
    # A forked child inherits the executor object but not its thread.
    global _spawner, _spawner_lock
    _spawner = None
    _spawner_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_spawner_after_fork)


def _spawn_from_process_lifetime_thread(argv: list[str], **popen_kwargs: object) -> subprocess.Popen[bytes]:
    """Popen from the process-wide spawner thread, which is never shut down, so the
    parent-death signal of the child fires only when this whole process ends."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logquake-broker-spawner")
        spawner = _spawner
    return spawner.submit(subprocess.Popen, argv, **popen_kwargs).result()


@dataclass
class BrokerProcess:
    broker_id: int
    host: str
    port: int
    data_dir: str
    log_path: str
    pid: int | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ready_file(self) -> str:
        return f"{self.data_dir}.ready"

    @property
    def listening_file(self) -> str:
        return f"{self.data_dir}.listening"


def _describe(node: BrokerProcess) -> str:
    if node.broker_id == CONTROLLER_NODE_ID:
        return "the controller"
    return f"controller {node.broker_id}" if is_controller_id(node.broker_id) else f"broker {node.broker_id}"


def _log_tail(path: str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def probe_controller(host: str, port: int, timeout_s: float = 2.0) -> None:
    """Raise unless the controller answers ApiVersions."""
    with WireClient(host, port, timeout_s=timeout_s) as client:
        versions = client.request(ApiKey.API_VERSIONS, 3, client_software_name="logquake-probe", client_software_version="0")
        if versions.error_code.value != 0:
            raise ProtocolClientError(f"ApiVersions answered error {versions.error_code}")


def quorum_leader(host: str, port: int, timeout_s: float = 2.0) -> int | None:
    """The metadata quorum's leader as the controller at host:port answers DescribeQuorum
    (None: it knows none now). Raises OSError or ProtocolClientError when it does not answer."""
    from cluster.quorum.rpc import DESCRIBE_QUORUM_VERSION, describe_quorum_request

    with WireClient(host, port, timeout_s=timeout_s) as client:
        answer = client.request(ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, topics=describe_quorum_request().topics)
    leader = answer.topics[0].partitions[0].leader_id if answer.topics and answer.topics[0].partitions else -1
    return int(leader) if leader >= 0 else None



def active_controller_of(controllers: Iterable[BrokerProcess], answers: Callable[[int], bool]) -> int | None:
    """The active controller's node id, as DescribeQuorum answers it by the first controller
    that `answers` (alive and not paused) and replies (None: no leader known, or none
    replies). One controller is the quorum alone: its id while it answers."""
    controllers = list(controllers)
    if len(controllers) == 1:
        return CONTROLLER_NODE_ID if answers(CONTROLLER_NODE_ID) else None
    for controller in controllers:
        if not answers(controller.broker_id):
            continue
        try:
            return quorum_leader(controller.host, controller.port)
        except (OSError, ProtocolClientError):
            continue
    return None

def probe(host: str, port: int, timeout_s: float = 2.0) -> None:
    """Raise unless the broker answers ApiVersions and Metadata."""
    with WireClient(host, port, timeout_s=timeout_s) as client:
        versions = client.request(ApiKey.API_VERSIONS, 3, client_software_name="logquake-probe", client_software_version="0")
        if versions.error_code.value != 0:
            raise ProtocolClientError(f"ApiVersions answered error {versions.error_code}")
        client.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


class LocalCluster:
    def __init__(
        self,
        brokers: int = 1,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        config: Mapping[str, str] | None = None,
        port: int = 0,
        wrap_argv: Callable[[int, list[str]], list[str]] | None = None,
        extra_env: Callable[[int], dict[str, str]] | None = None,
        startup_timeout_s: float = 30.0,
        die_with_parent: bool = True,
        seed: int | None = None,
        ready_probe: Callable[[str, int], None] = probe,
        proxies: ProxyRouting | None = None,
        controllers: int = 1,
    ) -> None:
        if controllers not in CONTROLLER_COUNTS:
            raise ValueError(f"controllers={controllers}: the bundled cluster runs {', '.join(map(str, CONTROLLER_COUNTS))} controllers")
        if controllers > 1 and proxies is not None:
            raise ValueError("links through proxies (latency, bandwidth, flaky) are routed for a single controller only")
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, got {brokers}")
        if brokers > MAX_BROKERS:
            raise ValueError(f"{brokers} brokers requested; the bundled cluster runs at most {MAX_BROKERS} (addresses 127.0.0.10-{FIRST_HOST_OCTET + MAX_BROKERS - 1})")
        self._own_base_dir = base_dir is None
        self.base_dir = os.path.abspath(base_dir) if base_dir is not None else tempfile.mkdtemp(prefix="logquake-cluster-")
        os.makedirs(self.base_dir, exist_ok=True)
        # __consumer_offsets and __transaction_state cannot have more replicas than there are
        # brokers, nor a min ISR larger than that.
        self.config = {"offsets.topic.replication.factor": str(min(3, brokers)),
                       "transaction.state.log.replication.factor": str(min(3, brokers)),
                       "transaction.state.log.min.isr": str(min(2, brokers)), **dict(config or {})}
        self._wrap_argv = wrap_argv
        self._extra_env = extra_env
        self._startup_timeout_s = startup_timeout_s
        self._die_with_parent = die_with_parent
        self._seed = seed
        # Replaceable for brokers the test process cannot reach directly (e.g. in a netns).
        self._ready_probe = ready_probe
        self.brokers = [
            BrokerProcess(i, broker_host(i), port, os.path.join(self.base_dir, f"broker-{i}"), os.path.join(self.base_dir, f"broker-{i}.log"))
            for i in range(brokers)
        ]
        if controllers == 1:
            self.controllers = [BrokerProcess(CONTROLLER_NODE_ID, CONTROLLER_HOST, port, os.path.join(self.base_dir, "controller"),
                                              os.path.join(self.base_dir, "controller.log"))]
        else:
            ids = [CONTROLLER_NODE_ID + i for i in range(controllers)]
            self.controllers = [BrokerProcess(i, controller_host(i), port or free_port(controller_host(i)),
                                              os.path.join(self.base_dir, f"controller-{i}"), os.path.join(self.base_dir, f"controller-{i}.log"))
                                for i in ids]
        self.controller = self.controllers[0]
        self._paused: set[int] = set()
        # Every link through a proxy of its own (cluster.proxy_routing); None: direct links.
        self.proxies = proxies

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

    def active_controller(self) -> int | None:
        """The node id of the active controller, as DescribeQuorum answers it by the first
        live controller that answers (None: no leader known, or none answers)."""
        return active_controller_of(self.controllers, lambda node: self.is_alive(node) and node not in self._paused)

    @property
    def controller_voters(self) -> str:
        return ",".join(f"{c.broker_id}@{c.host}:{c.port}" for c in self.controllers)

    # ---- context manager ------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            if self.proxies is not None:
                self.proxies.start()
            for controller in self.controllers:
                self.start(controller.broker_id)
            if self.proxies is not None:
                self.proxies.plan({b.broker_id: b.host for b in self.brokers},
                                  (CONTROLLER_NODE_ID, self.controller.host, self.controller.port))
            # Brokers register with the controller and catch up before they write their ready
            # files, so they can start side by side.
            with ThreadPoolExecutor(max_workers=len(self.brokers)) as pool:
                for future in [pool.submit(self.start, b.broker_id) for b in self.brokers]:
                    future.result()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def bootstrap_servers(self) -> str:
        if self.proxies is not None and self.proxies.links:
            return ",".join(self.proxies.client_address(b.broker_id) for b in self.brokers)
        return ",".join(b.address for b in self.brokers)

    # ---- one broker ------------------------------------------------------------------

    def argv(self, broker_id: int) -> list[str]:
        if is_controller_id(broker_id):
            return self._controller_argv(broker_id)
        broker = self.brokers[broker_id]
        argv = [
            sys.executable, "-m", "cluster.runtime.broker_main",
            "--broker-id", str(broker_id), "--host", broker.host, "--port", str(broker.port),
            "--data-dir", broker.data_dir, "--log-file", broker.log_path, "--ready-file", broker.ready_file,
            "--listening-file", broker.listening_file,
        ]
        if self._seed is not None:
            argv += ["--seed", str(self._seed + broker_id)]
        routed = self.proxies.broker_properties(broker_id) if self.proxies is not None else {}
        for key, value in sorted({**self.config, "controller.quorum.voters": self.controller_voters, **routed}.items()):
            argv += ["--config", f"{key}={value}"]
        return self._wrap_argv(broker_id, argv) if self._wrap_argv else argv

    def _controller_argv(self, node_id: int = CONTROLLER_NODE_ID) -> list[str]:
        node = self._node(node_id)
        argv = [
            sys.executable, "-m", "cluster.controller.main",
            "--node-id", str(node_id), "--host", node.host, "--port", str(node.port),
            "--data-dir", node.data_dir, "--log-file", node.log_path, "--ready-file", node.ready_file,
        ]
        if self._seed is not None:
            argv += ["--seed", str(self._seed + node_id)]
        config = dict(self.config)
        if len(self.controllers) > 1:
            config["controller.quorum.voters"] = self.controller_voters
        for key, value in sorted(config.items()):
            argv += ["--config", f"{key}={value}"]
        return argv

    def start(self, broker_id: int, *, until: str = "ready") -> BrokerProcess:
        """Start a broker (or the controller) and wait until it is `until`: "ready" (registered
        and unfenced by the controller) or "listening" (accepting connections, registered or
        not: what a fault injector restarting a broker inside a partition can wait for)."""
        if until not in ("ready", "listening"):
            raise ValueError(f"until={until!r}: expected 'ready' or 'listening'")
        broker = self._node(broker_id)
        is_controller = is_controller_id(broker_id)
        if self.is_alive(broker_id):
            raise RuntimeError(f"broker {broker_id} is already running (pid {broker.pid})")
        for stale in (broker.ready_file, broker.listening_file):
            if os.path.exists(stale):
                os.remove(stale)
        env = dict(os.environ)
        project_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = project_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # Several controllers are fault targets (clock skew among them); a single one is not.
        if self._extra_env and (not is_controller or len(self.controllers) > 1):
            env.update(self._extra_env(broker_id))
        with open(broker.log_path, "ab") as log_file:
            popen_kwargs: dict[str, object] = dict(stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=project_root)
            if self._die_with_parent:
                broker.popen = _spawn_from_process_lifetime_thread(self.argv(broker_id), preexec_fn=_die_with_parent, **popen_kwargs)
            else:
                broker.popen = subprocess.Popen(self.argv(broker_id), start_new_session=True, **popen_kwargs)  # type: ignore[call-overload]
        broker.pid = broker.popen.pid
        self._paused.discard(broker_id)
        signal_file = broker.listening_file if until == "listening" and not is_controller else broker.ready_file
        self._wait_ready(broker, probe_controller if is_controller else self._ready_probe, signal_file)
        return broker

    def _wait_ready(self, broker: BrokerProcess, ready_probe: Callable[[str, int], None], signal_file: str) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        last_error = f"no {os.path.basename(signal_file)} file yet"
        # Proxies towards a broker point at it as soon as it listens (its port may be new).
        route = self.proxies is not None and not is_controller_id(broker.broker_id)
        while time.monotonic() < deadline:
            if broker.popen is not None and broker.popen.poll() is not None:
                raise BrokerStartError(f"{_describe(broker)} exited with status {broker.popen.returncode}:\n{_log_tail(broker.log_path)}")
            if route and os.path.exists(broker.listening_file):
                try:
                    with open(broker.listening_file) as f:
                        listening_port = int(json.load(f)["port"])
                except (OSError, ValueError, KeyError):
                    pass  # written by os.replace, so only a vanished file: look again
                else:
                    self.proxies.set_node_address(broker.broker_id, broker.host, listening_port)  # type: ignore[union-attr]
                    route = False
            if os.path.exists(signal_file):
                with open(signal_file) as f:
                    broker.port = int(json.load(f)["port"])
                try:
                    ready_probe(broker.host, broker.port)
                    return
                except (OSError, ProtocolClientError) as error:
                    last_error = str(error)
            time.sleep(0.05)
        self._signal(broker.broker_id, signal.SIGKILL)
        raise BrokerStartError(f"{_describe(broker)} not ready after {self._startup_timeout_s} s ({last_error}):\n{_log_tail(broker.log_path)}")

    def is_alive(self, broker_id: int) -> bool:
        broker = self._node(broker_id)
        if broker.popen is not None:
            return broker.popen.poll() is None
        return False

    def _signal(self, broker_id: int, signum: int) -> None:
        broker = self._node(broker_id)
        if broker.popen is not None and broker.popen.poll() is None:
            broker.popen.send_signal(signum)

    def kill(self, broker_id: int) -> None:
        """SIGKILL: a crash. Waits until the process is gone."""
        self._signal(broker_id, signal.SIGKILL)
        self._reap(broker_id, timeout_s=10.0)
        self._paused.discard(broker_id)

    def stop(self, broker_id: int, timeout_s: float = 15.0) -> int | None:
        """SIGTERM: a clean shutdown (flush, close); SIGKILL if it takes over `timeout_s`."""
        if broker_id in self._paused:
            self.resume(broker_id)
        self._signal(broker_id, signal.SIGTERM)
        code = self._reap(broker_id, timeout_s=timeout_s)
        if self.is_alive(broker_id):
            self.kill(broker_id)
        return code

    def pause(self, broker_id: int) -> None:
        """SIGSTOP, returning once the process is actually stopped."""
        self._signal(broker_id, signal.SIGSTOP)
        self._paused.add(broker_id)
        self._wait_for_state(broker_id, stopped=True)

    def resume(self, broker_id: int) -> None:
        """SIGCONT, returning once the process runs again."""
        self._signal(broker_id, signal.SIGCONT)
        self._paused.discard(broker_id)
        self._wait_for_state(broker_id, stopped=False)

    def _wait_for_state(self, broker_id: int, stopped: bool, timeout_s: float = 5.0) -> None:
        pid = self._node(broker_id).pid
        deadline = time.monotonic() + timeout_s
        while self.is_alive(broker_id) and time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(") ", 1)[1].split()[0]
            except OSError:
                return
            if (state in ("T", "t")) == stopped:
                return
            time.sleep(0.005)

    def _reap(self, broker_id: int, timeout_s: float) -> int | None:
        popen = self._node(broker_id).popen
        if popen is None:
            return None
        try:
            return popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Stop every broker, then the controller (clean if possible, killed otherwise), and
        remove a temp base dir. Brokers stop side by side: a controlled shutdown waits for the
        controller to move leadership away."""
        try:
            def stop(node_id: int) -> None:
                try:
                    self.stop(node_id)
                except BaseException:
                    self._signal(node_id, signal.SIGKILL)
                    raise

            with ThreadPoolExecutor(max_workers=len(self.brokers)) as pool:
                futures = [pool.submit(stop, b.broker_id) for b in self.brokers]
            try:
                for future in futures:
                    future.result()
            finally:
                for controller in self.controllers:
                    stop(controller.broker_id)
        finally:
            try:
                if self.proxies is not None:
                    self.proxies.close()
            finally:
                if self._own_base_dir:
                    shutil.rmtree(self.base_dir, ignore_errors=True)

    def detach(self) -> None:
        """Forget the processes without stopping them (the CLI's detached start)."""
        for broker in [*self.brokers, *self.controllers]:
            broker.popen = None
