"""Per-log settings, under Kafka's names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Kafka spells "never" as Long.MAX_VALUE for the flush settings and -1 for retention.
_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1
# The smallest segment Kafka accepts (the legacy v0 record overhead); tests use small ones.
_MIN_SEGMENT_BYTES = 14


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 64 * 1024 * 1024  # log.segment.bytes
    segment_ms: int | None = None  # log.roll.ms
    retention_ms: int | None = 7 * 24 * 3600 * 1000  # log.retention.ms (None = keep forever)
    retention_bytes: int | None = None  # log.retention.bytes
    flush_interval_messages: int | None = None  # log.flush.interval.messages (None = never)
    flush_interval_ms: int | None = None  # log.flush.interval.ms (None = never)
    index_interval_bytes: int = 4096  # log.index.interval.bytes

    def __post_init__(self) -> None:
        for name in _KEYS:
            problem = _field_problem(name, getattr(self, name))
            if problem:
                raise ValueError(f"{name}={getattr(self, name)!r}: {problem}")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build from Kafka properties, broker (`log.*`) or topic form; a topic-level key
        overrides the broker-level one. Keys this class does not cover are ignored."""
        values: dict[str, int | None] = {}
        for field_name, keys in _KEYS.items():
            for key, scale in keys:
                if key in props:
                    value = _parse(key, props[key], scale, optional=field_name in _OPTIONAL)
                    problem = _field_problem(field_name, value)
                    if problem:
                        raise ValueError(f"{key}={props[key]!r}: {problem}")
                    values[field_name] = value
                    break
        return cls(**values)  # type: ignore[arg-type]


# For each field, the keys that set it, highest precedence first, with the unit scale to ms.
_KEYS: dict[str, list[tuple[str, int]]] = {
    "segment_bytes": [("segment.bytes", 1), ("log.segment.bytes", 1)],
    "segment_ms": [("segment.ms", 1), ("log.roll.ms", 1), ("log.roll.hours", 3_600_000)],
    "retention_ms": [
        ("retention.ms", 1),
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ],
    "retention_bytes": [("retention.bytes", 1), ("log.retention.bytes", 1)],
    "flush_interval_messages": [("flush.messages", 1), ("log.flush.interval.messages", 1)],
    # Kafka falls back to the flusher's check interval when log.flush.interval.ms is unset.
    "flush_interval_ms": [("flush.ms", 1), ("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)],
    "index_interval_bytes": [("index.interval.bytes", 1), ("log.index.interval.bytes", 1)],
}
_OPTIONAL = {"segment_ms", "retention_ms", "retention_bytes", "flush_interval_messages", "flush_interval_ms"}


def _parse(key: str, raw: str, scale: int, *, optional: bool) -> int | None:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: not an integer") from None
    if optional and (value == -1 or value == _LONG_MAX):
        return None
    if value < 0:
        raise ValueError(f"{key}={raw!r}: must be >= 0" + (" or -1 for none" if optional else ""))
    return value * scale


def _field_problem(name: str, value: object) -> str | None:
    if value is None:
        return None if name in _OPTIONAL else "must be set"
    if not isinstance(value, int) or isinstance(value, bool):
        return "must be an int"
    if name == "segment_bytes" and not _MIN_SEGMENT_BYTES <= value <= _INT_MAX:
        return f"must be in [{_MIN_SEGMENT_BYTES}, {_INT_MAX}]"
    if name in ("segment_ms", "flush_interval_messages") and value < 1:
        return "must be >= 1"
    if name in ("retention_ms", "retention_bytes", "flush_interval_ms", "index_interval_bytes") and value < 0:
        return "must be >= 0"
    return None
