"""What the broker core is given instead of touching the world: a clock, a scheduler, a
random source, and connections to answer on.

The asyncio runtime supplies real ones; a deterministic simulator supplies virtual time and
a seeded RNG. Timers are scheduled on `monotonic_ns` (when to wake up); anything Kafka
measures with its wall clock (`Time.milliseconds()`: batch timestamps, retention, commit
timestamps, replica lag for ISR shrink and expansion) uses `wall_ms`, so a skewed clock
affects exactly what it affects in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Clock(Protocol):
    def monotonic_ns(self) -> int: ...
    def wall_ms(self) -> int: ...


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle: ...


class Rng(Protocol):
    def random(self) -> float: ...
    def getrandbits(self, k: int, /) -> int: ...


@dataclass(slots=True)
class Response:
    """What a request produced: frame chunks to send (None: send nothing, as for acks=0),
    and whether to close the connection after sending what came before."""

    chunks: list[bytes | memoryview] | None
    close_connection: bool = False
    close_reason: str = ""


Reply = Callable[[Response], None]


@dataclass(slots=True)
class ClientInfo:
    """Who sent a request, for group membership and logs."""

    client_id: str | None
    client_host: str
    connection_id: int = 0
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Another node to send requests to (a broker or the controller)."""

    node_id: int
    host: str
    port: int
    # Requests on different channels to the same node go over separate connections, so a
    # long poll on one (the metadata fetch) never delays another (a heartbeat), as Kafka
    # keeps separate network clients per purpose.
    channel: str = ""

    def __str__(self) -> str:
        return f"node {self.node_id} at {self.host}:{self.port}"

    def on_channel(self, channel: str) -> Endpoint:
        return Endpoint(self.node_id, self.host, self.port, channel)


@dataclass(frozen=True, slots=True)
class OutboundResult:
    """The answer to an outbound request: the decoded kio response entity, or `error`
    (connection refused or lost, timed out, malformed answer) and no body."""

    body: Any | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Outbound(Protocol):
    """Requests from this node to other nodes (replica fetches, controller RPCs).

    `body` is a kio request entity of (api_key, api_version). `on_done` is called exactly
    once, never from inside `send` itself, with the response or an error; after
    `timeout_ms` without an answer it gets an error and the connection is dropped (as
    Kafka's NetworkClient does), failing every other request in flight on it too.
    Requests to one endpoint are sent and answered in order.
    """

    def send(self, destination: Endpoint, api_key: int, api_version: int, body: Any,
             on_done: Callable[[OutboundResult], None], timeout_ms: int) -> None: ...

    def close(self, destination: Endpoint) -> None:
        """Drop the connection to `destination`; requests in flight fail."""
        ...
