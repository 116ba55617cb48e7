"""DescribeConfigs: a topic's or this broker's configuration, with where each value comes from.

A topic's effective value is, as in Kafka, its own config (set at creation; source
DYNAMIC_TOPIC_CONFIG), else the broker's static setting of the synonym (`log.retention.hours`
for `retention.ms`; STATIC_BROKER_CONFIG), else the bundled cluster's default (DEFAULT_CONFIG).
The defaults are the values the cluster really runs with when nothing is set, which differ
from Kafka's in places (segment.bytes is 64 MiB): the answer describes this cluster, not Kafka.
Only configs the cluster acts on are listed, so a described value is never a dead letter.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.admin_api import forward_to_controller
from cluster.broker.env import Reply
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

NO_THROTTLE = datetime.timedelta(0)
LONG_MAX = str(2**63 - 1)


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class ConfigSource(IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    BOOLEAN = 1
    INT = 3
    LONG = 5


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    # Broker settings that supply the value when the topic has none, highest precedence
    # first, each with the factor that turns its unit into the topic config's unit.
    broker_keys: tuple[tuple[str, int], ...]
    default: str
    config_type: ConfigType


TOPIC_CONFIGS: tuple[TopicConfigDef, ...] = (
    TopicConfigDef("retention.ms", (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)), str(7 * 24 * 3_600_000), ConfigType.LONG),
    TopicConfigDef("retention.bytes", (("log.retention.bytes", 1),), "-1", ConfigType.LONG),
    TopicConfigDef("segment.bytes", (("log.segment.bytes", 1),), str(64 * 1024 * 1024), ConfigType.INT),
    TopicConfigDef("segment.ms", (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)), LONG_MAX, ConfigType.LONG),
    TopicConfigDef("flush.messages", (("log.flush.interval.messages", 1),), LONG_MAX, ConfigType.LONG),
    TopicConfigDef("flush.ms", (("log.flush.interval.ms", 1),), LONG_MAX, ConfigType.LONG),
    TopicConfigDef("index.interval.bytes", (("log.index.interval.bytes", 1),), "4096", ConfigType.INT),
    TopicConfigDef("min.insync.replicas", (("min.insync.replicas", 1),), "1", ConfigType.INT),
    TopicConfigDef("unclean.leader.election.enable", (("unclean.leader.election.enable", 1),), "false", ConfigType.BOOLEAN),
)


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str
    source: ConfigSource
    config_type: ConfigType | None
    read_only: bool
    synonyms: tuple[tuple[str, str, ConfigSource], ...]  # (name, value, source), effective first


def describe_topic_configs(topic_configs: Mapping[str, str], broker_properties: Mapping[str, str]) -> list[DescribedConfig]:
    """Every topic config the cluster acts on, with its effective value and source."""
    described = []
    for definition in TOPIC_CONFIGS:
        synonyms: list[tuple[str, str, ConfigSource]] = []
        if definition.name in topic_configs:
            synonyms.append((definition.name, topic_configs[definition.name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for key, scale in definition.broker_keys:
            if key in broker_properties:
                synonyms.append((key, broker_properties[key], ConfigSource.STATIC_BROKER_CONFIG))
        synonyms.append((definition.name, definition.default, ConfigSource.DEFAULT_CONFIG))
        name, raw, source = synonyms[0]
        value = raw if source is not ConfigSource.STATIC_BROKER_CONFIG else _scaled(raw, dict(definition.broker_keys)[name])
        described.append(DescribedConfig(definition.name, value, source, definition.config_type, False, tuple(synonyms)))
    return described


def describe_broker_configs(broker_properties: Mapping[str, str]) -> list[DescribedConfig]:
    """The broker's static settings as given to it; they cannot be altered while it runs."""
    return [
        DescribedConfig(key, value, ConfigSource.STATIC_BROKER_CONFIG, None, True, ((key, value, ConfigSource.STATIC_BROKER_CONFIG),))
        for key, value in sorted(broker_properties.items())
    ]


def _scaled(raw: str, scale: int) -> str:
    if scale == 1:
        return raw
    try:
        return str(int(raw.strip()) * scale)
    except ValueError:
        return raw  # the broker refused to start on such a value; describe it as given


def handle_describe_configs(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    result_cls = payload_class(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsResult")
    entry_cls = payload_class(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsResourceResult")
    synonym_cls = payload_class(ApiKey.DESCRIBE_CONFIGS, version, "DescribeConfigsSynonym")
    include_synonyms = request.body.include_synonyms
    results = []
    for resource in request.body.resources:
        error, message, configs = _describe(broker, resource.resource_type, resource.resource_name)
        wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
        entries = tuple(
            build(
                entry_cls,
                name=c.name,
                value=c.value,
                read_only=c.read_only,
                config_source=int(c.source),
                is_sensitive=False,
                synonyms=tuple(synonym_cls(name=n, value=v, source=int(s)) for n, v, s in c.synonyms) if include_synonyms else (),
                config_type=int(c.config_type) if c.config_type is not None else 0,
                documentation=None,
            )
            for c in configs
            if wanted is None or c.name in wanted
        )
        results.append(result_cls(error_code=error, error_message=message, resource_type=resource.resource_type, resource_name=resource.resource_name, configs=entries))
    body = build(response_class(ApiKey.DESCRIBE_CONFIGS, version), throttle_time=NO_THROTTLE, results=tuple(results))
    reply(broker.respond(request, body))


def _describe(broker: Broker, resource_type: int, name: str) -> tuple[ErrorCode, str | None, list[DescribedConfig]]:
    if resource_type == ResourceType.TOPIC:
        image = broker.topics.by_name(name)
        if image is None:
            return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist", []
        return ErrorCode.none, None, describe_topic_configs(image.configs, broker.config.properties)
    if resource_type == ResourceType.BROKER:
        if name not in ("", str(broker.config.broker_id)):
            return ErrorCode.invalid_request, f"broker {name!r} asked of broker {broker.config.broker_id}: send it to that broker", []
        # The empty name is the cluster-wide dynamic default, of which there is none.
        return ErrorCode.none, None, describe_broker_configs(broker.config.properties) if name else []
    return ErrorCode.invalid_request, f"resource type {resource_type} is not described here (topics 2 and brokers 4 are)", []


def handle_alter_configs(broker: Broker, request: Request, reply: Reply) -> None:
    """AlterConfigs and IncrementalAlterConfigs are decided by the controller (it validates,
    and commits the topic's new configs to the metadata log); the client gets its answer once
    committed. Brokers, this one included, apply the change from their metadata fetch, which
    the commit wakes: a DescribeConfigs sent at once to another broker may not show it yet."""

    def failed(error: ErrorCode, message: str | None) -> None:
        result_cls = payload_class(request.api_key, request.api_version, "AlterConfigsResourceResponse")
        results = tuple(result_cls(error_code=error, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name)
                        for r in request.body.resources)
        reply(broker.respond(request, build(response_class(request.api_key, request.api_version), throttle_time=NO_THROTTLE, responses=results)))

    forward_to_controller(broker, request, failed, lambda body: reply(broker.respond(request, body)))
