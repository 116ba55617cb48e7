"""The nemeses' door into a simulated cluster: `SimControl` gives a `SimCluster` the
`cluster.control.ClusterControl` interface the fault packages use, and `SimPartitioner` the
`NftPartitioner` interface, so kill, pause, partition (every topology) and clock bumps run
through the real packages unchanged (`build_sim_packages`); the scripted sequences
(brokers-down, lone-leader-crash) run their own script on the simulation's loop.

What the simulation does for each:
- kill: SIGKILL of the broker's core (timers stop, connections reset). It loses unflushed
  data exactly when the real kill does: when the brokers run with
  `log.crash.lose.unflushed=true` (the real broker then keeps appended bytes in its process
  until fsync); otherwise the page cache survives, as in a real SIGKILL.
- start: the broker comes back on its disk at once; it answers as soon as it is up.
- pause / resume: everything that arrives for the broker, and its own timers, wait until
  it resumes (SIGSTOP / SIGCONT).
- partition: the directed cuts become blocked links of the virtual network, between broker
  hosts and, for brokers without a majority, the controller; clients keep reaching every
  broker, as in a real run. A `one-way` cut (only data segments dropped in a real run) drops
  every message in that direction: the simulated network has no TCP segments.
- clock: the broker's wall clock moves (`SimCluster.skew_clock`); its timers do not.
  A strobe flips it on the simulation's timeline instead of a thread (`SimClockPackage`).
- disk: the broker's FaultyDisk (the same wrapper a broker process runs on) fails fsyncs
  (EIO), refuses space (ENOSPC) or stalls each fsync for simulated time; a torn crash tears
  the unflushed tails with the simulation's seeded generator and powers the broker off. A
  broker whose log directory failed halts and its process ends, as a real one exits 1.

With several controllers (SimCluster(controllers=N)) their node ids (1000...) are nodes like
the brokers' for kill (the controller's core dies; its disk stays), start, pause, clock and
partition, and `active_controller` names the one that leads (its LeaderChange committed, so it
decides); `raft_leader` names the leader of the highest Raft epoch, ready or not; and
`watch_elections` tells of each election as it happens (the chasing partition `raft-leaders`:
cuts that must land in the window after an election, whatever its time).

There are no processes: `pid` is None. The leaders and ISRs the nemeses read come from the
metadata image of the first running, unpaused broker, as the real control reads them from
the first broker that answers a Metadata request (a broker cut off from the controller
serves its last view in both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cluster.control import ControlError, PartitionStatus, TopicPartition, format_clock_offset
from cluster.sim.cluster import CONTROLLER_HOST, SimCluster, broker_host, controller_host
from cluster.storage.faulty_disk import DiskFaults
from nemeses.base import NemesisError, NemesisOptions, build_packages
from nemeses.clock import ClockPackage
from nemeses.link_faults import LINK_FAULT_NAMES

# The packages a simulated run performs. The scripted ones (brokers-down,
# lone-leader-crash) run their script on the simulation's loop (`invoke_async`).
SIMULATED: tuple[str, ...] = ("kill", "pause", "partition", "clock", "brokers-down", "lone-leader-crash", "disk")
# Message faults on the simulated network's links, over the SimControl's SimCluster.
SIMULATED += LINK_FAULT_NAMES


def not_simulated(name: str) -> str | None:
    """Why package `name` cannot run in a simulation (None: it can)."""
    if name in SIMULATED:
        return None
    if name in ("latency", "bandwidth", "flaky"):
        return "it drives TCP proxies on real sockets; the simulated network has link faults of its own"
    return f"it has no simulated form; simulated: {', '.join(SIMULATED)}"


class SimControl:
    """ClusterControl over a SimCluster. `schedule(delay_s, action)` runs an action later
    on the simulation's timeline (the strobe's flips)."""

    def __init__(self, sim: SimCluster, schedule: Callable[[float, Callable[[], None]], Any]) -> None:
        self.sim = sim
        self.schedule = schedule
        self.lose_unflushed = all(sim.broker_config(b).log_crash_lose_unflushed for b in sim.broker_ids)
        self._offsets_s: dict[int, float] = {}
        # Records a fault a package performs on its own, later than its op (a chasing
        # partition's cuts): harness.op_recorder's record_nemesis, set by the simulated run.
        self.record_nemesis: Callable[..., Any] | None = None
        # How many halts each broker had when it last started: a later one is this incarnation's.
        self._halts_at_start: dict[int, int] = {}

    # addresses
    @property
    def broker_ids(self) -> list[int]:
        return list(self.sim.broker_ids)

    @property
    def controller_ids(self) -> list[int]:
        return list(self.sim.controller_ids)

    def nemesis_nodes(self, kinds: Iterable[str] = ("broker",)) -> list[int]:
        kinds = set(kinds)
        return [*(self.broker_ids if "broker" in kinds else []), *(self.controller_ids if "controller" in kinds else [])]

    def active_controller(self) -> int | None:
        active = self.sim.controller
        return None if active is None else active.config.node_id

    def raft_leader(self) -> int | None:
        """The running controller that leads the highest Raft epoch, whether it has committed
        its LeaderChange (and so become the active controller) or not; None while none
        leads. Read from each controller's Raft state: a real cluster's DescribeQuorum gives
        the same leader. A former leader cut off still believes it leads its older epoch:
        the highest epoch is the quorum's leader."""
        running = self.sim.running_controllers()
        if len(self.sim.controller_ids) == 1:
            return running[0].config.node_id if running else None
        leaders = [(c.quorum.state.epoch, c.config.node_id) for c in running
                   if c.quorum is not None and c.quorum.state.leader_id == c.config.node_id]
        return max(leaders)[1] if leaders else None

    def _highest_led_epoch(self) -> int:
        """The highest epoch whose leader some running controller knows (-1: none)."""
        return max((c.quorum.state.epoch for c in self.sim.running_controllers()
                    if c.quorum is not None and c.quorum.state.leader_id is not None), default=-1)

    def watch_elections(self, elected: Callable[[dict], None]) -> Callable[[], None]:
        """Call `elected({"elected": node id, "epoch", "elected_at_s"})` at each election from
        now on: a controller becoming the leader of an epoch above every epoch with a leader
        seen so far. Seen as it happens (the controllers' transitions), not polled, so a
        window of a few milliseconds after it can be hit. Returns the stop (idempotent)."""
        state = {"above": self._highest_led_epoch()}

        def observe(transition: Any) -> None:
            if transition.role != "leader" or transition.epoch <= state["above"]:
                return
            state["above"] = transition.epoch
            elected({"elected": transition.node_id, "epoch": transition.epoch,
                     "elected_at_s": round(transition.time_ns / 1e9, 6)})

        def stop() -> None:
            if observe in self.sim.controller_observers:
                self.sim.controller_observers.remove(observe)

        self.sim.controller_observers.append(observe)
        return stop

    def _is_controller(self, node_id: int) -> bool:
        return node_id in self.sim.controller_ids

    def _check(self, broker_id: int) -> None:
        if broker_id not in self.sim.broker_ids and not self._is_controller(broker_id):
            raise ControlError(f"no broker {broker_id!r}; brokers are {self.sim.broker_ids}, controllers {self.sim.controller_ids}")

    def host(self, broker_id: int) -> str:
        self._check(broker_id)
        return controller_host(broker_id) if self._is_controller(broker_id) else broker_host(broker_id)

    def hosts(self) -> dict[int, str]:
        return {b: broker_host(b) for b in self.broker_ids}

    def node_hosts(self) -> dict[int, str]:
        return {n: self.host(n) for n in [*self.broker_ids, *self.controller_ids]}

    def controller_host(self) -> str | None:
        return CONTROLLER_HOST

    def controller_hosts(self) -> list[str]:
        return [controller_host(c) for c in self.controller_ids]

    def pid(self, broker_id: int) -> int | None:
        self._check(broker_id)
        return None

    # processes
    def is_alive(self, broker_id: int) -> bool:
        self._check(broker_id)
        if self._is_controller(broker_id):
            return self.sim.is_controller_running(broker_id)
        return self.sim.is_running(broker_id)

    def kill(self, broker_id: int) -> int | None:
        self._check(broker_id)
        if self._is_controller(broker_id):
            if self.sim.is_controller_running(broker_id):
                self.sim.kill_controller(broker_id)
            return None
        if self.sim.is_running(broker_id):
            self.sim.kill(broker_id, lose_unflushed=self.lose_unflushed)
        return None

    def start(self, broker_id: int) -> int | None:
        self._check(broker_id)
        if self._is_controller(broker_id):
            if not self.sim.is_controller_running(broker_id):
                self.sim.start_controller(broker_id)
            return None
        if not self.sim.is_running(broker_id):
            self._halts_at_start[broker_id] = len(self.sim.halts(broker_id))
            self.sim.start_broker(broker_id)
        return None

    def pause(self, broker_id: int) -> None:
        self._check(broker_id)
        self.sim.pause(broker_id)

    def resume(self, broker_id: int) -> None:
        self._check(broker_id)
        self.sim.resume(broker_id)

    def is_paused(self, broker_id: int) -> bool:
        return self.sim.network.is_paused(self.host(broker_id))

    # clocks
    @property
    def controls_clocks(self) -> bool:
        return True

    def set_clock_offset(self, broker_id: int, offset_s: float) -> str:
        self._check(broker_id)
        text = format_clock_offset(offset_s)
        self._offsets_s[broker_id] = float(text)
        self.sim.skew_clock(broker_id, round(float(text) * 1000))
        return text

    def clock_offset(self, broker_id: int) -> float:
        self._check(broker_id)
        return self._offsets_s.get(broker_id, 0.0)

    # disks (ClusterControl's disk door, over the simulated broker's FaultyDisk)
    def set_disk_faults(self, broker_id: int, *, fsync_errno: str | int | None = None,
                        write_errno: str | int | None = None, fsync_delay_ms: int = 0) -> dict:
        self._check(broker_id)
        if not self.sim.is_running(broker_id):
            raise ControlError(f"broker {broker_id} is not running: no disk to fault")
        disk = self.sim.faulty_disk(broker_id)
        # As the real door's `set`: these faults replace the ones in force.
        disk.set_faults(DiskFaults(fsync_errno=fsync_errno, write_errno=write_errno, fsync_delay_ms=fsync_delay_ms))
        return {"faults": disk.faults.to_json(), "counts": disk.counts.to_json()}

    def clear_disk_faults(self, broker_id: int) -> dict | None:
        self._check(broker_id)
        if not self.sim.is_running(broker_id):
            return None
        disk = self.sim.faulty_disk(broker_id)
        self.sim.clear_disk_faults(broker_id)
        return {"faults": disk.faults.to_json(), "counts": disk.counts.to_json()}

    def crash_torn(self, broker_id: int, *, seed: int, corrupt: bool = True) -> dict:
        """Power loss. The tails are torn with the simulation's own seeded generator, not
        `seed`: the simulation draws everything from its seed, so a replay tears alike."""
        self._check(broker_id)
        if not self.sim.is_running(broker_id):
            raise ControlError(f"broker {broker_id} is not running: no disk to fault")
        torn = self.sim.crash_torn(broker_id, corrupt=corrupt)
        return {"torn": [t.to_json() for t in torn]}

    def disk_halt(self, broker_id: int) -> dict | None:
        self._check(broker_id)
        halts = self.sim.halts(broker_id)
        if self.sim.is_running(broker_id) or len(halts) <= self._halts_at_start.get(broker_id, 0):
            return None
        return {"reason": halts[-1], "counts": None}

    # metadata
    def leaders(self, topics: Iterable[str] | None = None, **_: Any) -> dict[TopicPartition, int]:
        return {tp: s.leader for tp, s in self.partition_states(topics).items() if s.leader >= 0}

    def partition_states(self, topics: Iterable[str] | None = None, *, via: Iterable[int] | None = None,
                         **_: Any) -> dict[TopicPartition, PartitionStatus]:
        wanted = None if topics is None else set(topics)
        for broker_id in (self.broker_ids if via is None else list(via)):
            if not self.sim.is_running(broker_id) or self.is_paused(broker_id):
                continue
            result = {}
            for topic in self.sim.broker(broker_id).topics.all():
                if wanted is not None and topic.name not in wanted:
                    continue
                for index, state in sorted(topic.partitions.items()):
                    tp = TopicPartition(topic.name, index)
                    result[tp] = PartitionStatus(tp, int(state.leader), tuple(state.replicas), tuple(state.isr))
            return result
        raise ControlError("no broker answered a Metadata request: none is running and unpaused")

    def close(self) -> list[str]:
        return []


