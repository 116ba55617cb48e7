"""Which `--cluster-config` settings a run can apply to its own topics, and under which name.

Against the bundled cluster every `--cluster-config` setting is a broker property, and the
topics inherit the topic-level ones from the brokers. An external cluster's brokers are not
the harness's to configure, so there only the settings Kafka also accepts per topic can take
effect: the workloads create their topics with them (CreateTopics' configs), under the topic
config's name (`log.flush.interval.messages` is `flush.messages` on a topic). Everything else
is a broker-only setting: it cannot be applied, and the run says so and never claims it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

# Kafka's topic-level configs (the "Topic-Level Configs" table of Kafka's configuration
# docs) that a user may type under their own name.
TOPIC_CONFIG_NAMES: frozenset[str] = frozenset({
    "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "index.interval.bytes", "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
})

# Broker properties that are the server default of a topic config: broker name -> (topic
# name, factor from the broker's unit to the topic's). Kafka lists each topic config's
# "Server Default Property".
BROKER_SYNONYMS: dict[str, tuple[str, int]] = {
    "log.cleanup.policy": ("cleanup.policy", 1),
    "log.cleaner.delete.retention.ms": ("delete.retention.ms", 1),
    "log.segment.delete.delay.ms": ("file.delete.delay.ms", 1),
    "log.flush.interval.messages": ("flush.messages", 1),
    "log.flush.interval.ms": ("flush.ms", 1),
    "log.index.interval.bytes": ("index.interval.bytes", 1),
    "log.cleaner.max.compaction.lag.ms": ("max.compaction.lag.ms", 1),
    "message.max.bytes": ("max.message.bytes", 1),
    "log.message.timestamp.type": ("message.timestamp.type", 1),
    "log.cleaner.min.cleanable.ratio": ("min.cleanable.dirty.ratio", 1),
    "log.cleaner.min.compaction.lag.ms": ("min.compaction.lag.ms", 1),
    "log.preallocate": ("preallocate", 1),
    "log.retention.bytes": ("retention.bytes", 1),
    "log.retention.ms": ("retention.ms", 1),
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.segment.bytes": ("segment.bytes", 1),
    "log.index.size.max.bytes": ("segment.index.bytes", 1),
    "log.roll.jitter.ms": ("segment.jitter.ms", 1),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3_600_000),
    "log.roll.ms": ("segment.ms", 1),
    "log.roll.hours": ("segment.ms", 3_600_000),
}
# Kafka gives the broker setting with the finer unit precedence (log.retention.ms over
# .minutes over .hours); a topic takes one value, so the finest one typed wins here too.
_PRECEDENCE = {"log.retention.ms": 0, "log.retention.minutes": 1, "log.retention.hours": 2,
               "log.roll.ms": 0, "log.roll.hours": 1, "log.roll.jitter.ms": 0, "log.roll.jitter.hours": 1}


@dataclass(frozen=True)
class TopicSettings:
    """`--cluster-config` split for an external cluster. `topic_config`: what CreateTopics
    sends (topic names and units); `applied_from`: topic config -> the key the user typed;
    `broker_only`: typed settings that no topic can carry, so nothing applies them."""

    topic_config: Mapping[str, str] = field(default_factory=dict)
    applied_from: Mapping[str, str] = field(default_factory=dict)
    broker_only: Mapping[str, str] = field(default_factory=dict)


class TopicSettingError(ValueError):
    """A typed value that cannot be converted to its topic config's unit."""


def split_cluster_config(cluster_config: Mapping[str, str]) -> TopicSettings:
    topic_config: dict[str, str] = {}
    applied_from: dict[str, str] = {}
    rank: dict[str, int] = {}
    broker_only: dict[str, str] = {}
    for key, value in cluster_config.items():
        if key in TOPIC_CONFIG_NAMES:
            name, factor, precedence = key, 1, -1  # a topic config typed by name beats any synonym
        elif key in BROKER_SYNONYMS:
            name, factor = BROKER_SYNONYMS[key]
            precedence = _PRECEDENCE.get(key, 0)
        else:
            broker_only[key] = value
            continue
        if name in rank and rank[name] <= precedence:
            continue
        topic_config[name] = _scaled(key, value, factor)
        applied_from[name] = key
        rank[name] = precedence
    return TopicSettings(topic_config, applied_from, broker_only)


def _scaled(key: str, value: str, factor: int) -> str:
    if factor == 1:
        return value
    try:
        return str(int(value.strip()) * factor)
    except ValueError:
        raise TopicSettingError(f"--cluster-config {key}={value!r} is not a whole number") from None


def requested_topic_config(spec) -> dict[str, str]:
    """The configs the run's workload creates its topics with: the topic-level part of
    `--cluster-config` against an external cluster; nothing against the bundled one, whose
    brokers carry every setting and whose topics inherit them."""
    if not getattr(spec, "external_cluster", spec.bootstrap_servers is not None):  # --bootstrap-servers, --docker-compose
        return {}
    return dict(split_cluster_config(spec.cluster_config).topic_config)
