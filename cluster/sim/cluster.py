"""`SimCluster`: one controller (or a quorum of 3 or 5: `controllers=`) and N brokers, the
real cores, on one virtual clock and a virtual network, with the faults a chaos run injects (crash with or without losing unflushed
data, restart, pause, network partitions) and clients that speak real frames.

Deterministic: everything random comes from one seeded RNG, and time moves only through
`run_for` / `run_until`.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster.broker.broker import Broker
from cluster.broker.env import Endpoint, OutboundResult
from cluster.config import BrokerConfig
from cluster.controller.config import ControllerConfig
from cluster.controller.core import CONTROLLER_VERSIONS, Controller
from cluster.controller.quorum_journal import ControllerJournal, describe_quorum, node_view
from cluster.controller.quorum_node import quorum_versions, raft_factory
from cluster.protocol.codec import build, request_class
from cluster.runtime.virtual_time import NodeClock, VirtualClock, VirtualScheduler
from cluster.sim.link_fault import LinkFault, LinkFaultError
from cluster.sim.network import NodeScheduler, SimNode, VirtualNetwork, VirtualOutbound
from cluster.storage.disk import MemoryDisk
from cluster.storage.faulty_disk import DiskFaults, FaultyDisk, TornTail

CONTROLLER_ID = 1000
CONTROLLER_HOST = "127.0.0.9"
CONTROLLER_PORT = 9093
MAX_CONTROLLERS = 7  # controller i on 127.0.0.(9-i): 127.0.0.3-9, clear of the client's 127.0.0.1
BROKER_PORT = 9092
CLIENT_HOST = "127.0.0.1"
# Fast failure detection so simulated failovers take simulated seconds, not tens of them.
SIM_DEFAULTS = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "1000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "controller.quorum.request.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}


# A broker whose core halted (its log directory failed) ends its process this much later: the
# answers it already wrote still arrive (a dead process's sent bytes leave with the kernel),
# as the network's latency (at most 1 ms by default) delivers them, and requests meanwhile
# get the offline partitions' KAFKA_STORAGE_ERROR, as in Kafka before its Exit.halt.
HALT_EXIT_MS = 5.0


def broker_host(broker_id: int) -> str:
    return f"127.0.0.{10 + broker_id}"


def controller_host(node_id: int) -> str:
    """Controller `node_id` (1000, 1001, ...) at 127.0.0.9, 127.0.0.8, ..."""
    return f"127.0.0.{9 - (node_id - CONTROLLER_ID)}"


def _is_loopback_address(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and parts[0] == "127" and all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)


class SimTimeout(AssertionError):
    """`run_until` ran out of simulated time; the message says what was awaited."""


@dataclass(slots=True)
class SimCall:
    """One client request's outcome, filled in when the answer arrives."""

    result: OutboundResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def body(self) -> Any:
        assert self.result is not None, "no answer yet"
        assert self.result.ok, f"request failed: {self.result.error}"
        return self.result.body


@dataclass(slots=True)
class _ControllerSlot:
    node_id: int
    disk: MemoryDisk = field(default_factory=MemoryDisk)
    clock: NodeClock | None = None
    controller: Controller | None = None
    scheduler: NodeScheduler | None = None
    outbound: VirtualOutbound | None = None
    journal: ControllerJournal | None = None  # over every incarnation, for the checks
    halts: list[str] = field(default_factory=list)  # why each incarnation halted (committed metadata it could not apply)

    @property
    def host(self) -> str:
        return controller_host(self.node_id)

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.node_id, self.host, CONTROLLER_PORT)


@dataclass(slots=True)
class _BrokerSlot:
    broker_id: int
    disk: MemoryDisk = field(default_factory=MemoryDisk)
    clock: NodeClock | None = None  # the broker's own wall clock survives its restarts, as a host's does
    broker: Broker | None = None
    scheduler: NodeScheduler | None = None
    outbound: VirtualOutbound | None = None
    incarnation: int = 0
    faulty_disk: FaultyDisk | None = None  # wraps `disk`; the broker writes through it
    stalled_until_ns: int = 0  # a slow fsync holds the broker until then
    stalled: bool = False
    halts: list[str] = field(default_factory=list)  # why each incarnation halted (its log directory failed)


