"""The broker's ControllerClient and ProducerIdAllocator against the real controller core,
over the virtual network (real frames), on virtual time: registration, unfencing,
metadata pulled and applied in order, forwarded requests, controlled shutdown, and what a
controller restart or a cut link does to them."""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from cluster.broker.controller_client import AlterPartitionResult, ControllerClient
from cluster.broker.env import Endpoint, OutboundResult
from cluster.broker.producer_ids import ProducerIdAllocator
from cluster.config import BrokerConfig
from cluster.controller.config import ControllerConfig
from cluster.controller.core import Controller
from cluster.controller.quorum_node import quorum_versions, raft_factory
from cluster.metadata.image import MetadataDelta, MetadataImage
from cluster.protocol.codec import build, request_class
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.sim.network import NodeScheduler, SimNode, VirtualNetwork, VirtualOutbound
from cluster.storage.disk import MemoryDisk
from tests.cluster.controller.driver import req

CONTROLLER = Endpoint(1000, "127.0.0.9", 9093)
PROPERTIES = {
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
    "controller.quorum.request.timeout.ms": "1000",
}


class Node:
    """One broker's controller client and what its `on_metadata` saw."""

    def __init__(self, world: World, broker_id: int) -> None:
        host = f"127.0.0.{10 + broker_id}"
        self.world = world
        self.config = BrokerConfig.from_properties(broker_id, host, 9092, f"/broker-{broker_id}", PROPERTIES)
        self.scheduler = NodeScheduler(world.scheduler, world.network, host)
        self.outbound = VirtualOutbound(world.network, host)
        self.deltas: list[MetadataDelta] = []
        self.offsets_seen: list[int] = []
        self.client = ControllerClient(self.config, world.clock, self.scheduler, self.outbound, CONTROLLER, self._on_metadata,
                                       random.Random(broker_id))
        self.client.start()

    def _on_metadata(self, image: MetadataImage, delta: MetadataDelta) -> None:
        self.deltas.append(delta)
        self.offsets_seen.append(image.next_offset)

    @property
    def usable(self) -> bool:
        registration = self.client.image.brokers.get(self.config.broker_id)
        return self.client.registered and registration is not None and registration.broker_epoch == self.client.broker_epoch and registration.usable

    def stop(self) -> None:
        self.client.stop()
        self.scheduler.halt()
        self.outbound.dead = True


class World:
    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.scheduler = VirtualScheduler(self.clock)
        self.network = VirtualNetwork(self.scheduler, random.Random(3))
        self.disk = MemoryDisk()
        self.seed = 11
        self.controller: Controller | None = None
        self._controller_scheduler: NodeScheduler | None = None
        self.network.add_node(SimNode(CONTROLLER, self._handle, {**quorum_versions(), **Controller.versions}))
        self.start_controller()
        self.nodes: dict[int, Node] = {}

    def _handle(self, request, client, reply) -> None:
        assert self.controller is not None
        self.controller.handle(request, client, reply)

    def start_controller(self) -> None:
        self.network.revive(CONTROLLER.host)
        self._controller_scheduler = NodeScheduler(self.scheduler, self.network, CONTROLLER.host)
        config = ControllerConfig.from_properties(CONTROLLER.node_id, CONTROLLER.host, CONTROLLER.port, "/controller", PROPERTIES)
        rng = random.Random(self.seed)
        factory = raft_factory(config, self.disk, self.clock, self._controller_scheduler, random.Random(rng.getrandbits(64)),
                               self.network.outbound_for(CONTROLLER.host))
        self.controller = Controller(config, self.disk, self.clock, self._controller_scheduler, rng, factory, quorum_versions())
        self.controller.start()

    def crash_controller(self) -> None:
        assert self._controller_scheduler is not None
        self._controller_scheduler.halt()
        self.network.crash(CONTROLLER.host)
        self.disk.crash()
        self.controller = None
        self.seed += 1

    def start_broker(self, broker_id: int) -> Node:
        node = self.nodes[broker_id] = Node(self, broker_id)
        return node

    def run_until(self, predicate: Callable[[], bool], limit_ms: float, what: str) -> None:
        waited = 0
        while not predicate():
            if waited >= limit_ms:
                raise AssertionError(f"{what}: not reached within {limit_ms} virtual ms")
            self.scheduler.advance(5)
            waited += 5

    def run_for(self, duration_ms: float) -> None:
        self.scheduler.advance(duration_ms)

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()
        if self.controller is not None:
            self.controller.shutdown()


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    try:
        yield w
    finally:
        w.close()


