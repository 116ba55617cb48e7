"""What an AlterConfigs or IncrementalAlterConfigs asks of one resource, decided by the
controller: the topic's whole config set after the change (one TopicConfigRecord), or the
Kafka error refusing it. Brokers apply the record from the metadata log like any other, so a
change reaches every broker through its image and survives restarts of everyone.

Only the topic configs the cluster acts on can be altered (an unknown name is INVALID_CONFIG,
as Kafka refuses names it does not know); broker configs are static here.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.config_api import TOPIC_CONFIGS, ResourceType
from cluster.controller.placement import check_topic_configs
from cluster.metadata.image import MetadataImage
from cluster.metadata.records import TopicConfigRecord

ALTERABLE_TOPIC_CONFIGS = frozenset(d.name for d in TOPIC_CONFIGS)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def plan_alter_configs(image: MetadataImage, resource: Any, incremental: bool) -> tuple[ErrorCode, str | None, TopicConfigRecord | None]:
    """`resource` is one AlterConfigsResource of either request. AlterConfigs replaces the
    topic's configs with those given (Kafka's legacy semantics); the incremental form sets or
    deletes single keys."""
    if resource.resource_type == ResourceType.BROKER:
        return ErrorCode.invalid_request, "broker configs are static in the bundled cluster: set them at start", None
    if resource.resource_type != ResourceType.TOPIC:
        return ErrorCode.invalid_request, f"resource type {resource.resource_type} cannot be altered (topics are type 2)", None
    topic = image.topic(resource.resource_name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist", None
    configs = dict(topic.configs) if incremental else {}
    for entry in resource.configs:
        if entry.name not in ALTERABLE_TOPIC_CONFIGS:
            return ErrorCode.invalid_config, f"unknown topic config {entry.name!r} (alterable: {', '.join(sorted(ALTERABLE_TOPIC_CONFIGS))})", None
        operation = entry.config_operation if incremental else SET
        if operation == SET:
            if entry.value is None:
                return ErrorCode.invalid_config, f"{entry.name}: a null value cannot be set", None
            configs[entry.name] = entry.value
        elif operation == DELETE:
            configs.pop(entry.name, None)
        elif operation in (APPEND, SUBTRACT):
            return ErrorCode.invalid_config, f"{entry.name} is not a list: APPEND and SUBTRACT do not apply", None
        else:
            return ErrorCode.invalid_request, f"{entry.name}: unknown config operation {operation}", None
    problem = check_topic_configs(configs)
    if problem is not None:
        return ErrorCode.invalid_config, f"topic {topic.name!r}: {problem}", None
    return ErrorCode.none, None, TopicConfigRecord(str(topic.topic_id), configs)