class SimCluster:
    def __init__(self, n_brokers: int = 3, properties: Mapping[str, str] | None = None, seed: int = 1,
                 broker_properties: Mapping[int, Mapping[str, str]] | None = None, controllers: int = 1,
                 controller_observer: Callable[[Any], None] | None = None,
                 controller_properties: Mapping[int, Mapping[str, str]] | None = None) -> None:
        if not 1 <= controllers <= MAX_CONTROLLERS:
            raise ValueError(f"controllers={controllers}: the simulated cluster runs 1-{MAX_CONTROLLERS} controllers")
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.scheduler = VirtualScheduler(self.clock)
        self.network = VirtualNetwork(self.scheduler, random.Random(self.rng.getrandbits(64)))
        self.properties = {**SIM_DEFAULTS, "offsets.topic.replication.factor": str(min(3, n_brokers)),
                           "transaction.state.log.replication.factor": str(min(3, n_brokers)),
                           "transaction.state.log.min.isr": str(min(2, n_brokers)), **(properties or {})}
        self._broker_properties = {b: dict(p) for b, p in (broker_properties or {}).items()}
        self.controller_endpoint = Endpoint(CONTROLLER_ID, CONTROLLER_HOST, CONTROLLER_PORT)
        # Called with every controller's role transitions (cluster.quorum.raft.Transition):
        # the constructor's observer, then any added later (a nemesis waiting for an election).
        self.controller_observers: list[Callable[[Any], None]] = [controller_observer] if controller_observer else []
        self._controller_properties = {c: dict(p) for c, p in (controller_properties or {}).items()}
        self._controllers = {CONTROLLER_ID + i: _ControllerSlot(CONTROLLER_ID + i) for i in range(controllers)}
        self.voters = ",".join(f"{c.node_id}@{c.host}:{CONTROLLER_PORT}" for c in self._controllers.values())
        self._slots = {b: _BrokerSlot(b) for b in range(n_brokers)}
        self._client = VirtualOutbound(self.network, CLIENT_HOST)
        # The controllers replicate the metadata log through the Raft quorum (a single one is
        # a quorum of one: it commits what it has fsynced).
        versions = {**quorum_versions(), **CONTROLLER_VERSIONS}
        for slot in self._controllers.values():
            self.network.add_node(SimNode(slot.endpoint, self._controller_handle(slot.node_id), versions))
        for broker_id in self._slots:
            self.network.add_node(SimNode(Endpoint(broker_id, broker_host(broker_id), BROKER_PORT), self._broker_handle(broker_id)))
        for node_id in self._controllers:
            self.start_controller(node_id)
        for broker_id in self._slots:
            self.start_broker(broker_id)

    # ---- nodes ---------------------------------------------------------------------------

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self._slots)

    @property
    def controller_ids(self) -> list[int]:
        return sorted(self._controllers)

    def broker_config(self, broker_id: int) -> BrokerConfig:
        props = {**self.properties, "controller.quorum.voters": self.voters, **self._broker_properties.get(broker_id, {})}
        return BrokerConfig.from_properties(broker_id, broker_host(broker_id), BROKER_PORT, f"/broker-{broker_id}", props)

    @property
    def controller(self) -> Controller | None:
        """The active controller (the only one, running, without a quorum); None while no
        controller leads. A paused or cut-off former leader may still believe it leads: the
        one of the highest epoch is the active one."""
        running = [s.controller for s in self._controllers.values() if s.controller is not None]
        if len(self._controllers) == 1:
            return running[0] if running else None
        return max((c for c in running if c.is_active), key=lambda c: c.epoch, default=None)

    def controller_node(self, node_id: int) -> Controller:
        controller = self._controller_slot(node_id).controller
        assert controller is not None, f"controller {node_id} is not running"
        return controller

    def running_controllers(self) -> list[Controller]:
        return [s.controller for _, s in sorted(self._controllers.items()) if s.controller is not None]

    def _controller_slot(self, node_id: int) -> _ControllerSlot:
        slot = self._controllers.get(node_id)
        if slot is None:
            raise ValueError(f"no controller {node_id}; controllers: {self.controller_ids}")
        return slot

    def start_controller(self, node_id: int = CONTROLLER_ID) -> Controller:
        slot = self._controller_slot(node_id)
        assert slot.controller is None, f"controller {node_id} is running"
        self.network.revive(slot.host)
        slot.scheduler = NodeScheduler(self.scheduler, self.network, slot.host)
        if slot.clock is None:
            slot.clock = NodeClock(self.clock)
        props = {**self.properties, "controller.quorum.voters": self.voters, **self._controller_properties.get(node_id, {})}
        config = ControllerConfig.from_properties(node_id, slot.host, CONTROLLER_PORT, f"/controller-{node_id}", props)
        rng = random.Random(self.rng.getrandbits(64))
        slot.outbound = self.network.outbound_for(slot.host)
        if slot.journal is None:
            slot.journal = ControllerJournal(node_id)
        journal = slot.journal

        def observe(transition: Any) -> None:
            journal.role(transition.epoch, transition.role, transition.leader_id)
            for observer in list(self.controller_observers):
                observer(transition)

        factory = raft_factory(config, slot.disk, slot.clock, slot.scheduler, random.Random(rng.getrandbits(64)), slot.outbound, observe)
        slot.controller = Controller(config, slot.disk, slot.clock, slot.scheduler, rng, factory, quorum_versions())
        slot.controller.on_committed = lambda offset, epoch, value: journal.commit(offset, epoch, value)
        controller = slot.controller
        slot.controller.on_fatal = lambda reason: self._controller_halted(node_id, controller, reason)
        slot.controller.start()
        return slot.controller

    def controller_halts(self, node_id: int) -> list[str]:
        """Why each incarnation of controller `node_id` halted on a fatal fault, in order."""
        return list(self._controller_slot(node_id).halts)

    def _controller_halted(self, node_id: int, controller: Controller, reason: str) -> None:
        """The controller core met a fatal fault (committed metadata it cannot apply): its
        process ends, as under Kafka's ProcessTerminatingFaultHandler. In an event of its own,
        not inside the quorum's delivery that raised it; at once in simulated time, so no
        message reaches the halted node first."""
        slot = self._controller_slot(node_id)
        slot.halts.append(reason)

        def end_process() -> None:
            if slot.controller is controller:
                self.kill_controller(node_id)

        self.scheduler.call_later(0, end_process)

    def kill_controller(self, node_id: int | None = None, lose_unflushed: bool = False) -> int:
        """SIGKILL controller `node_id` (default: the active one, else the first running);
        returns its node id."""
        if node_id is None:
            active = self.controller
            node_id = active.config.node_id if active is not None else next(s.node_id for s in self._controllers.values() if s.controller)
        slot = self._controller_slot(node_id)
        assert slot.controller is not None and slot.scheduler is not None, f"controller {node_id} is not running"
        slot.scheduler.halt()
        if slot.outbound is not None:
            slot.outbound.dead = True
        self.network.crash(slot.host)
        if lose_unflushed:
            slot.disk.crash()
        slot.controller = None
        return node_id

    def quorum_report(self) -> dict[str, Any]:
        """The controllers' metadata logs and journals, judged (quorum_journal.describe_quorum):
        what a run's checks read, with `violations` and `valid`."""
        from cluster.quorum.log import ReplicatedLog

        views, journals = [], []
        for node_id, slot in sorted(self._controllers.items()):
            journal = slot.journal or ControllerJournal(node_id)
            if slot.controller is not None and slot.controller.quorum is not None:
                replicated = slot.controller.quorum.log  # type: ignore[attr-defined]
                views.append(node_view(journal, replicated.describe(), replicated.start_offset))
            else:
                offline = ReplicatedLog(slot.disk, f"/controller-{node_id}", self.clock.wall_ms())
                try:
                    views.append(node_view(journal, offline.describe(), offline.start_offset))
                finally:
                    offline.close()
            journals.append(journal)
        return describe_quorum(views, journals, len(self._controllers))

    def is_controller_running(self, node_id: int) -> bool:
        return self._controller_slot(node_id).controller is not None

    def start_broker(self, broker_id: int) -> Broker:
        slot = self._slots[broker_id]
        assert slot.broker is None, f"broker {broker_id} is running"
        host = broker_host(broker_id)
        self.network.revive(host)
        slot.incarnation += 1
        slot.scheduler = NodeScheduler(self.scheduler, self.network, host)
        slot.outbound = self.network.outbound_for(host)
        if slot.clock is None:
            slot.clock = NodeClock(self.clock)
        # Disk faults live in the broker process (as in the process runtime): a new
        # incarnation starts on a healthy disk, as after an operator replaced it.
        slot.faulty_disk = FaultyDisk(slot.disk, stall=lambda delay_ms: self._stall(broker_id, delay_ms))
        slot.broker = Broker(self.broker_config(broker_id), slot.faulty_disk, slot.clock, slot.scheduler, random.Random(self.rng.getrandbits(64)),
                             slot.outbound)
        incarnation = slot.incarnation
        slot.broker.on_halt = lambda reason: self._halted(broker_id, incarnation, reason)
        slot.broker.start()
        return slot.broker

    def kill(self, broker_id: int, lose_unflushed: bool = False) -> None:
        """SIGKILL: timers stop, connections reset; with `lose_unflushed`, also everything
        not fsynced is gone (power loss)."""
        slot = self._slots[broker_id]
        assert slot.broker is not None and slot.scheduler is not None and slot.outbound is not None, f"broker {broker_id} is not running"
        slot.scheduler.halt()
        slot.outbound.dead = True
        self.network.crash(broker_host(broker_id))
        if slot.stalled:
            # What a slow fsync held is delivered to a dead node now (dropped).
            slot.stalled = False
            self.network.resume(broker_host(broker_id))
        if lose_unflushed:
            slot.disk.crash()
        slot.broker = None

    def restart(self, broker_id: int, lose_unflushed: bool = False) -> Broker:
        self.kill(broker_id, lose_unflushed)
        return self.start_broker(broker_id)

    # ---- disk faults -----------------------------------------------------------------------

    def faulty_disk(self, broker_id: int) -> FaultyDisk:
        """The running broker's disk, with its fault switches and counts."""
        disk = self._slots[broker_id].faulty_disk
        assert disk is not None and self.is_running(broker_id), f"broker {broker_id} is not running"
        return disk

    def fail_fsync(self, broker_id: int, error: int | str = errno.EIO) -> None:
        """Every fsync of the broker fails with `error` (the broker halts at the first one)."""
        self.faulty_disk(broker_id).update_faults(fsync_errno=error)

    def fail_writes(self, broker_id: int, error: int | str = errno.ENOSPC) -> None:
        """Every write needing space fails with `error`: a full disk."""
        self.faulty_disk(broker_id).update_faults(write_errno=error)

    def slow_fsync(self, broker_id: int, delay_ms: int) -> None:
        """Every fsync of the broker first stalls it for `delay_ms` of simulated time."""
        self.faulty_disk(broker_id).update_faults(fsync_delay_ms=delay_ms)

    def clear_disk_faults(self, broker_id: int) -> None:
        if self.is_running(broker_id):
            self.faulty_disk(broker_id).set_faults(DiskFaults())

    def crash_torn(self, broker_id: int, corrupt: bool = True) -> list[TornTail]:
        """Power loss with torn writes: each file keeps a random part of its unflushed tail
        (one byte of a segment's flipped with `corrupt`), the rest is lost; the broker is
        down until `start_broker`."""
        torn = self.faulty_disk(broker_id).tear_unflushed_tails(random.Random(self.rng.getrandbits(64)), corrupt=corrupt)
        self.kill(broker_id, lose_unflushed=True)
        return torn

    def halts(self, broker_id: int) -> list[str]:
        """Why each incarnation of the broker halted on a failed log directory, in order."""
        return list(self._slots[broker_id].halts)

    def _halted(self, broker_id: int, incarnation: int, reason: str) -> None:
        """The broker core halted (its only log directory failed): the process ends, as
        Kafka's Exit.halt, without losing what the OS already has."""
        slot = self._slots[broker_id]
        slot.halts.append(reason)

        def end_process() -> None:
            if slot.incarnation == incarnation and slot.broker is not None:
                self.kill(broker_id)

        self.scheduler.call_later(HALT_EXIT_MS, end_process)

    def _stall(self, broker_id: int, delay_ms: int) -> None:
        """A slow fsync: nothing reaches the broker and none of its timers fire until the
        stall ends (the process is blocked in the call). Stalls in one handler add up. What
        the stalled handler itself sends still leaves at once: an approximation, since a
        core call cannot be suspended part way."""
        slot = self._slots[broker_id]
        host = broker_host(broker_id)
        now_ns = self.clock.monotonic_ns()
        slot.stalled_until_ns = max(slot.stalled_until_ns, now_ns) + delay_ms * 1_000_000
        if not slot.stalled:
            if self.network.is_paused(host):
                return  # paused by a fault: it resumes with that fault
            slot.stalled = True
            self.network.pause(host)
            incarnation = slot.incarnation

            def maybe_resume() -> None:
                if not slot.stalled or slot.incarnation != incarnation:
                    return
                if self.clock.monotonic_ns() < slot.stalled_until_ns:
                    self.scheduler.call_at_ns(slot.stalled_until_ns, maybe_resume)
                    return
                slot.stalled = False
                self.network.resume(host)

            self.scheduler.call_at_ns(slot.stalled_until_ns, maybe_resume)

    def skew_clock(self, broker_id: int, skew_ms: int) -> None:
        """Set broker (or controller) `broker_id`'s wall clock `skew_ms` away from true time
        (a clock fault: its monotonic clock, and so its timers, keep running at the shared
        rate)."""
        slot: _BrokerSlot | _ControllerSlot = self._controllers[broker_id] if broker_id in self._controllers else self._slots[broker_id]
        if slot.clock is None:
            slot.clock = NodeClock(self.clock)
        slot.clock.skew_ms = skew_ms

    def pause(self, broker_id: int) -> None:
        """SIGSTOP a broker or a controller (by its node id)."""
        if broker_id in self._controllers:
            self.network.pause(controller_host(broker_id))
            return
        self._slots[broker_id].stalled = False  # a slow fsync's hold becomes the pause's: resume() ends it
        self.network.pause(broker_host(broker_id))

    def resume(self, broker_id: int) -> None:
        self.network.resume(controller_host(broker_id) if broker_id in self._controllers else broker_host(broker_id))

    def broker(self, broker_id: int) -> Broker:
        broker = self._slots[broker_id].broker
        assert broker is not None, f"broker {broker_id} is not running"
        return broker

    def is_running(self, broker_id: int) -> bool:
        return self._slots[broker_id].broker is not None

    def running_brokers(self) -> list[Broker]:
        return [s.broker for _, s in sorted(self._slots.items()) if s.broker is not None]

    def _controller_handle(self, node_id: int) -> Callable[[Any, Any, Any], None]:
        def handle(request: Any, client: Any, reply: Any) -> None:
            controller = self._controllers[node_id].controller
            assert controller is not None, f"request delivered to stopped controller {node_id}"
            controller.handle(request, client, reply)
        return handle

    def _broker_handle(self, broker_id: int) -> Callable[[Any, Any, Any], None]:
        def handle(request: Any, client: Any, reply: Any) -> None:
            broker = self._slots[broker_id].broker
            assert broker is not None, f"request delivered to stopped broker {broker_id}"
            broker.handle(request, client, reply)
        return handle

    # ---- network faults ------------------------------------------------------------------

    @staticmethod
    def host_of(node: int | str) -> str:
        """A broker id, a controller's node id (1000...), "controller" (the first), or
        "client"."""
        if node == "controller":
            return CONTROLLER_HOST
        if node == "client":
            return CLIENT_HOST
        assert isinstance(node, int)
        return controller_host(node) if node >= CONTROLLER_ID else broker_host(node)

    def isolate(self, groups: Iterable[Iterable[int | str]]) -> None:
        """Partition into `groups` of nodes (broker ids, controller node ids, "controller":
        every controller, "client"); nodes not named keep talking to everyone."""
        def hosts(node: int | str) -> list[str]:
            if node == "controller":
                return [c.host for c in self._controllers.values()]
            return [self.host_of(node)]

        self.network.isolate([[h for n in group for h in hosts(n)] for group in groups])

    def block(self, from_node: int | str, to_node: int | str) -> None:
        self.network.block(self.host_of(from_node), self.host_of(to_node))

    def heal(self) -> None:
        self.network.heal()

    # ---- link faults (delay, loss, duplication, reordering: see cluster.sim.network) ------

    def link_host(self, node: int | str) -> str:
        """The address of a node for link faults: a broker id, CONTROLLER_ID or "controller",
        "client", or a client's own host address (127.x.y.z). Raises LinkFaultError naming
        what is wrong."""
        if isinstance(node, bool):
            raise LinkFaultError(f"{node!r} is not a node")
        if isinstance(node, int):
            if node in self._controllers:
                return controller_host(node)
            if node not in self._slots:
                raise LinkFaultError(f"no broker {node}; brokers: {self.broker_ids}, controllers: {self.controller_ids}")
            return broker_host(node)
        if node in ("controller", "client"):
            return self.host_of(node)
        if isinstance(node, str) and _is_loopback_address(node):
            return node
        raise LinkFaultError(f"{node!r} is not a node: give a broker id, {CONTROLLER_ID} or 'controller', 'client', or a 127.x.y.z host")

    def set_link_fault(self, from_node: int | str, to_node: int | str, fault: LinkFault, tag: str = "") -> None:
        """Apply `fault` to messages from `from_node` to `to_node` (one direction), replacing
        what `tag` set on that link before."""
        self.network.set_link_fault(self.link_host(from_node), self.link_host(to_node), fault, tag)

    def set_node_fault(self, node: int | str, fault: LinkFault, tag: str = "") -> None:
        """Apply `fault` to every link to and from `node`."""
        self.network.set_node_fault(self.link_host(node), fault, tag)

    def clear_link_faults(self, tag: str | None = None) -> None:
        """Clear the link faults `tag` set, or all of them."""
        self.network.clear_link_faults(tag)

    # ---- time ----------------------------------------------------------------------------

    def run_for(self, duration_ms: float) -> None:
        self.scheduler.advance(duration_ms)

    def run_until(self, predicate: Callable[[], bool], timeout_ms: float = 30_000, step_ms: float = 5, what: str = "condition") -> float:
        """Advance in steps until `predicate()`; returns the simulated ms it took."""
        waited = 0.0
        while not predicate():
            if waited >= timeout_ms:
                raise SimTimeout(f"{what} not reached within {timeout_ms:.0f} simulated ms (seed {self.seed})")
            self.scheduler.advance(step_ms)
            waited += step_ms
        return waited

    # ---- clients -------------------------------------------------------------------------

    def send(self, broker_id: int, api_key: int, api_version: int, *, request_timeout_ms: int = 30_000, **fields: Any) -> SimCall:
        """Send one request from the client host to a broker (or CONTROLLER_ID)."""
        call = SimCall()
        body = build(request_class(api_key, api_version), **fields)
        destination = (self._controllers[broker_id].endpoint if broker_id in self._controllers
                       else Endpoint(broker_id, broker_host(broker_id), BROKER_PORT))

        def done(result: OutboundResult) -> None:
            call.result = result

        self._client.send(destination, api_key, api_version, body, done, request_timeout_ms)
        return call

    def call(self, broker_id: int, api_key: int, api_version: int, *, wait_ms: float = 30_000, **fields: Any) -> Any:
        """Send and run until answered; the response body."""
        pending = self.send(broker_id, api_key, api_version, **fields)
        self.run_until(lambda: pending.done, wait_ms, step_ms=1, what=f"answer to API {api_key} v{api_version} from broker {broker_id}")
        return pending.body