class SimPartitioner:
    """NftPartitioner's interface (install / apply / heal) over the virtual network."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim

    def install(self) -> None:
        pass  # nothing to set up: the virtual network is always there

    def apply(self, *, blocked: list[tuple[str, str]], blocked_data: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
        self.sim.heal()
        for src, dst in sorted({*blocked, *blocked_data}):
            self.sim.network.block(src, dst)

    def heal(self) -> None:
        self.sim.heal()


class SimClockPackage(ClockPackage):
    """The clock package with its strobe on the simulation's timeline: the same flips, the
    same schedule, no thread."""

    def start(self, value: Any) -> dict:
        if not isinstance(value, dict) or value.get("kind") != "strobe":
            return super().start(value)
        nodes, seen = self._nodes(value)
        control: SimControl = self.control  # type: ignore[assignment]
        base = {node: control.clock_offset(node) for node in nodes}
        period_s = value["period_ms"] / 1000.0
        flips = max(1, int(value["duration_ms"] / value["period_ms"]))
        state: dict[str, Any] = {"done": 0, "shifted": False, "stopped": False}
        self._sim_strobes.append(state)

        def set_all(shifted: bool) -> None:
            for node in nodes:
                control.set_clock_offset(node, base[node] + (value["delta_ms"] / 1000.0 if shifted else 0.0))

        def flip() -> None:  # as Strobe._run: `flips` flips a period apart, then back to the base
            if state["stopped"]:
                return
            state["shifted"] = not state["shifted"]
            set_all(state["shifted"])
            state["done"] += 1
            if state["done"] < flips:
                control.schedule(period_s, flip)
            else:
                set_all(False)

        control.schedule(period_s, flip)
        return {**value, "nodes": nodes, **seen}

    def reset(self) -> dict[str, str]:
        for state in self._sim_strobes:
            state["stopped"] = True
        self._sim_strobes.clear()
        return super().reset()

    @property
    def _sim_strobes(self) -> list[dict]:
        strobes = self.__dict__.get("_sim_strobe_states")
        if strobes is None:
            strobes = self.__dict__["_sim_strobe_states"] = []
        return strobes


def build_sim_packages(names: list[str], control: SimControl, options: object = None) -> list[Any]:
    """The fault packages for a simulated run: the real ones over SimControl, partition with
    the SimPartitioner, clock with its strobe on the timeline. Packages with no simulated
    form (the proxy faults) are refused with the reason."""
    refused = [(n, not_simulated(n)) for n in names if not_simulated(n)]
    if refused:
        raise NemesisError("; ".join(f"--nemesis {n} cannot run in a simulation: {why}" for n, why in refused))
    opts = NemesisOptions.from_object(options)
    packages: list[Any] = []
    for name in names:
        if name == "partition":
            from nemeses.partition import PartitionPackage

            packages.append(PartitionPackage(control, opts, partitioner=SimPartitioner(control.sim)))  # type: ignore[arg-type]
        elif name == "clock":
            packages.append(SimClockPackage(control, opts))  # type: ignore[arg-type]
        else:
            packages.extend(build_packages([name], control, opts))  # type: ignore[arg-type]
    if len(set(names)) != len(names):
        raise NemesisError(f"{names} names a nemesis twice")
    return packages
