"""Broker configuration under Kafka's property names (plus a few of our own, marked).

Properties come in as strings (`--config k=v`, like server.properties). Unknown keys are
kept and ignored, as Kafka does; a known key with a bad value is an error naming the key.
Log settings (`log.*`) are parsed by the storage layer's LogConfig from the same mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster.storage.config import LogConfig


def _int(props: Mapping[str, str], key: str, default: int, minimum: int | None = None) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: not an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{key}={raw!r}: must be >= {minimum}")
    return value


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{key}={raw!r}: expected true or false")


def _probability(props: Mapping[str, str], key: str) -> float:
    raw = props.get(key)
    if raw is None:
        return 0.0
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{key}={raw!r}: a probability must lie in [0, 1]")
    return value


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["k=v", ...]` from the command line into a mapping; a pair without `=` is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    host: str
    port: int
    data_dir: str
    properties: Mapping[str, str] = field(default_factory=dict)
    log: LogConfig = field(default_factory=LogConfig)
    cluster_id: str = "logquake-cluster"
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    message_max_bytes: int = 1_048_588  # message.max.bytes
    socket_request_max_bytes: int = 104_857_600  # socket.request.max.bytes
    log_flush_scheduler_interval_ms: int = 100  # log.flush.scheduler.interval.ms (Kafka: never; we poll)
    log_retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    producer_id_block_size: int = 1000  # our own: PIDs reserved per persisted block
    # Our own unsafe switch: buffer appended bytes in the process until fsync, so SIGKILL
    # behaves like power loss and drops everything after the last flush.
    log_crash_lose_unflushed: bool = False  # log.crash.lose.unflushed
    # Our own test-only fault: after appending a Produce, close the connection instead of
    # answering, with this probability (seeded RNG).
    test_drop_produce_response_probability: float = 0.0  # test.drop.produce.response.probability

    @property
    def advertised_address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def from_properties(cls, broker_id: int, host: str, port: int, data_dir: str, props: Mapping[str, str]) -> BrokerConfig:
        props = dict(props)
        if broker_id < 0:
            raise ValueError(f"broker id must be >= 0, got {broker_id}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must lie in [0, 65535], got {port}")
        return cls(
            broker_id=broker_id,
            host=host,
            port=port,
            data_dir=data_dir,
            properties=props,
            log=LogConfig.from_properties(props),
            cluster_id=props.get("cluster.id", "logquake-cluster"),
            num_partitions=_int(props, "num.partitions", 1, 1),
            default_replication_factor=_int(props, "default.replication.factor", 1, 1),
            auto_create_topics_enable=_bool(props, "auto.create.topics.enable", True),
            offsets_topic_num_partitions=_int(props, "offsets.topic.num.partitions", 50, 1),
            offset_metadata_max_bytes=_int(props, "offset.metadata.max.bytes", 4096, 0),
            group_initial_rebalance_delay_ms=_int(props, "group.initial.rebalance.delay.ms", 3000, 0),
            group_min_session_timeout_ms=_int(props, "group.min.session.timeout.ms", 6000, 0),
            group_max_session_timeout_ms=_int(props, "group.max.session.timeout.ms", 1_800_000, 0),
            message_max_bytes=_int(props, "message.max.bytes", 1_048_588, 0),
            socket_request_max_bytes=_int(props, "socket.request.max.bytes", 104_857_600, 16),
            log_flush_scheduler_interval_ms=_int(props, "log.flush.scheduler.interval.ms", 100, 1),
            log_retention_check_interval_ms=_int(props, "log.retention.check.interval.ms", 300_000, 1),
            producer_id_block_size=_int(props, "producer.id.block.size", 1000, 1),
            log_crash_lose_unflushed=_bool(props, "log.crash.lose.unflushed", False),
            test_drop_produce_response_probability=_probability(props, "test.drop.produce.response.probability"),
        )
