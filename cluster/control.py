"""The control API: the only door the nemeses use into the bundled cluster.

`ClusterControl` wraps a running `LocalCluster` (or anything with the same per-broker
interface: `brokers[i].pid/host/port/data_dir/log_path` and `kill/start/stop/pause/resume/
is_alive(i)`) and adds what fault injection needs on top: the leader of each topic-partition
read over the Kafka protocol, per-broker wall-clock offsets, and cleanup of what libfaketime
leaves behind.

Clock skew works through `BrokerClocks`: each broker runs with the PyPI libfaketime build
preloaded and reads its offset from its own timestamp file, so the cluster must be started
with `extra_env=clocks.extra_env`:

    clocks = BrokerClocks(run_dir / "clocks")
    with LocalCluster(3, extra_env=clocks.extra_env) as cluster:
        control = ClusterControl(cluster, clocks)
        control.set_clock_offset(1, +30.0)      # broker 1's time.time() is 30 s ahead
        ...
    control.close()                             # removes libfaketime's shm files

Monotonic time is never faked (DONT_FAKE_MONOTONIC=1): the broker's timers keep running on
real time and only its wall-clock logic sees the skew, like Jepsen's settimeofday nemesis.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import threading
import uuid
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from dataclasses import dataclass
from pathlib import Path

import kio.index
from typing import Protocol

from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.protocol.versions import ApiKey
from cluster.runtime import disk_faults
from cluster.proxy_routing import ProxyRouting

SHM_DIR = "/dev/shm"
METADATA_VERSION = 12
SIGNAL_SETTLE_TIMEOUT_S = 5.0
# A broker blocked in slow fsyncs (one per changed high watermark) reads the command late.
DISK_COMMAND_TIMEOUT_S = 30.0


class ControlError(RuntimeError):
    """The control API cannot do what was asked; the message says why."""


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int


class BrokerHandle(Protocol):
    broker_id: int
    host: str
    port: int
    data_dir: str
    log_path: str
    pid: int | None


class ManagedCluster(Protocol):
    """What ClusterControl needs of a cluster launcher (cluster.launcher.LocalCluster has it)."""

    brokers: list  # list[BrokerHandle]

    def kill(self, broker_id: int) -> None: ...
    def start(self, broker_id: int, *, until: str = "ready") -> object: ...
    def stop(self, broker_id: int) -> object: ...
    def pause(self, broker_id: int) -> None: ...
    def resume(self, broker_id: int) -> None: ...
    def is_alive(self, broker_id: int) -> bool: ...


# -- clocks ---------------------------------------------------------------------------

def faketime_library_path() -> str:
    """The libfaketime.so.1 shipped inside the PyPI `libfaketime` wheel.

    Debian's build is unusable with Python (time.sleep fails with EINVAL once monotonic is
    left unfaked), so only the wheel's build is accepted."""
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or spec.origin is None:
        raise ControlError("clock skew needs the PyPI package libfaketime==3.0.1 (pip install libfaketime==3.0.1)")
    path = os.path.join(os.path.dirname(spec.origin), "vendor", "libfaketime", "src", "libfaketime.so.1")
    if not os.path.exists(path):
        raise ControlError(f"the libfaketime package has no bundled library at {path} (only x86-64 Linux wheels ship one)")
    return path


def format_clock_offset(offset_s: float) -> str:
    """libfaketime's relative timestamp syntax: '+N' or '-N' seconds, fractions allowed."""
    if not isinstance(offset_s, (int, float)) or isinstance(offset_s, bool) or not math.isfinite(offset_s):
        raise ValueError(f"clock offset {offset_s!r} must be a finite number of seconds")
    text = f"{offset_s:+.6f}".rstrip("0").rstrip(".")
    return "+0" if text in ("+", "-", "+0", "-0") else text


def faketime_shm_paths(pid: int, shm_dir: str = SHM_DIR) -> list[str]:
    """The two POSIX shm entries every process preloaded with libfaketime leaves behind."""
    return [os.path.join(shm_dir, f"faketime_shm_{pid}"), os.path.join(shm_dir, f"sem.faketime_sem_{pid}")]


