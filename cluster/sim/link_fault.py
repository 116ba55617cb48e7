"""Message faults on simulated network links: the settings, their validation and how several
settings on one link add up. `VirtualNetwork` applies them (see its docstring for what each
fault does to a TCP connection); this module holds no state and draws nothing.

Constants are Linux's TCP defaults, because the simulated connections stand for TCP
connections between Linux hosts: a lost segment is retransmitted after the retransmission
timeout (RTO), which starts at TCP_RTO_MIN (200 ms; with sub-millisecond round trips the
computed RTO is always below it) and doubles with each further loss of the same segment, up
to TCP_RTO_MAX; a SYN starts at TCP_TIMEOUT_INIT (1 s). After `tcp_retries2` (15)
retransmissions of a segment, or `tcp_syn_retries` (6) of a SYN, the kernel gives up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TCP_RTO_MIN_MS = 200.0
TCP_RTO_MAX_MS = 120_000.0
TCP_SYN_RTO_MS = 1_000.0
TCP_RETRIES2 = 15
TCP_SYN_RETRIES = 6


class LinkFaultError(ValueError):
    """A link fault setting that cannot be applied; the message names the field."""


@dataclass(frozen=True, slots=True)
class LinkFault:
    """What happens to each message on a link (a direction between two hosts).

    delay_ms   extra one-way delay, added to the network's own latency
    jitter_ms  a further delay drawn uniformly from [0, jitter_ms) per message
    loss       probability that a transmission is lost (TCP retransmits it after the RTO)
    duplicate  probability that a request is delivered twice (a copy on a fresh connection)
    reorder    probability that a message skips delay_ms and jitter_ms and so overtakes
               messages sent before it on the link's other connections (netem's reorder;
               needs a delay to overtake)
    """

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0

    def __post_init__(self) -> None:
        for name in ("delay_ms", "jitter_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise LinkFaultError(f"{name} {value!r} must be a finite number of milliseconds >= 0")
        for name in ("loss", "duplicate", "reorder"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise LinkFaultError(f"{name} {value!r} must be a probability in [0, 1]")
        if self.reorder > 0 and self.delay_ms + self.jitter_ms == 0:
            raise LinkFaultError(f"reorder {self.reorder!r} needs delay_ms or jitter_ms > 0: a reordered message overtakes "
                                 "others by skipping the link's delay, as with netem")

    @property
    def is_noop(self) -> bool:
        return self == NO_FAULT

    def plus(self, other: LinkFault) -> LinkFault:
        """Both faults on one link: delays add up, the probabilities are of independent events
        (a message is lost if either loses it)."""
        return LinkFault(self.delay_ms + other.delay_ms, self.jitter_ms + other.jitter_ms, _either(self.loss, other.loss),
                         _either(self.duplicate, other.duplicate), _either(self.reorder, other.reorder))

    def as_value(self) -> dict[str, float]:
        """JSON-able, only the fields that are set (for nemesis completions)."""
        return {name: getattr(self, name) for name in ("delay_ms", "jitter_ms", "loss", "duplicate", "reorder") if getattr(self, name)}

    @classmethod
    def from_value(cls, value: object) -> LinkFault:
        if not isinstance(value, dict):
            raise LinkFaultError(f"a link fault is a mapping of delay_ms, jitter_ms, loss, duplicate, reorder; got {value!r}")
        unknown = sorted(set(value) - {"delay_ms", "jitter_ms", "loss", "duplicate", "reorder"})
        if unknown:
            raise LinkFaultError(f"unknown link fault field(s) {', '.join(map(repr, unknown))}; known: delay_ms, jitter_ms, loss, duplicate, reorder")
        return cls(**value)


NO_FAULT = LinkFault()


def _either(p: float, q: float) -> float:
    return 1.0 - (1.0 - p) * (1.0 - q)


def retransmission_delay_ms(losses: int, first_rto_ms: float) -> float:
    """Time lost to `losses` consecutive losses of one segment: each retransmission waits
    twice as long as the one before (exponential backoff), capped at TCP_RTO_MAX."""
    return sum(min(first_rto_ms * 2 ** i, TCP_RTO_MAX_MS) for i in range(losses))
