"""The metadata image as bytes: the controllers' snapshot of their committed image (KIP-630's
role), so a quorum can move its log start past it and a node far behind (a standby
controller, or a broker fetching it with FetchSnapshot) loads it instead of replaying the log
from offset 0.

The form is ours: canonical JSON (sorted keys, no spaces) of everything `MetadataImage`
holds, so the same image always gives the same bytes and two nodes' snapshots compare
byte for byte. A snapshot that cannot be read raises SnapshotError naming what is wrong.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from cluster.metadata.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage

FORMAT_VERSION = 1


class SnapshotError(ValueError):
    """Snapshot bytes that are not a metadata image of this format."""


def encode_image(image: MetadataImage) -> bytes:
    brokers = [[b.broker_id, b.broker_epoch, b.incarnation_id, b.host, b.port, b.fenced, b.in_controlled_shutdown]
               for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)]
    topics = []
    for topic in sorted(image.topics_by_name.values(), key=lambda t: t.name):
        # The ELR and last known leader (KIP-966) go last and only when set, so an image
        # without them encodes as before they existed.
        partitions = [[p.partition, list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch, p.leader_recovering]
                      + ([list(p.elr), p.last_known_leader] if p.elr or p.last_known_leader >= 0 else [])
                      for _, p in sorted(topic.partitions.items())]
        topics.append({"name": topic.name, "id": str(topic.topic_id), "configs": dict(topic.configs), "partitions": partitions})
    document = {"version": FORMAT_VERSION, "next_offset": image.next_offset, "next_producer_id": image.next_producer_id,
                "brokers": brokers, "topics": topics}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode_image(data: bytes | memoryview) -> MetadataImage:
    try:
        document = json.loads(bytes(data))
    except ValueError as error:
        raise SnapshotError(f"metadata snapshot is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        version = document.get("version") if isinstance(document, dict) else None
        raise SnapshotError(f"metadata snapshot format {version!r} is not {FORMAT_VERSION}")
    try:
        return _build(document)
    except (KeyError, TypeError, ValueError) as error:
        raise SnapshotError(f"metadata snapshot is damaged: {error!r}") from None


def _build(document: dict[str, Any]) -> MetadataImage:
    image = MetadataImage()
    image.next_offset = int(document["next_offset"])
    image.next_producer_id = int(document["next_producer_id"])
    for broker_id, epoch, incarnation, host, port, fenced, shutting_down in document["brokers"]:
        image.brokers[int(broker_id)] = BrokerRegistration(int(broker_id), int(epoch), str(incarnation), str(host), int(port),
                                                           bool(fenced), bool(shutting_down))
    for entry in document["topics"]:
        topic = TopicImage(str(entry["name"]), uuid.UUID(entry["id"]), {str(k): str(v) for k, v in entry["configs"].items()})
        for fields in entry["partitions"]:
            index, replicas, isr, leader, leader_epoch, partition_epoch, recovering, *rest = fields
            if len(rest) not in (0, 2):
                raise ValueError(f"partition entry {fields!r} has {len(fields)} fields, not 7 or 9")
            elr = tuple(int(b) for b in rest[0]) if rest else ()
            last_known_leader = int(rest[1]) if rest else -1
            topic.partitions[int(index)] = PartitionState(topic.name, topic.topic_id, int(index), tuple(int(b) for b in replicas),
                                                          tuple(int(b) for b in isr), int(leader), int(leader_epoch),
                                                          int(partition_epoch), bool(recovering), elr, last_known_leader)
        image.topics_by_name[topic.name] = topic
        image.topics_by_id[topic.topic_id] = topic
    return image


def copy_image(image: MetadataImage) -> MetadataImage:
    """An independent copy (the active controller's working image starts as one of the
    committed image)."""
    return decode_image(encode_image(image))