def remove_faketime_shm(pids: Iterable[int], shm_dir: str = SHM_DIR) -> list[str]:
    """Delete the libfaketime shm entries of the given (exited) pids; returns what was removed."""
    removed = []
    for pid in pids:
        for path in faketime_shm_paths(pid, shm_dir):
            try:
                os.remove(path)
                removed.append(path)
            except FileNotFoundError:
                pass
    return removed


class BrokerClocks:
    """One libfaketime timestamp file per broker, holding that broker's wall-clock offset.

    Every write is tmp file + os.replace: libfaketime exits the process (status 1) if it
    ever reads a half-written, unparsable file."""

    def __init__(self, clock_dir: str | os.PathLike[str], *, library_path: str | None = None) -> None:
        # Absolute: the brokers' libfaketime reads it from their own working directory.
        self.clock_dir = Path(clock_dir).resolve()
        self.clock_dir.mkdir(parents=True, exist_ok=True)
        self.library_path = library_path or faketime_library_path()
        self._offsets_s: dict[int, float] = {}
        self._lock = threading.Lock()

    def path(self, broker_id: int) -> Path:
        return self.clock_dir / f"broker-{broker_id}.faketime"

    def extra_env(self, broker_id: int) -> dict[str, str]:
        """Environment for broker `broker_id` (LocalCluster's `extra_env` hook)."""
        if not self.path(broker_id).exists():
            self.set_offset(broker_id, 0.0)
        return {
            "LD_PRELOAD": self.library_path,
            "DONT_FAKE_MONOTONIC": "1",  # mandatory: with monotonic faked, thread waits hang
            "FAKETIME_TIMESTAMP_FILE": str(self.path(broker_id)),
            # Re-read the file on every call, so a bump takes effect on the next clock read
            # (4.5 µs per time.time(); the broker reads the wall clock a few times per request).
            "FAKETIME_NO_CACHE": "1",
            # File timestamps stay real: the storage layer's files are not a wall-clock claim.
            "NO_FAKE_STAT": "1",
        }

    def set_offset(self, broker_id: int, offset_s: float) -> str:
        text = format_clock_offset(offset_s)
        path = self.path(broker_id)
        tmp = path.with_name(path.name + ".tmp")
        with self._lock:
            tmp.write_text(text + "\n")
            os.replace(tmp, path)
            self._offsets_s[broker_id] = float(text)
        return text

    def offset(self, broker_id: int) -> float:
        with self._lock:
            return self._offsets_s.get(broker_id, 0.0)

    def offsets(self) -> dict[int, float]:
        with self._lock:
            return dict(self._offsets_s)


@dataclass(frozen=True)
class PartitionStatus:
    tp: TopicPartition
    leader: int  # -1: no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


# -- control --------------------------------------------------------------------------

