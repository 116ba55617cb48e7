"""What every workload gives the harness: its generators, its clients and its set-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from harness.generator import Completion, Generator, Invocation


# Jepsen's client settings (reference/jepsen-kafka.md §1.4), shared by every workload: 10 s
# delivery timeout, 3 s request timeout, fast reconnects, earliest reset. Also spelled out:
# the producer settings that decide the claims a run makes (acks, idempotence, retries,
# in-flight requests, isolation level), so spec.json records them.
# One departure from Jepsen: the producer is idempotent by default, as Kafka's own Java
# client has been since 3.0 (KIP-679: acks=all and enable.idempotence=true). Without it,
# librdkafka's retries write values twice, and the order checks then flag the polls around
# those duplicates, so a safe cluster could not be told from an unsafe one by the default
# verdict. `--client-config enable.idempotence=false` gives Jepsen's original setting, with
# Jepsen's unbounded in-flight requests (harness.testcmd.effective_client_config).
JEPSEN_CLIENT_CONFIG: dict[str, str] = {
    "acks": "all",
    "enable.idempotence": "true",
    "retries": "2147483647",
    "max.in.flight.requests.per.connection": "5",  # idempotence allows at most 5
    "message.timeout.ms": "10000",
    "request.timeout.ms": "3000",
    "reconnect.backoff.max.ms": "1000",
    "socket.connection.setup.timeout.ms": "1000",
    "socket.timeout.ms": "10000",
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "300",
    "enable.partition.eof": "false",
}


class Client(Protocol):
    """One Jepsen process's connection to the system. Used by one thread at a time.

    invoke never raises for an outcome it can classify; the run loop turns anything it does
    raise into an `info` completion (the outcome is unknown) and retires the process."""

    def invoke(self, invocation: Invocation) -> Completion: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Workload:
    """generator: the main phase for client threads (the harness adds the rate and time
    limit). final_generator: the drain that runs after faults are healed (it reads to the
    end). open_client(process): a fresh client for a process id. setup(): create what the
    workload needs on the cluster before the first op. topics: the topics setup() made sure
    of; owns_topic(name): whether a topic is one the workload tests (the queue workload makes
    new ones as keys retire). An external run reads their effective settings back
    (harness/cluster_settings.py)."""

    name: str
    generator: Generator
    final_generator: Generator | None
    open_client: Callable[[int], Client]
    setup: Callable[[], None]
    topics: tuple[str, ...] = ()
    owns_topic: Callable[[str], bool] | None = None


def option(options: dict, name: str, default, kind: type, *, check: Callable[[object], bool] | None = None,
           expect: str = ""):
    """A workload option, converted from its command-line string form and checked."""
    raw = options.get(name, default)
    try:
        if kind is bool and isinstance(raw, str):
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            value = raw.lower() in ("true", "1", "yes")
        elif kind is list and isinstance(raw, str):
            value = [part.strip() for part in raw.split(",") if part.strip()]
        else:
            value = kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"workload option {name}={raw!r} is not a valid {kind.__name__}") from None
    if check is not None and not check(value):
        raise ValueError(f"workload option {name}={raw!r}: {expect}")
    return value
