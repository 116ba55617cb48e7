"""The topic registry: names, topic ids, partition counts, per-partition leader epochs and
topic configs, persisted in one JSON file through the injected Disk.

Until the controller exists (next issue) this broker is the sole owner of its metadata.
Every start bumps each partition's leader epoch, as a KRaft controller does when the only
replica comes back, so clients see epochs that only grow and validate their positions.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from cluster.broker.env import Rng
from cluster.storage.disk import Disk

METADATA_FILE = "topics.json"
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class InvalidTopicError(ValueError):
    """A topic name Kafka would refuse (INVALID_TOPIC_EXCEPTION)."""


def check_topic_name(name: str | None) -> str:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-]")
    return name


def new_topic_id(rng: Rng) -> uuid.UUID:
    # Kafka never hands out the zero UUID or the sentinel ids; 122 random bits make them moot.
    return uuid.UUID(int=rng.getrandbits(128), version=4)


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    leader_epochs: list[int]  # per partition
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.leader_epochs)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    def __init__(self, disk: Disk, data_dir: str) -> None:
        self._disk = disk
        self._path = f"{data_dir}/{METADATA_FILE}"
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}

    def load(self) -> None:
        if not self._disk.exists(self._path):
            return
        raw = self._disk.read_all(self._path)
        try:
            document = json.loads(raw)
            for entry in document["topics"]:
                self._add(TopicInfo(entry["name"], uuid.UUID(entry["topic_id"]), list(entry["leader_epochs"]), dict(entry["configs"])))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{self._path}: corrupt topic metadata ({error})") from None

    def save(self) -> None:
        document = {
            "topics": [
                {"name": t.name, "topic_id": str(t.topic_id), "leader_epochs": t.leader_epochs, "configs": t.configs}
                for t in sorted(self._by_name.values(), key=lambda t: t.name)
            ]
        }
        self._disk.write_atomic(self._path, json.dumps(document, indent=1).encode())

    def _add(self, info: TopicInfo) -> None:
        self._by_name[info.name] = info
        self._by_id[info.topic_id] = info

    def create(self, name: str, num_partitions: int, configs: dict[str, str], rng: Rng) -> TopicInfo:
        check_topic_name(name)
        if name in self._by_name:
            raise KeyError(name)
        topic_id = new_topic_id(rng)
        while topic_id in self._by_id:
            topic_id = new_topic_id(rng)
        info = TopicInfo(name, topic_id, [0] * num_partitions, dict(configs))
        self._add(info)
        self.save()
        return info

    def delete(self, name: str) -> TopicInfo:
        info = self._by_name.pop(name)
        del self._by_id[info.topic_id]
        self.save()
        return info

    def bump_all_epochs(self) -> None:
        for info in self._by_name.values():
            info.leader_epochs = [epoch + 1 for epoch in info.leader_epochs]
        self.save()

    def by_name(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[TopicInfo]:
        return sorted(self._by_name.values(), key=lambda t: t.name)
