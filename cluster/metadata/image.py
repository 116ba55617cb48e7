"""The metadata image: what a node knows after applying the metadata log up to some offset.

Brokers answer Metadata requests from it and decide their role for every partition from it;
the controller keeps the same image of its own log to make decisions. Applying is
deterministic and returns what changed, so a broker acts only on the partitions a record
touched.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from cluster.metadata.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicConfigRecord,
    TopicRecord,
)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    fenced: bool
    in_controlled_shutdown: bool = False

    @property
    def usable(self) -> bool:
        """May lead and be in an ISR: registered, unfenced and not shutting down."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovering: bool = False
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966), see PartitionRecord
    last_known_leader: int = NO_LEADER  # see PartitionRecord

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


# Kafka's Topic.isInternal: only these two; other "__"-prefixed names are ordinary user topics.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: dict[int, PartitionState] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(slots=True)
class MetadataDelta:
    """What one applied record changed."""

    partitions: list[PartitionState] = field(default_factory=list)
    removed_topics: list[TopicImage] = field(default_factory=list)
    brokers: list[BrokerRegistration] = field(default_factory=list)
    created_topics: list[TopicImage] = field(default_factory=list)
    reconfigured_topics: list[TopicImage] = field(default_factory=list)
    # The whole image was replaced (a loaded snapshot or a rebuild): records it skipped, such
    # as a topic's removal, left no trace in this delta.
    replaced: bool = False

    def merge(self, other: MetadataDelta) -> None:
        self.replaced |= other.replaced
        self.partitions.extend(other.partitions)
        self.removed_topics.extend(other.removed_topics)
        self.brokers.extend(other.brokers)
        self.created_topics.extend(other.created_topics)
        self.reconfigured_topics.extend(other.reconfigured_topics)


class MetadataImage:
    def __init__(self) -> None:
        self.next_offset = 0  # offset of the next record to apply
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics_by_name: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.next_producer_id = 0

    # ---- applying --------------------------------------------------------------------

    def apply(self, record: MetadataRecord, offset: int) -> MetadataDelta:
        """Apply the record stored at `offset` (offsets must be applied in order)."""
        if offset < self.next_offset:
            raise ValueError(f"metadata record at offset {offset} already applied (next is {self.next_offset})")
        self.next_offset = offset + 1
        delta = MetadataDelta()
        if isinstance(record, RegisterBrokerRecord):
            registration = BrokerRegistration(record.broker_id, record.broker_epoch, record.incarnation_id, record.host, record.port, record.fenced)
            self.brokers[record.broker_id] = registration
            delta.brokers.append(registration)
        elif isinstance(record, BrokerRegistrationChangeRecord):
            current = self.brokers.get(record.broker_id)
            if current is not None and current.broker_epoch == record.broker_epoch:
                changed = BrokerRegistration(current.broker_id, current.broker_epoch, current.incarnation_id, current.host, current.port,
                                             record.fenced, record.in_controlled_shutdown)
                self.brokers[record.broker_id] = changed
                delta.brokers.append(changed)
        elif isinstance(record, TopicRecord):
            topic = TopicImage(record.name, uuid.UUID(record.topic_id), dict(record.configs))
            self.topics_by_name[topic.name] = topic
            self.topics_by_id[topic.topic_id] = topic
            delta.created_topics.append(topic)
        elif isinstance(record, PartitionRecord):
            topic = self.topics_by_id.get(uuid.UUID(record.topic_id))
            if topic is None:
                raise ValueError(f"metadata record at offset {offset}: partition of unknown topic {record.topic_id}")
            state = PartitionState(topic.name, topic.topic_id, record.partition, tuple(record.replicas), tuple(record.isr), record.leader,
                                   record.leader_epoch, record.partition_epoch, record.leader_recovering, tuple(record.elr),
                                   record.last_known_leader)
            topic.partitions[record.partition] = state
            delta.partitions.append(state)
        elif isinstance(record, RemoveTopicRecord):
            removed = self.topics_by_id.pop(uuid.UUID(record.topic_id), None)
            if removed is not None:
                del self.topics_by_name[removed.name]
                delta.removed_topics.append(removed)
        elif isinstance(record, TopicConfigRecord):
            reconfigured = self.topics_by_id.get(uuid.UUID(record.topic_id))
            if reconfigured is not None:  # a config change of a topic deleted since is moot
                reconfigured.configs = dict(record.configs)
                delta.reconfigured_topics.append(reconfigured)
        elif isinstance(record, ProducerIdsRecord):
            self.next_producer_id = max(self.next_producer_id, record.next_producer_id)
        else:
            raise TypeError(f"not a metadata record: {record!r}")
        return delta

    # ---- queries ---------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def partition(self, topic: str, index: int) -> PartitionState | None:
        image = self.topics_by_name.get(topic)
        return None if image is None else image.partitions.get(index)

    def usable_brokers(self) -> list[BrokerRegistration]:
        return sorted((b for b in self.brokers.values() if b.usable), key=lambda b: b.broker_id)

    def partitions_of(self, broker_id: int) -> list[PartitionState]:
        """Every partition with a replica on `broker_id`."""
        return [p for t in self.topics_by_name.values() for p in t.partitions.values() if broker_id in p.replicas]
