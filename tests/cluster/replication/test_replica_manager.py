"""The ReplicaManager acting on metadata records by itself (a real ControllerClient that has
not connected, so no fetcher sends): it creates, re-roles and deletes replicas exactly as the
partition records say."""

from __future__ import annotations

import random
import uuid

from cluster.broker.controller_client import ControllerClient
from cluster.broker.env import Endpoint
from cluster.broker.partition import TopicPartition
from cluster.broker.replica_manager import ReplicaManager, RoleChanges
from cluster.config import BrokerConfig
from cluster.metadata.image import MetadataDelta, MetadataImage
from cluster.metadata.records import PartitionRecord, RemoveTopicRecord, TopicRecord
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.sim.network import VirtualNetwork
from cluster.storage.config import LogConfig
from cluster.storage.disk import MemoryDisk

TOPIC_ID = uuid.UUID(int=42)
TP = TopicPartition("t", 0)
DIRECTORY = "/data/t-0"


class Node:
    def __init__(self) -> None:
        clock = VirtualClock()
        scheduler = VirtualScheduler(clock)
        outbound = VirtualNetwork(scheduler, random.Random(1)).outbound_for("127.0.0.10")
        config = BrokerConfig.from_properties(0, "127.0.0.10", 9092, "/data", {"controller.quorum.voters": "1000@127.0.0.9:9093"})
        self.controller = ControllerClient(config, clock, scheduler, outbound, Endpoint(1000, "127.0.0.9", 9093), lambda image, delta: None,
                                           random.Random(2))
        self.disk = MemoryDisk()
        self.manager = ReplicaManager(config, self.disk, clock, scheduler, outbound, self.controller, lambda topic: LogConfig())
        self.manager.start()
        self.offset = 0

    def apply(self, *records: object) -> RoleChanges:
        image: MetadataImage = self.controller.image
        delta = MetadataDelta()
        for record in records:
            delta.merge(image.apply(record, self.offset))
            self.offset += 1
        return self.manager.apply_metadata(image, delta)


def partition(replicas: tuple[int, ...], leader: int, leader_epoch: int, partition_epoch: int) -> PartitionRecord:
    return PartitionRecord(str(TOPIC_ID), 0, replicas, replicas, leader, leader_epoch, partition_epoch)


def test_replicas_follow_the_partition_records() -> None:
    node = Node()
    try:
        changes = node.apply(TopicRecord("t", str(TOPIC_ID)), partition((0, 1), leader=0, leader_epoch=0, partition_epoch=0))
        assert changes.became_leader == [TP] and node.disk.exists(DIRECTORY)
        assert node.apply(partition((0, 1), leader=1, leader_epoch=1, partition_epoch=1)).became_follower == [TP]
        assert node.apply(partition((0, 1), leader=1, leader_epoch=1, partition_epoch=2)) == RoleChanges()  # ISR-only change
        changes = node.apply(partition((1, 2), leader=1, leader_epoch=2, partition_epoch=3))
        assert changes.removed == [TP], "a replica reassigned away stayed"
        assert node.manager.partition(TP) is None and not node.disk.exists(DIRECTORY)
    finally:
        node.manager.shutdown()


def test_deleting_the_topic_deletes_the_replica() -> None:
    node = Node()
    try:
        node.apply(TopicRecord("t", str(TOPIC_ID)), partition((0, 1), leader=1, leader_epoch=0, partition_epoch=0))
        assert node.manager.partition(TP) is not None
        assert node.apply(RemoveTopicRecord(str(TOPIC_ID))).removed == [TP]
        assert node.manager.partition(TP) is None and not node.disk.exists(DIRECTORY)
    finally:
        node.manager.shutdown()
