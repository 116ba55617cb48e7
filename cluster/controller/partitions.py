"""CreatePartitions decided by the controller: the records adding partitions to a topic, or
Kafka's error refusing it. New partitions are placed as at creation (or as the request
assigns them) and start with their first usable replica as leader and every usable replica
in the ISR, like a new topic's."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Rng
from cluster.controller.placement import assign_replicas
from cluster.metadata.image import MetadataImage
from cluster.metadata.records import NO_LEADER, PartitionRecord

MAX_PARTITIONS_PER_TOPIC = 10_000


def plan_create_partitions(image: MetadataImage, request_topic: Any, rng: Rng) -> tuple[ErrorCode, str | None, list[PartitionRecord]]:
    topic = image.topic(request_topic.name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {request_topic.name!r} does not exist", []
    current = topic.num_partitions
    wanted = int(request_topic.count)
    if wanted <= current:
        return ErrorCode.invalid_partitions, f"topic {topic.name!r} has {current} partitions: the new count must be larger, got {wanted}", []
    if wanted > MAX_PARTITIONS_PER_TOPIC:
        return ErrorCode.invalid_partitions, f"number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}, got {wanted}", []
    replication = len(topic.partitions[0].replicas) if topic.partitions else 1
    usable = [b.broker_id for b in image.usable_brokers()]
    added = wanted - current
    if request_topic.assignments is not None:
        replica_lists = [tuple(int(b) for b in a.broker_ids) for a in request_topic.assignments]
        if len(replica_lists) != added:
            return ErrorCode.invalid_replica_assignment, f"{len(replica_lists)} assignments given for {added} new partitions", []
        for replicas in replica_lists:
            unknown = [b for b in replicas if b not in image.brokers]
            if len(replicas) != replication or unknown or len(set(replicas)) != len(replicas):
                return (ErrorCode.invalid_replica_assignment,
                        f"assignment {list(replicas)} must name {replication} distinct known brokers (the topic's replication factor)", [])
    else:
        if replication > len(usable):
            return ErrorCode.invalid_replication_factor, f"replication factor {replication} exceeds the {len(usable)} available brokers", []
        replica_lists = assign_replicas(usable, added, replication, rng)
    records = []
    for offset, replicas in enumerate(replica_lists):
        isr = tuple(b for b in replicas if b in usable) or replicas
        leader = next((b for b in replicas if b in usable), NO_LEADER)
        records.append(PartitionRecord(str(topic.topic_id), current + offset, replicas, isr, leader, 0, 0))
    return ErrorCode.none, None, records
