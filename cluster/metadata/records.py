"""The metadata records, as in KRaft's `__cluster_metadata` log: each is a fact the controller
decided, appended durably before anyone acts on it, and applied by every broker in log order.

A record is stored as the value of one Kafka record (JSON, tagged by `type`); one controller
decision that changes several things (a topic and its partitions) is one record batch, so it
is applied atomically. Every record is a full statement, not a diff: a `PartitionRecord`
carries the partition's whole state after the change, which keeps replay trivial.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field

METADATA_TOPIC = "__cluster_metadata"
# KRaft's fixed topic id for the metadata log (Uuid.METADATA_TOPIC_ID = 1).
METADATA_TOPIC_ID = uuid.UUID(int=1)
NO_LEADER = -1


class MetadataRecordError(ValueError):
    """A metadata record that cannot be decoded (names the offset and what is wrong)."""


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker (re)registered. `broker_epoch` is the offset of this record in the metadata log,
    so epochs grow across restarts of the broker and of the controller. A new registration
    starts fenced: the broker is unfenced once it has caught up with the log."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    fenced: bool = True


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """Fencing, unfencing, or the start of a controlled shutdown of the registration with
    `broker_epoch` (a change for an older epoch is ignored)."""

    broker_id: int
    broker_epoch: int
    fenced: bool
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: str  # uuid text
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """The whole state of one partition after a change. Every leader change bumps
    `leader_epoch`; every change at all (leader or ISR) bumps `partition_epoch`.
    `leader_recovering` is set by an unclean election (KIP-704): the new leader's log may
    lack committed records, and it must not grow the ISR until it has recovered. `elr` are
    the eligible leader replicas (KIP-966): replicas that left the ISR while it was below
    min.insync.replicas, so they hold every committed record and may lead when the ISR is empty;
    `last_known_leader` the leader when the ISR emptied, elected (recovering) once ISR and ELR
    are both empty (KIP-966's last known leader; -1: none)."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovering: bool = False
    elr: tuple[int, ...] = ()
    last_known_leader: int = -1


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: str


@dataclass(frozen=True, slots=True)
class TopicConfigRecord:
    """The whole set of a topic's own configs after an AlterConfigs or IncrementalAlterConfigs
    (a full statement like every record: replay needs no earlier config record)."""

    topic_id: str
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """Producer ids below `next_producer_id` have been handed out (KIP-730): the controller
    allocates disjoint blocks to brokers, and this survives its restart."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


MetadataRecord = (RegisterBrokerRecord | BrokerRegistrationChangeRecord | TopicRecord | PartitionRecord | RemoveTopicRecord | ProducerIdsRecord
                  | TopicConfigRecord)

_TYPES: dict[str, type] = {
    "register_broker": RegisterBrokerRecord,
    "broker_registration_change": BrokerRegistrationChangeRecord,
    "topic": TopicRecord,
    "partition": PartitionRecord,
    "remove_topic": RemoveTopicRecord,
    "producer_ids": ProducerIdsRecord,
    "topic_configs": TopicConfigRecord,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}
_TUPLE_FIELDS = ("replicas", "isr", "elr")


def encode_record(record: MetadataRecord) -> bytes:
    document = asdict(record)
    document["type"] = _NAMES[type(record)]
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode_record(value: bytes | memoryview | None, where: str = "") -> MetadataRecord:
    """Decode one record value; `where` (e.g. "offset 17") goes into the error message."""
    if value is None:
        raise MetadataRecordError(f"metadata record {where}: no value")
    try:
        document = json.loads(bytes(value))
        cls = _TYPES[document.pop("type")]
        for name in _TUPLE_FIELDS:
            if name in document:
                document[name] = tuple(int(b) for b in document[name])
        return cls(**document)  # type: ignore[no-any-return]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise MetadataRecordError(f"metadata record {where}: {error!r}") from None