def start_all(world: World, broker_ids: list[int]) -> list[Node]:
    nodes = [world.start_broker(b) for b in broker_ids]
    world.run_until(lambda: all(n.usable for n in nodes), 5000, "brokers registered and unfenced")
    return nodes


def create_topic(node: Node, name: str, partitions: int, replication_factor: int, version: int = 5) -> OutboundResult:
    topic = req(ApiKey.CREATE_TOPICS, version, "CreatableTopic")
    body = build(request_class(ApiKey.CREATE_TOPICS, version), timeout=datetime.timedelta(seconds=5), validate_only=False,
                 topics=(topic(name=name, num_partitions=partitions, replication_factor=replication_factor, assignments=(), configs=()),))
    results: list[OutboundResult] = []
    node.client.create_topics(body, version, results.append)
    node.world.run_until(lambda: bool(results), 5000, "CreateTopics answered")
    return results[0]


def test_register_unfence_and_follow_the_log(world: World) -> None:
    a, b = start_all(world, [0, 1])
    assert a.client.broker_epoch >= 0 and b.client.broker_epoch > a.client.broker_epoch
    assert not a.client.fenced
    result = create_topic(a, "t", partitions=3, replication_factor=2)
    assert result.ok and result.body.topics[0].error_code == ErrorCode.none
    end = world.controller.committed_image.next_offset
    world.run_until(lambda: a.client.image.next_offset == end and b.client.image.next_offset == end, 2000, "metadata caught up")
    # Both brokers applied the same records in the same order: their images equal the controller's.
    for node in (a, b):
        assert node.client.image.brokers == world.controller.image.brokers
        assert {n: dict(t.partitions) for n, t in node.client.image.topics_by_name.items()} == \
               {n: dict(t.partitions) for n, t in world.controller.image.topics_by_name.items()}
        assert node.offsets_seen == sorted(node.offsets_seen)
        created = [t.name for d in node.deltas for t in d.created_topics]
        assert created == ["t"]
        assert sum(len(d.partitions) for d in node.deltas) == 3


def test_alter_partition_success_and_refusal(world: World) -> None:
    a, b = start_all(world, [0, 1])
    create_topic(a, "t", partitions=1, replication_factor=2)
    world.run_until(lambda: a.client.image.partition("t", 0) is not None, 2000, "topic in broker 0's image")
    state = a.client.image.partition("t", 0)
    leader = world.nodes[state.leader]
    follower = next(n for n in (a, b) if n is not leader)
    results: list[AlterPartitionResult] = []
    leader.client.alter_partition(state, [(leader.config.broker_id, leader.client.broker_epoch)], False, results.append)
    world.run_until(lambda: bool(results), 2000, "AlterPartition answered")
    assert results[0].error == ErrorCode.none
    assert results[0].state.isr == (leader.config.broker_id,) and results[0].state.partition_epoch == state.partition_epoch + 1
    # The same proposal from the old state again: the controller's error reaches the caller.
    leader.client.alter_partition(state, [(leader.config.broker_id, leader.client.broker_epoch)], False, results.append)
    world.run_until(lambda: len(results) == 2, 2000, "second AlterPartition answered")
    assert results[1] == AlterPartitionResult(ErrorCode.invalid_update_version, None)
    follower.client.alter_partition(results[0].state, [(follower.config.broker_id, follower.client.broker_epoch)], False, results.append)
    world.run_until(lambda: len(results) == 3, 2000, "third AlterPartition answered")
    assert results[2].error == ErrorCode.not_leader_or_follower


def test_producer_id_blocks_are_disjoint_across_brokers_and_controller_restarts(world: World) -> None:
    a, b = start_all(world, [0, 1])
    allocators = {0: ProducerIdAllocator(a.client), 1: ProducerIdAllocator(b.client)}
    ids: list[int] = []

    def take(broker_id: int, count: int) -> None:
        got: list[tuple[int | None, str | None]] = []
        for _ in range(count):
            allocators[broker_id].allocate(lambda pid, error: got.append((pid, error)))
        world.run_until(lambda: len(got) == count, 5000, "producer ids allocated")
        assert all(error is None for _, error in got), got
        ids.extend(pid for pid, _ in got)

    take(0, 1500)  # two blocks
    take(1, 10)
    world.crash_controller()
    world.start_controller()
    take(0, 600)  # the rest of its block, then a block from the restarted controller
    take(1, 1000)
    assert len(ids) == len(set(ids)) == 3110


