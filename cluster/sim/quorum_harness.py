"""`QuorumSim`: N Raft nodes (the real `RaftQuorum` core) on the simulator's virtual clock
and network, each with a toy state machine that appends what is committed, and the faults a
chaos run injects on them: kill (with or without losing what was not fsynced), restart,
pause, partitions of any shape, and link delay, loss, duplication and reordering.

After a run, `views()` describes every node for `cluster.quorum.checks.check_quorum`, and
`acknowledged` lists what the leader answered as committed to its callers.

Deterministic: one seed, and time moves only through `run_for` / `run_until`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cluster.broker.env import Endpoint, OutboundResult
from cluster.quorum.api import QuorumVoters
from cluster.quorum.checks import NodeView, Violation, check_quorum
from cluster.quorum.config import QuorumConfig
from cluster.quorum.log import record_hash
from cluster.quorum.raft import RaftQuorum, Role, Transition
from cluster.quorum.rpc import QUORUM_VERSIONS
from cluster.runtime.virtual_time import NodeClock, VirtualClock, VirtualScheduler
from cluster.sim.link_fault import LinkFault
from cluster.sim.network import NodeScheduler, SimNode, VirtualNetwork, VirtualOutbound
from cluster.storage.disk import MemoryDisk

QUORUM_PORT = 9093
DATA_DIR = "/quorum"
CLIENT_HOST = "127.0.3.250"  # tools and tests send requests from here


def quorum_host(node_id: int) -> str:
    return f"127.0.3.{node_id}"


class CounterMachine:
    """A toy state machine: the list of committed records. Its snapshot is that list."""

    def __init__(self) -> None:
        self.values: list[tuple[int, int, bytes]] = []  # (offset, epoch, record)
        self.end_offset = 0
        self.delivered: list[tuple[int, int, str]] = []  # what on_commit handed over, for the checks
        self.leader_epochs: list[int] = []
        self.resigned: list[tuple[int, int | None]] = []

    def on_commit(self, base_offset: int, records: list[bytes], epoch: int) -> None:
        if base_offset < self.end_offset:
            raise AssertionError(f"on_commit at {base_offset} below what was applied ({self.end_offset})")
        for index, record in enumerate(records):
            self.values.append((base_offset + index, epoch, record))
            self.delivered.append((base_offset + index, epoch, record_hash(record)))
        self.end_offset = base_offset + len(records)

    def on_become_leader(self, epoch: int) -> None:
        self.leader_epochs.append(epoch)

    def on_resign(self, epoch: int, new_leader_id: int | None) -> None:
        self.resigned.append((epoch, new_leader_id))

    def snapshot(self) -> tuple[int, bytes]:
        return self.end_offset, json.dumps([(o, e, r.hex()) for o, e, r in self.values]).encode()

    def load_snapshot(self, end_offset: int, data: bytes) -> None:
        self.values = [(o, e, bytes.fromhex(r)) for o, e, r in json.loads(data)]
        self.end_offset = end_offset


@dataclass(slots=True)
class _Slot:
    node_id: int
    disk: MemoryDisk = field(default_factory=MemoryDisk)
    clock: NodeClock | None = None
    scheduler: NodeScheduler | None = None
    outbound: VirtualOutbound | None = None
    quorum: RaftQuorum | None = None
    machine: CounterMachine | None = None
    delivered: list[tuple[int, int, str]] = field(default_factory=list)  # over every incarnation
    transitions: list[Transition] = field(default_factory=list)


class QuorumSim:
    def __init__(self, n_nodes: int, seed: int, properties: Mapping[str, str] | None = None,
                 node_properties: Mapping[int, Mapping[str, str]] | None = None) -> None:
        if n_nodes < 1:
            raise ValueError(f"a quorum needs at least one node, not {n_nodes}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.scheduler = VirtualScheduler(self.clock)
        self.network = VirtualNetwork(self.scheduler, random.Random(self.rng.getrandbits(64)))
        self.properties = dict(properties or {})
        self._node_properties = {n: dict(p) for n, p in (node_properties or {}).items()}
        self.voters = QuorumVoters({i: Endpoint(i, quorum_host(i), QUORUM_PORT) for i in range(1, n_nodes + 1)})
        self._slots = {i: _Slot(i) for i in self.voters.voters}
        self.acknowledged: list[tuple[int, str]] = []  # (offset, record hash) answered as committed
        self.failed_appends = 0
        self._client = VirtualOutbound(self.network, CLIENT_HOST)
        for node_id, endpoint in self.voters.voters.items():
            self.network.add_node(SimNode(endpoint, self._handler(node_id), QUORUM_VERSIONS))
        for node_id in self._slots:
            self.start(node_id)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._slots)

    def config(self, node_id: int) -> QuorumConfig:
        return QuorumConfig.from_properties({**self.properties, **self._node_properties.get(node_id, {})})

    # ---- nodes --------------------------------------------------------------------------------

    def start(self, node_id: int) -> RaftQuorum:
        slot = self._slots[node_id]
        assert slot.quorum is None, f"node {node_id} is running"
        host = quorum_host(node_id)
        self.network.revive(host)
        slot.scheduler = NodeScheduler(self.scheduler, self.network, host)
        slot.outbound = self.network.outbound_for(host)
        if slot.clock is None:
            slot.clock = NodeClock(self.clock)
        slot.machine = CounterMachine()
        machine = slot.machine

        def observe(transition: Transition) -> None:
            slot.transitions.append(transition)

        slot.quorum = RaftQuorum(node_id, self.voters, self.config(node_id), slot.disk, DATA_DIR, slot.clock, slot.scheduler,
                                 random.Random(self.rng.getrandbits(64)), slot.outbound, machine, observer=observe)
        slot.quorum.start()
        return slot.quorum

    def kill(self, node_id: int, lose_unflushed: bool = False) -> None:
        slot = self._slots[node_id]
        assert slot.quorum is not None and slot.scheduler is not None and slot.outbound is not None, f"node {node_id} is not running"
        slot.scheduler.halt()
        slot.outbound.dead = True
        self.network.crash(quorum_host(node_id))
        if lose_unflushed:
            slot.disk.crash()
        self._retire(slot)

    def stop(self, node_id: int) -> None:
        """A graceful shutdown: a leader resigns with EndQuorumEpoch, and the process ends
        a moment later (what it sent is on its way, as bytes handed to the kernel are)."""
        slot = self._slots[node_id]
        assert slot.quorum is not None and slot.scheduler is not None and slot.outbound is not None, f"node {node_id} is not running"
        slot.quorum.shutdown()
        slot.scheduler.halt()
        quorum, outbound = slot.quorum, slot.outbound

        def exit_process() -> None:
            if slot.quorum is quorum:
                outbound.dead = True
                self.network.crash(quorum_host(node_id))
                self._retire(slot)

        self.scheduler.call_later(5, exit_process)

    def _retire(self, slot: _Slot) -> None:
        assert slot.machine is not None
        slot.delivered.extend(slot.machine.delivered)
        slot.quorum = None
        slot.machine = None

    def restart(self, node_id: int, lose_unflushed: bool = False) -> RaftQuorum:
        self.kill(node_id, lose_unflushed)
        return self.start(node_id)

    def is_running(self, node_id: int) -> bool:
        return self._slots[node_id].quorum is not None

    def node(self, node_id: int) -> RaftQuorum:
        quorum = self._slots[node_id].quorum
        assert quorum is not None, f"node {node_id} is not running"
        return quorum

    def machine(self, node_id: int) -> CounterMachine:
        machine = self._slots[node_id].machine
        assert machine is not None, f"node {node_id} is not running"
        return machine

    def running(self) -> list[RaftQuorum]:
        return [s.quorum for _, s in sorted(self._slots.items()) if s.quorum is not None]

    def leaders(self) -> list[int]:
        """Running nodes that lead (and may append), by id."""
        return [q.node_id for q in self.running() if q.is_leader]

    def leader(self) -> RaftQuorum | None:
        """The leader of the highest epoch among running nodes, if it may append."""
        ready = [q for q in self.running() if q.is_leader]
        return max(ready, key=lambda q: q.epoch) if ready else None

    def _handler(self, node_id: int) -> Callable[..., None]:
        def handle(request: object, client: object, reply: object) -> None:
            quorum = self._slots[node_id].quorum
            assert quorum is not None, f"request delivered to stopped node {node_id}"
            if not quorum.handle(request, client, reply):  # type: ignore[arg-type]
                raise AssertionError(f"node {node_id} was sent a request the quorum does not serve: {request}")
        return handle

    # ---- the client ---------------------------------------------------------------------------

    def propose(self, value: bytes) -> bool:
        """Append `value` through the current leader; False when no node may append."""
        leader = self.leader()
        if leader is None:
            return False

        def done(base_offset: int | None, why: str | None) -> None:
            if base_offset is None:
                self.failed_appends += 1
            else:
                self.acknowledged.append((base_offset, record_hash(value)))

        return leader.append([value], done) is not None

    def send(self, node_id: int, api_key: int, api_version: int, body: object, timeout_ms: int = 5_000) -> list[OutboundResult]:
        """Send one request from the client host to a node; the list gets the answer."""
        answers: list[OutboundResult] = []
        self._client.send(self.voters.voters[node_id], api_key, api_version, body, answers.append, timeout_ms)
        return answers

    def call(self, node_id: int, api_key: int, api_version: int, body: object) -> object:
        """Send and run until answered; the response body."""
        answers = self.send(node_id, api_key, api_version, body)
        self.run_until(lambda: bool(answers), 5_000, step_ms=0.5, what=f"an answer to API {api_key} from node {node_id}")
        assert answers[0].ok, answers[0].error
        return answers[0].body

    # ---- faults -------------------------------------------------------------------------------

    def pause(self, node_id: int) -> None:
        self.network.pause(quorum_host(node_id))

    def resume(self, node_id: int) -> None:
        self.network.resume(quorum_host(node_id))

    def isolate(self, groups: Iterable[Iterable[int]]) -> None:
        """Partition the nodes into `groups` (replacing any partition before); a node not
        named keeps talking to everyone."""
        self.network.heal()
        self.network.isolate([[quorum_host(n) for n in group] for group in groups])

    def block(self, from_node: int, to_node: int) -> None:
        self.network.block(quorum_host(from_node), quorum_host(to_node))

    def heal(self) -> None:
        self.network.heal()

    def set_link_fault(self, from_node: int, to_node: int, fault: LinkFault, tag: str = "") -> None:
        """`fault` on messages from `from_node` to `to_node` (one direction)."""
        self.network.set_link_fault(quorum_host(from_node), quorum_host(to_node), fault, tag)

    def set_node_fault(self, node_id: int, fault: LinkFault, tag: str = "") -> None:
        self.network.set_node_fault(quorum_host(node_id), fault, tag)

    def clear_link_faults(self) -> None:
        self.network.clear_link_faults(None)

    # ---- time ---------------------------------------------------------------------------------

    def run_for(self, duration_ms: float) -> None:
        self.scheduler.advance(duration_ms)

    def run_until(self, predicate: Callable[[], bool], timeout_ms: float = 30_000, step_ms: float = 5, what: str = "condition") -> float:
        waited = 0.0
        while not predicate():
            if waited >= timeout_ms:
                raise AssertionError(f"{what} not reached within {timeout_ms:.0f} simulated ms (seed {self.seed})")
            self.scheduler.advance(step_ms)
            waited += step_ms
        return waited

    # ---- checks -------------------------------------------------------------------------------

    def views(self) -> list[NodeView]:
        """Every node as the checks see it: its log on disk (a dead node's as it was left),
        its high watermark, what it committed over the run and its role history."""
        out = []
        for node_id, slot in sorted(self._slots.items()):
            delivered = list(slot.delivered) + (list(slot.machine.delivered) if slot.machine is not None else [])
            transitions = [(t.epoch, t.role, t.leader_id) for t in slot.transitions]
            if slot.quorum is not None:
                log = slot.quorum.log
                out.append(NodeView(node_id, log.describe(), log.start_offset, slot.quorum.high_watermark, delivered, transitions))
            else:
                entries, start = _read_stopped(slot.disk)
                out.append(NodeView(node_id, entries, start, 0, delivered, transitions))
        return out

    def check(self) -> list[Violation]:
        return check_quorum(self.views(), len(self._slots), self.acknowledged)

    def epochs_led(self) -> dict[int, list[int]]:
        """epoch -> nodes that were leader in it (from the role histories)."""
        led: dict[int, list[int]] = {}
        for node_id, slot in self._slots.items():
            for t in slot.transitions:
                if t.role == Role.LEADER.value:
                    led.setdefault(t.epoch, []).append(node_id)
        return led


def _read_stopped(disk: MemoryDisk) -> tuple[list[tuple[int, int, str]], int]:
    """A stopped node's log and log start as a restart would recover them (read from a
    copy of its disk, so the node itself is untouched)."""
    from cluster.quorum.log import ReplicatedLog

    copy = MemoryDisk()
    _copy_tree(disk, copy, "/")
    replicated = ReplicatedLog(copy, DATA_DIR, 0)
    try:
        return replicated.describe(), replicated.start_offset
    finally:
        replicated.close()


def _copy_tree(source: MemoryDisk, target: MemoryDisk, path: str) -> None:
    for name in source.listdir(path):
        child = f"{path.rstrip('/')}/{name}"
        if source.exists(child) and _is_dir(source, child):
            target.makedirs(child)
            _copy_tree(source, target, child)
        else:
            target.write_atomic(child, source.read_all(child))


def _is_dir(disk: MemoryDisk, path: str) -> bool:
    try:
        disk.listdir(path)
        return True
    except FileNotFoundError:
        return False
