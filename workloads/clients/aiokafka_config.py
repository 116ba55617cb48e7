"""librdkafka settings (`--client-config`, the workloads' defaults) as aiokafka parameters,
for the simulated run's clients.

Every key of a run's effective client configuration is one of:

- mapped: it becomes an aiokafka parameter (or, for the delivery deadline, the client's own
  wait for an acknowledgement);
- honoured by aiokafka's own behaviour: accepted only with values aiokafka's behaviour
  satisfies (`retries` only unbounded: aiokafka has no retry count and retries until the
  send's deadline; any `max.in.flight.requests.per.connection` >= 1: aiokafka has at most
  one produce request per partition in flight, within any bound, so it never reorders
  retries as librdkafka's unbounded setting can);
- without an aiokafka counterpart: refused when the user sets it, since a simulation that
  silently ignored it would test something else than asked; a workload default of that kind
  (Jepsen's reconnect and socket set-up timeouts) is recorded as not applied.

Anything else is refused by name. The result also records, per key, what became of it
(`notes`), so a run says how its clients were configured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class UnsupportedClientSetting(ValueError):
    """A client setting the simulated (aiokafka) client cannot honour; names it and why."""


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UnsupportedClientSetting(f"--client-config {key}={value!r} is not an integer") from None


def _bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise UnsupportedClientSetting(f"--client-config {key}={value!r} is not true or false")


def _acks(key: str, value: str) -> Any:
    lowered = value.strip().lower()
    if lowered in ("all", "-1"):
        return "all"
    if lowered in ("0", "1"):
        return int(lowered)
    raise UnsupportedClientSetting(f"--client-config {key}={value!r}: aiokafka takes acks all, -1, 0 or 1")


def _offset_reset(key: str, value: str) -> str:
    lowered = value.strip().lower()
    mapped = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
              "latest": "latest", "largest": "latest", "end": "latest", "error": "none"}.get(lowered)
    if mapped is None:
        raise UnsupportedClientSetting(f"--client-config {key}={value!r}: expected earliest or latest")
    return mapped


def _isolation(key: str, value: str) -> str:
    if value not in ("read_committed", "read_uncommitted"):
        raise UnsupportedClientSetting(f"--client-config {key}={value!r}: expected read_committed or read_uncommitted")
    return value


def _compression(key: str, value: str) -> Any:
    lowered = value.strip().lower()
    if lowered == "none":
        return None
    if lowered == "gzip":
        return "gzip"
    raise UnsupportedClientSetting(f"--client-config {key}={value!r}: the simulated client compresses with none or "
                                   "gzip only (the others need codec packages the project does not install)")


def _assignors(key: str, value: str) -> tuple[Any, ...]:
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    known = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    names = [part.strip().lower() for part in value.split(",") if part.strip()]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise UnsupportedClientSetting(f"--client-config {key}={value!r}: the simulated client (aiokafka) offers the "
                                       "eager range and roundrobin assignors only")
    return tuple(known[n] for n in names)


Convert = Callable[[str, str], Any]
PRODUCER, CONSUMER, BOTH = "producer", "consumer", "both"

# librdkafka key -> (which client, aiokafka parameter, conversion)
MAPPED: dict[str, tuple[str, str, Convert]] = {
    "acks": (PRODUCER, "acks", _acks),
    "request.required.acks": (PRODUCER, "acks", _acks),
    "enable.idempotence": (PRODUCER, "enable_idempotence", _bool),
    "linger.ms": (PRODUCER, "linger_ms", _int),
    "queue.buffering.max.ms": (PRODUCER, "linger_ms", _int),
    "batch.size": (PRODUCER, "max_batch_size", _int),
    "compression.type": (PRODUCER, "compression_type", _compression),
    "compression.codec": (PRODUCER, "compression_type", _compression),
    # librdkafka's request.timeout.ms is the producer's; its socket.timeout.ms bounds every
    # other request, which is what aiokafka's request_timeout_ms does for the consumer.
    "request.timeout.ms": (PRODUCER, "request_timeout_ms", _int),
    "socket.timeout.ms": (CONSUMER, "request_timeout_ms", _int),
    "retry.backoff.ms": (BOTH, "retry_backoff_ms", _int),
    "metadata.max.age.ms": (BOTH, "metadata_max_age_ms", _int),
    "group.id": (CONSUMER, "group_id", lambda k, v: v),
    "group.instance.id": (CONSUMER, "group_instance_id", lambda k, v: v),
    "auto.offset.reset": (CONSUMER, "auto_offset_reset", _offset_reset),
    "enable.auto.commit": (CONSUMER, "enable_auto_commit", _bool),
    "auto.commit.interval.ms": (CONSUMER, "auto_commit_interval_ms", _int),
    "isolation.level": (CONSUMER, "isolation_level", _isolation),
    "session.timeout.ms": (CONSUMER, "session_timeout_ms", _int),
    "heartbeat.interval.ms": (CONSUMER, "heartbeat_interval_ms", _int),
    "max.poll.interval.ms": (CONSUMER, "max_poll_interval_ms", _int),
    "fetch.wait.max.ms": (CONSUMER, "fetch_max_wait_ms", _int),
    "fetch.min.bytes": (CONSUMER, "fetch_min_bytes", _int),
    "fetch.max.bytes": (CONSUMER, "fetch_max_bytes", _int),
    "max.partition.fetch.bytes": (CONSUMER, "max_partition_fetch_bytes", _int),
    "check.crcs": (CONSUMER, "check_crcs", _bool),
    "partition.assignment.strategy": (CONSUMER, "partition_assignment_strategy", _assignors),
}
DELIVERY_TIMEOUT_KEYS = ("message.timeout.ms", "delivery.timeout.ms")
UNBOUNDED_RETRIES = 2147483647
# Accepted, with what aiokafka does instead; values are checked in `_behaviour`.
BEHAVIOUR: dict[str, str] = {
    "retries": "aiokafka retries retriable errors until the send's deadline (no count): only unbounded retries",
    "message.send.max.retries": "aiokafka retries retriable errors until the send's deadline (no count): only unbounded retries",
    "max.in.flight.requests.per.connection": "aiokafka has at most one produce request per partition in flight "
                                             "(within any bound >= 1; it never reorders retries)",
    "max.in.flight": "aiokafka has at most one produce request per partition in flight "
                     "(within any bound >= 1; it never reorders retries)",
    "enable.partition.eof": "the client finds a key's end from the last fetch's high watermark, as with end-of-partition events",
    "message.timeout.ms": "the client waits this long for a send's acknowledgement, then calls it a timeout (info)",
    "delivery.timeout.ms": "the client waits this long for a send's acknowledgement, then calls it a timeout (info)",
}
# librdkafka settings with no aiokafka counterpart: refused when the user sets them.
NO_EQUIVALENT: dict[str, str] = {
    "reconnect.backoff.max.ms": "aiokafka reconnects on the next request, after retry_backoff_ms",
    "reconnect.backoff.ms": "aiokafka reconnects on the next request, after retry_backoff_ms",
    "socket.connection.setup.timeout.ms": "aiokafka bounds a connection attempt by request_timeout_ms",
}
REFUSED: dict[str, str] = {
    "transactional.id": "only the transactional workloads' producers have one (--workload-option txn=true)",
    "transaction.timeout.ms": "only the transactional workloads' producers take it (--workload-option txn=true)",
    "bootstrap.servers": "the simulation's brokers are its own",
}


@dataclass(frozen=True)
class AiokafkaSettings:
    producer: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    admin: dict[str, Any] = field(default_factory=dict)
    send_timeout_s: float = 10.0
    notes: dict[str, str] = field(default_factory=dict)  # librdkafka key -> what became of it

    def describe(self) -> dict[str, Any]:
        """JSON-able: the parameters each client gets and what became of each setting."""
        def plain(params: dict[str, Any]) -> dict[str, Any]:
            return {k: ([c.__name__ for c in v] if k == "partition_assignment_strategy" else v) for k, v in params.items()}

        return {"producer": plain(self.producer), "consumer": plain(self.consumer), "admin": plain(self.admin),
                "send_timeout_s": self.send_timeout_s, "notes": dict(self.notes)}


def _behaviour(key: str, value: str) -> None:
    if key in ("retries", "message.send.max.retries") and _int(key, value) < UNBOUNDED_RETRIES:
        raise UnsupportedClientSetting(f"--client-config {key}={value}: aiokafka has no retry count (it retries until "
                                       f"the send's deadline, message.timeout.ms); only {UNBOUNDED_RETRIES} (unbounded) "
                                       "can be simulated")
    if key in ("max.in.flight.requests.per.connection", "max.in.flight") and _int(key, value) < 1:
        raise UnsupportedClientSetting(f"--client-config {key}={value} must be at least 1")
    if key == "enable.partition.eof":
        _bool(key, value)


def aiokafka_settings(effective: Mapping[str, str], overrides: Mapping[str, str]) -> AiokafkaSettings:
    """The aiokafka parameters for a run's effective librdkafka configuration. Raises
    UnsupportedClientSetting naming the first setting that cannot be honoured."""
    producer: dict[str, Any] = {}
    consumer: dict[str, Any] = {"partition_assignment_strategy": _assignors("", "range,roundrobin")}  # librdkafka's default
    notes: dict[str, str] = {}
    send_timeout_s = 10.0
    for key in sorted(effective):
        value = effective[key]
        if key in REFUSED:
            raise UnsupportedClientSetting(f"--client-config {key} cannot be simulated: {REFUSED[key]}")
        if key in MAPPED:
            target, param, convert = MAPPED[key]
            converted = convert(key, value)
            if target in (PRODUCER, BOTH):
                producer[param] = converted
            if target in (CONSUMER, BOTH):
                consumer[param] = converted
            notes[key] = f"{target} {param}"
            continue
        if key in BEHAVIOUR:
            _behaviour(key, value)
            if key in DELIVERY_TIMEOUT_KEYS:
                send_timeout_s = _int(key, value) / 1000
            notes[key] = BEHAVIOUR[key]
            continue
        if key in NO_EQUIVALENT:
            if key in overrides:
                raise UnsupportedClientSetting(f"--client-config {key} has no equivalent in the simulated client "
                                               f"(aiokafka): {NO_EQUIVALENT[key]}")
            notes[key] = f"not applied (no aiokafka equivalent: {NO_EQUIVALENT[key]})"
            continue
        raise UnsupportedClientSetting(f"--client-config {key} is not known to the simulated client (aiokafka); "
                                       f"it maps: {', '.join(sorted({*MAPPED, *BEHAVIOUR}))}")
    admin = {k: v for k, v in consumer.items() if k in ("request_timeout_ms", "retry_backoff_ms", "metadata_max_age_ms")}
    return AiokafkaSettings(producer=producer, consumer=consumer, admin=admin, send_timeout_s=send_timeout_s, notes=notes)