def test_allocation_fails_clearly_when_the_controller_is_unreachable(world: World) -> None:
    [a] = start_all(world, [0])
    world.crash_controller()
    got: list[tuple[int | None, str | None]] = []
    ProducerIdAllocator(a.client).allocate(lambda pid, error: got.append((pid, error)))
    world.run_until(lambda: bool(got), 5000, "allocation answered")
    assert got[0][0] is None and got[0][1]


def test_controlled_shutdown_moves_leadership_before_on_done(world: World) -> None:
    a, b = start_all(world, [0, 1])
    create_topic(a, "t", partitions=4, replication_factor=2)
    world.run_until(lambda: a.client.image.topic("t") is not None, 2000, "topic in broker 0's image")
    assert any(p.leader == 0 for p in world.controller.image.topic("t").partitions.values())
    done: list[bool] = []
    a.client.begin_controlled_shutdown(lambda: done.append(True))
    world.run_until(lambda: bool(done), 3000, "controlled shutdown confirmed")
    partitions = world.controller.image.topic("t").partitions.values()
    assert all(p.leader == 1 and p.isr == (1,) for p in partitions)
    world.run_until(lambda: all(p.leader == 1 for p in b.client.image.topic("t").partitions.values()), 2000, "broker 1 sees it")


def test_controller_crash_and_restart_keeps_registrations_and_epochs(world: World) -> None:
    a, b = start_all(world, [0, 1])
    epochs = (a.client.broker_epoch, b.client.broker_epoch)
    create_topic(a, "t", partitions=2, replication_factor=2)
    world.crash_controller()
    world.run_for(500)
    world.start_controller()
    # The restarted controller gives live brokers a fresh session; their heartbeats (same
    # epochs) keep them unfenced, and the metadata long poll resumes where it was.
    world.run_for(3000)
    assert (a.client.broker_epoch, b.client.broker_epoch) == epochs
    assert all(reg.usable for reg in world.controller.image.brokers.values())
    result = create_topic(b, "u", partitions=1, replication_factor=2)
    assert result.ok and result.body.topics[0].error_code == ErrorCode.none
    world.run_until(lambda: a.client.image.topic("u") is not None, 2000, "new topic reached broker 0")
    assert a.client.image.next_offset == world.controller.committed_image.next_offset


def test_broker_cut_off_is_fenced_then_unfenced_with_the_same_epoch(world: World) -> None:
    a, b = start_all(world, [0, 1])
    epoch = a.client.broker_epoch
    world.network.isolate([[a.config.host], [b.config.host, CONTROLLER.host]])
    world.run_until(lambda: world.controller.image.brokers[0].fenced, 3000, "broker 0 fenced")
    world.network.heal()
    world.run_until(lambda: a.usable, 5000, "broker 0 unfenced again")
    assert a.client.broker_epoch == epoch


def test_forwarded_request_times_out_when_the_controller_is_gone(world: World) -> None:
    [a] = start_all(world, [0])
    world.network.isolate([[a.config.host], [CONTROLLER.host]])
    result = create_topic(a, "t", partitions=1, replication_factor=1)
    assert not result.ok and result.error
    state_results: list[AlterPartitionResult] = []
    world.network.heal()
    create_topic(a, "t", partitions=1, replication_factor=1)
    world.run_until(lambda: a.client.image.partition("t", 0) is not None, 2000, "topic in broker 0's image")
    world.network.isolate([[a.config.host], [CONTROLLER.host]])
    a.client.alter_partition(a.client.image.partition("t", 0), [(0, a.client.broker_epoch)], False, state_results.append)
    world.run_until(lambda: bool(state_results), 3000, "AlterPartition gave up")
    # Unanswered: the controller may have applied it, so the replica manager asks again.
    assert state_results[0] == AlterPartitionResult(ErrorCode.request_timed_out, None, unanswered=True)
