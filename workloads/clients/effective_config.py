"""Read back what a cluster really runs with: each test topic's replication factor (Metadata)
and effective configs (DescribeConfigs), and each broker's durability settings.

An external cluster's topics may predate the run (TOPIC_ALREADY_EXISTS) and its brokers'
defaults are whatever their operator chose, so what the user typed says little about them:
the claims of an external run come from this answer (harness/cluster_settings.py writes it to
the run directory as cluster-config.json; checkers/claims.py reads it). Nothing here guesses:
a value the cluster did not give is absent, and the error that kept it is recorded.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from workloads.clients.confluent import CONSUMER_ONLY, PRODUCER_ONLY

log = logging.getLogger("logquake.effective_config")

# The topic configs the claims depend on (min ISR, unclean election) and the flush policy
# and retention that decide what a crash or a cleaner can take away.
TOPIC_KEYS: tuple[str, ...] = ("min.insync.replicas", "unclean.leader.election.enable", "flush.messages", "flush.ms",
                               "retention.ms", "retention.bytes")
BROKER_KEYS: tuple[str, ...] = ("min.insync.replicas", "unclean.leader.election.enable", "default.replication.factor",
                                "log.flush.interval.messages", "log.flush.interval.ms",
                                "log.flush.scheduler.interval.ms")


@dataclass
class TopicReading:
    """One topic as the cluster reports it. replication_factor: the fewest replicas of any
    of its partitions (Metadata); configs: effective values (DescribeConfigs, broker
    defaults included); errors: why a value is missing."""

    replication_factor: int | None = None
    partitions: int | None = None
    configs: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass
class BrokerReading:
    configs: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass
class ClusterReading:
    """One read of the cluster at a moment of the run (`when`: after-setup, end)."""

    when: str
    topics: dict[str, TopicReading] = field(default_factory=dict)
    brokers: dict[str, BrokerReading] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def admin_client(bootstrap_servers: str, client_config: dict[str, str]) -> AdminClient:
    conf: dict[str, Any] = {k: v for k, v in client_config.items() if k not in PRODUCER_ONLY and k not in CONSUMER_ONLY}
    conf["bootstrap.servers"] = bootstrap_servers
    conf["logger"] = log
    return AdminClient(conf)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args:
        err = exc.args[0]
        name = getattr(err, "name", None)
        return f"{name()}: {err.str()}" if callable(name) else str(err)
    return f"{type(exc).__name__}: {exc}"


def read_cluster(admin: AdminClient, *, when: str, topics: Iterable[str], owns_topic=None,
                 extra_topic_keys: Iterable[str] = (), extra_broker_keys: Iterable[str] = (),
                 timeout_s: float = 10.0) -> ClusterReading:
    """Metadata for the replication factors and the broker ids, then one DescribeConfigs for
    the topics and one per broker. `topics` are read whether or not they exist (a missing one
    is an error); with `owns_topic`, every topic in the metadata it accepts is read too."""
    reading = ClusterReading(when=when)
    wanted = set(topics)
    topic_keys = set(TOPIC_KEYS) | set(extra_topic_keys)
    broker_keys = set(BROKER_KEYS) | set(extra_broker_keys)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception as exc:
        reading.errors.append(f"Metadata: {_error_text(exc)}")
        metadata = None
    broker_ids: list[str] = []
    if metadata is not None:
        broker_ids = [str(b) for b in sorted(metadata.brokers)]
        if owns_topic is not None:
            wanted |= {name for name in metadata.topics if owns_topic(name)}
    for name in sorted(wanted):
        topic = reading.topics.setdefault(name, TopicReading())
        if metadata is None:
            topic.errors.append("Metadata unavailable")
            continue
        described = metadata.topics.get(name)
        if described is None:
            topic.errors.append("Metadata: topic not in the cluster's metadata")
            continue
        if described.error is not None:
            topic.errors.append(f"Metadata: {described.error.name()}: {described.error.str()}")
            continue
        if described.partitions:
            topic.partitions = len(described.partitions)
            topic.replication_factor = min(len(p.replicas) for p in described.partitions.values())
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in sorted(wanted)]
    resources_by_broker = [ConfigResource(ResourceType.BROKER, broker) for broker in broker_ids]
    for resource, target, keys in ([(r, reading.topics[r.name], topic_keys) for r in resources]
                                   + [(r, reading.brokers.setdefault(r.name, BrokerReading()), broker_keys)
                                      for r in resources_by_broker]):
        # One resource per request: a broker resource must go to that broker, and one
        # refused topic (authorisation) must not hide the others' answers.
        try:
            futures = admin.describe_configs([resource], request_timeout=timeout_s)
            entries = next(iter(futures.values())).result(timeout=timeout_s + 1)
        except Exception as exc:
            target.errors.append(f"DescribeConfigs: {_error_text(exc)}")
            continue
        for key, entry in entries.items():
            if key in keys and entry.value is not None:
                target.configs[key] = str(entry.value)
    return reading