class ClusterControl:
    def __init__(self, cluster: ManagedCluster, clocks: BrokerClocks | None = None) -> None:
        self.cluster = cluster
        self.clocks = clocks
        self._pids_seen: set[int] = set()
        self._lock = threading.RLock()
        self._spawn_thread: ThreadPoolExecutor | None = None
        for broker_id in self.broker_ids:
            self._note_pid(broker_id)

    # addresses and paths
    @property
    def broker_ids(self) -> list[int]:
        return [broker.broker_id for broker in self.cluster.brokers]

    @property
    def controller_ids(self) -> list[int]:
        """The controllers' node ids (1000, ...): targets like brokers for kill, pause, clock
        and partition when the nemeses' node_kinds include 'controller'."""
        return [controller.broker_id for controller in getattr(self.cluster, "controllers", [])]

    def nemesis_nodes(self, kinds: Iterable[str] = ("broker",)) -> list[int]:
        """The node ids faults may pick among: brokers, controllers, or both."""
        kinds = set(kinds)
        return [*(self.broker_ids if "broker" in kinds else []), *(self.controller_ids if "controller" in kinds else [])]

    def active_controller(self) -> int | None:
        """The active controller's node id (None: none known now)."""
        find = getattr(self.cluster, "active_controller", None)
        return find() if find is not None else None

    def _broker(self, broker_id: int) -> BrokerHandle:
        for broker in [*self.cluster.brokers, *getattr(self.cluster, "controllers", [])]:
            if broker.broker_id == broker_id:
                return broker
        raise ControlError(f"no broker {broker_id!r}; brokers are {self.broker_ids}"
                           + (f", controllers {self.controller_ids}" if self.controller_ids else ""))

    def host(self, broker_id: int) -> str:
        return self._broker(broker_id).host

    def port(self, broker_id: int) -> int:
        return self._broker(broker_id).port

    def address(self, broker_id: int) -> str:
        broker = self._broker(broker_id)
        return f"{broker.host}:{broker.port}"

    def hosts(self) -> dict[int, str]:
        return {broker_id: self.host(broker_id) for broker_id in self.broker_ids}

    def node_hosts(self) -> dict[int, str]:
        """Every node's address: the brokers' and the controllers'."""
        return {node_id: self.host(node_id) for node_id in [*self.broker_ids, *self.controller_ids]}

    def controller_hosts(self) -> list[str]:
        """Every controller's address (one for the single controller; none for a test double)."""
        controllers = getattr(self.cluster, "controllers", None)
        if controllers:
            return [str(c.host) for c in controllers]
        host = self.controller_host()
        return [] if host is None else [host]

    def controller_host(self) -> str | None:
        """Address of the cluster's controller process (None when the cluster has none,
        e.g. a test double)."""
        controller = getattr(self.cluster, "controller", None)
        return None if controller is None else str(controller.host)

    def proxy_routing(self) -> ProxyRouting | None:
        """The proxies the cluster's links run through (cluster.proxy_routing), or None when
        its links are direct: the door of the latency, bandwidth and flaky nemeses."""
        return getattr(self.cluster, "proxies", None)

    def data_dir(self, broker_id: int) -> str:
        return self._broker(broker_id).data_dir

    def log_path(self, broker_id: int) -> str:
        return self._broker(broker_id).log_path

    def pid(self, broker_id: int) -> int | None:
        pid = self._broker(broker_id).pid
        if pid is not None:
            with self._lock:
                self._pids_seen.add(pid)
        return pid

    def _note_pid(self, broker_id: int) -> None:
        self.pid(broker_id)

    # processes
    def is_alive(self, broker_id: int) -> bool:
        self._broker(broker_id)
        return self.cluster.is_alive(broker_id)

    def kill(self, broker_id: int) -> int | None:
        """SIGKILL the broker and wait until it is gone; returns the pid it had."""
        pid = self.pid(broker_id)
        self.cluster.kill(broker_id)
        if pid is not None:
            remove_faketime_shm([pid])
        return pid

    def start(self, broker_id: int) -> int | None:
        """Start a stopped or killed broker and wait until it answers; returns its new pid.

        It answers once it listens, before it is registered with the controller: a restart
        while a partition cuts the broker off from the controller must not wait for the
        partition to heal (the nemesis that would heal it waits on this very call).

        The process is forked from this control's own long-lived thread: the launcher gives
        brokers PR_SET_PDEATHSIG, which fires when the *thread* that forked them exits, so a
        broker restarted from a short-lived worker thread would be SIGKILLed with it."""
        self._broker(broker_id)
        self._spawner().submit(lambda: self.cluster.start(broker_id, until="listening")).result()
        return self.pid(broker_id)

    def _spawner(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._spawn_thread is None:
                self._spawn_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="broker-spawner")
            return self._spawn_thread

    def pause(self, broker_id: int) -> None:
        """SIGSTOP, and wait until the kernel has actually stopped the process (signal
        delivery is asynchronous), so a recorded pause is a real one."""
        self._broker(broker_id)
        self.cluster.pause(broker_id)
        self._await_state(broker_id, stopped=True)

    def resume(self, broker_id: int) -> None:
        self._broker(broker_id)
        self.cluster.resume(broker_id)
        self._await_state(broker_id, stopped=False)

    def is_paused(self, broker_id: int) -> bool:
        pid = self.pid(broker_id)
        return pid is not None and self.is_alive(broker_id) and _process_state(pid) in ("T", "t")

    def _await_state(self, broker_id: int, *, stopped: bool) -> None:
        deadline = time.monotonic() + SIGNAL_SETTLE_TIMEOUT_S
        while self.is_alive(broker_id) and self.is_paused(broker_id) != stopped:
            if time.monotonic() > deadline:
                raise ControlError(f"broker {broker_id} did not {'stop' if stopped else 'continue'} "
                                   f"within {SIGNAL_SETTLE_TIMEOUT_S} s of the signal")
            time.sleep(0.001)

    # disks (cluster/runtime/disk_faults.py: a command file beside the data dir + SIGUSR1)
    def set_disk_faults(self, broker_id: int, *, fsync_errno: str | int | None = None, write_errno: str | int | None = None,
                        fsync_delay_ms: int = 0) -> dict:
        """Make the running broker's disk fail fsyncs (EIO), refuse space (ENOSPC) or stall
        each fsync; returns the broker's answer (faults in force, counts) once they are."""
        return self._disk_command(broker_id, {"action": "set", "fsync_errno": fsync_errno, "write_errno": write_errno,
                                              "fsync_delay_ms": fsync_delay_ms})

    def clear_disk_faults(self, broker_id: int) -> dict | None:
        """Heal the broker's disk; returns its answer with the fault counts, None when the
        broker is not running (a new process starts on a healthy disk)."""
        if not self.is_alive(broker_id):
            return None
        return self._disk_command(broker_id, {"action": "clear"})

    def crash_torn(self, broker_id: int, *, seed: int, corrupt: bool = True) -> dict:
        """Power loss of the broker's machine: it tears (and with `corrupt` corrupts) its
        unflushed tails, answers with what it did, and SIGKILLs itself; returns the answer
        once the process is gone. Restart it with start()."""
        pid = self.pid(broker_id)
        answer = self._disk_command(broker_id, {"action": "crash", "seed": seed, "corrupt": corrupt}, expect_exit=True)
        self.cluster.kill(broker_id)  # reaps the process (already dead)
        if pid is not None:
            remove_faketime_shm([pid])
        return answer

    def disk_halt(self, broker_id: int) -> dict | None:
        """Why the broker halted on a failed log directory ({"reason", "counts"}), or None if
        it has not (while it runs, or after a restart, which starts on a healthy disk)."""
        path = disk_faults.halted_path(self.data_dir(broker_id))
        if self.is_alive(broker_id) or not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError) as error:
            return {"reason": f"unreadable {path}: {error}"}

    def _disk_command(self, broker_id: int, command: dict, *, expect_exit: bool = False) -> dict:
        data_dir = self.data_dir(broker_id)
        pid = self.pid(broker_id)
        if pid is None or not self.is_alive(broker_id):
            raise ControlError(f"broker {broker_id} is not running: no disk to fault")
        command = {"id": uuid.uuid4().hex, **command}
        done = disk_faults.done_path(data_dir)
        disk_faults.write_json_atomically(disk_faults.command_path(data_dir), command)
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + DISK_COMMAND_TIMEOUT_S
        while True:
            answer = _read_json(done)
            if answer is not None and answer.get("id") == command["id"]:
                if "error" in answer:
                    raise ControlError(f"broker {broker_id} refused the disk-fault command {command}: {answer['error']}")
                if expect_exit:
                    while self.is_alive(broker_id) and time.monotonic() < deadline:
                        time.sleep(0.005)
                return answer
            if not self.is_alive(broker_id):
                raise ControlError(f"broker {broker_id} exited before answering the disk-fault command {command}")
            if time.monotonic() > deadline:
                state = "it is paused (SIGSTOP)" if self.is_paused(broker_id) else "no answer"
                raise ControlError(f"broker {broker_id} did not answer the disk-fault command {command} "
                                   f"within {DISK_COMMAND_TIMEOUT_S} s: {state}")
            time.sleep(0.005)

    # clocks
    def _require_clocks(self) -> BrokerClocks:
        if self.clocks is None:
            raise ControlError("broker clocks are not under control: start the cluster with "
                               "extra_env=BrokerClocks(dir).extra_env and pass the clocks to ClusterControl")
        return self.clocks

    def set_clock_offset(self, broker_id: int, offset_s: float) -> str:
        """Set broker `broker_id`'s wall clock to real time + offset_s (0 resets it).
        Returns the offset as written to its timestamp file."""
        self._broker(broker_id)
        return self._require_clocks().set_offset(broker_id, offset_s)

    def clock_offset(self, broker_id: int) -> float:
        self._broker(broker_id)
        return self._require_clocks().offset(broker_id)

    @property
    def controls_clocks(self) -> bool:
        return self.clocks is not None

    # metadata
    def leaders(self, topics: Iterable[str] | None = None, *, timeout_s: float = 2.0,
                via: Iterable[int] | None = None) -> dict[TopicPartition, int]:
        """Leader broker id of every partition of `topics` (all topics when None), from a
        Metadata request to the first live broker (of `via`, when given) that answers.
        Partitions without a leader are left out."""
        states = self.partition_states(topics, timeout_s=timeout_s, via=via)
        return {tp: state.leader for tp, state in states.items() if state.leader >= 0}

    def partition_states(self, topics: Iterable[str] | None = None, *, timeout_s: float = 2.0,
                         via: Iterable[int] | None = None) -> dict[TopicPartition, PartitionStatus]:
        """Leader (-1: none), replicas and ISR of every partition of `topics` (all topics when
        None), from a Metadata request to the first live broker that answers. `via` limits
        the brokers asked: a broker cut off from the controller keeps serving its last
        (stale) view, so a caller that wants the majority's view names the majority."""
        wanted = None
        if topics is not None:
            topic_schema = _metadata_request_topic_schema()
            # topic_id all zeros: look the topic up by name.
            wanted = tuple(topic_schema(topic_id=uuid.UUID(int=0), name=topic) for topic in topics)
        errors = []
        for broker_id in (self.broker_ids if via is None else tuple(via)):
            if not self.is_alive(broker_id):
                continue
            try:
                with WireClient(self.host(broker_id), self.port(broker_id), timeout_s=timeout_s,
                                client_id="logquake-control") as client:
                    metadata = client.request(ApiKey.METADATA, METADATA_VERSION, topics=wanted,
                                              allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False)
            except (OSError, ProtocolClientError) as error:
                errors.append(f"broker {broker_id}: {error}")
                continue
            result = {}
            for topic in metadata.topics:
                if topic.error_code.value != 0 or topic.name is None:
                    continue
                for partition in topic.partitions:
                    # LEADER_NOT_AVAILABLE still describes the partition (no leader).
                    if partition.error_code.value in (0, 5):
                        tp = TopicPartition(topic.name, int(partition.partition_index))
                        result[tp] = PartitionStatus(tp, int(partition.leader_id), tuple(int(b) for b in partition.replica_nodes),
                                                     tuple(int(b) for b in partition.isr_nodes))
            return result
        raise ControlError("no broker answered a Metadata request: " + ("; ".join(errors) or "none is alive"))

    # cleanup
    @property
    def pids_seen(self) -> set[int]:
        with self._lock:
            return set(self._pids_seen)

    def close(self) -> list[str]:
        """Call after the cluster is stopped: ends the spawner thread and removes
        libfaketime's shm entries of every broker pid seen that has exited; returns the
        paths removed."""
        with self._lock:
            spawner, self._spawn_thread = self._spawn_thread, None
        if spawner is not None:
            spawner.shutdown(wait=True)
        for broker_id in self.broker_ids:
            self._note_pid(broker_id)
        dead = [pid for pid in self.pids_seen if not pid_running(pid)]
        return remove_faketime_shm(dead)


@cache
def _metadata_request_topic_schema() -> type:
    request = kio.index.load_request_schema(ApiKey.METADATA, METADATA_VERSION)
    return request.__dataclass_fields__["topics"].type.__args__[0].__args__[0]


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _process_state(pid: int) -> str | None:
    """The one-letter state of /proc/<pid>/stat (R, S, T, Z, ...), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_running(pid: int) -> bool:
    """Whether process `pid` runs (exists and is not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    state = _process_state(pid)
    return state is not None and state != "Z"
