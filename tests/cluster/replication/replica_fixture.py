"""A single Partition on a real PartitionLog (MemoryDisk), driven by the PartitionStates the
controller would publish, for the leader's rules that need an exact log history."""

from __future__ import annotations

import uuid

from cluster.broker.partition import Partition, ReplicationSettings, TopicPartition
from cluster.metadata.image import PartitionState
from cluster.protocol.records import Record, build_batch
from cluster.storage.config import LogConfig
from cluster.storage.disk import MemoryDisk
from cluster.storage.log import PartitionLog

TOPIC_ID = uuid.UUID(int=7)
SECOND_MS = 1_000


class Replica:
    """Broker `broker_id`'s replica of t-0; `state()` moves it through leader epochs."""

    def __init__(self, broker_id: int, replicas: tuple[int, ...] = (1, 2, 3), min_isr: int = 1) -> None:
        self.replicas = replicas
        self.partition_epoch = 0
        self.partition = Partition(TopicPartition("t", 0), PartitionLog.open(MemoryDisk(), "/t-0", LogConfig(), now_ms=0),
                                   ReplicationSettings(broker_id=broker_id, min_insync_replicas=min_isr, replica_lag_time_max_ms=30_000))

    def state(self, leader: int, leader_epoch: int, isr: tuple[int, ...], now_ms: int = 0) -> None:
        self.partition_epoch += 1
        self.partition.apply_state(PartitionState("t", TOPIC_ID, 0, self.replicas, isr, leader, leader_epoch, self.partition_epoch), now_ms)

    def append(self, count: int) -> None:
        """`count` one-record batches as leader, in the current epoch."""
        for _ in range(count):
            self.partition.append_as_leader(build_batch([Record(None, b"v")], base_offset=0, timestamp_ms=0), now_ms=0)
