"""What changed between two metadata images, as the delta applying records would have given.

A broker that replaces its image wholesale (it loaded a controller's snapshot, or rebuilt
its image after finding itself past the controller's committed log) hands its replica
manager this delta, so it acts on what the new image changed and nothing else: topics gone
(by id: a name deleted and created again is a removal then a creation), topics new,
configs changed, partitions whose state differs, broker registrations that differ.
"""

from __future__ import annotations

from cluster.metadata.image import MetadataDelta, MetadataImage


def diff_images(old: MetadataImage, new: MetadataImage) -> MetadataDelta:
    delta = MetadataDelta()
    for topic_id, topic in old.topics_by_id.items():
        if topic_id not in new.topics_by_id:
            delta.removed_topics.append(topic)
    for topic_id, topic in new.topics_by_id.items():
        before = old.topics_by_id.get(topic_id)
        if before is None:
            delta.created_topics.append(topic)
        elif before.configs != topic.configs:
            delta.reconfigured_topics.append(topic)
        for index, state in sorted(topic.partitions.items()):
            if before is None or before.partitions.get(index) != state:
                delta.partitions.append(state)
    for broker_id, registration in sorted(new.brokers.items()):
        if old.brokers.get(broker_id) != registration:
            delta.brokers.append(registration)
    return delta
