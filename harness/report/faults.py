"""Fault periods from the nemesis's ops, and the colour each kind of fault is drawn in.

A nemesis op has `f` = `start-<kind>` or `stop-<kind>` (each usually an invoke followed by an
info completion). A fault period of a kind runs from the first `start-<kind>` op to the last
`stop-<kind>` op before the next `start-<kind>`: that is the whole span in which the fault may
have been in effect, so shading it never hides an effect of the fault. A period with no stop
is still open when the history ends; it is drawn to the end and said to be unhealed.
Nemesis ops of any other shape are kept as instant events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.history import Op

# Fixed colours for the fault kinds the nemeses package ships, chosen apart from the
# ok/fail/info colours of operations (blue, pink, orange) so bands never read as outcomes.
_KNOWN_FAULT_COLOURS = {
    "partition": "#e15759",
    "kill": "#7b4fa0",
    "pause": "#59a14f",
    "clock": "#2a9d8f",
    "packet": "#d4a017",
    "disk": "#9c755f",
    "brokers-down": "#b07aa1",
    "lone-leader-crash": "#8c564b",
    "latency": "#f28e2b",
    "bandwidth": "#edc948",
    "flaky": "#ff9da7",
}
_SPARE_FAULT_COLOURS = ("#4e79a7", "#b07aa1", "#86bcb6", "#8c564b", "#bcbd22", "#17becf", "#7f7f7f")


@dataclass(frozen=True)
class FaultPeriod:
    kind: str
    start_s: float
    end_s: float
    healed: bool  # False when the history ends before a stop op
    description: str  # the targets, as the nemesis described them
    start_op_index: int
    end_op_index: int | None


@dataclass(frozen=True)
class NemesisEvent:
    """A nemesis op that is not part of a start/stop pair."""

    f: str
    time_s: float
    op_index: int
    description: str


def fault_colours(kinds: list[str]) -> dict[str, str]:
    """One colour per fault kind: fixed for known kinds, spare colours in sorted order else."""
    colours: dict[str, str] = {}
    spare = iter(_SPARE_FAULT_COLOURS)
    for kind in sorted(set(kinds)):
        if kind in _KNOWN_FAULT_COLOURS:
            colours[kind] = _KNOWN_FAULT_COLOURS[kind]
        else:
            colours[kind] = next(spare, "#7f7f7f")
    return colours


def describe_targets(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), default=str)


def _split_fault(f: str) -> tuple[str, str] | None:
    for phase in ("start", "stop"):
        prefix = phase + "-"
        if f.startswith(prefix) and len(f) > len(prefix):
            return phase, f[len(prefix):]
    return None


class FaultTracker:
    """Fed the nemesis ops in history order; yields periods and instant events."""

    def __init__(self) -> None:
        self.periods: list[FaultPeriod] = []
        self.events: list[NemesisEvent] = []
        # kind -> [start_s, start_index, description, end_s or None, end_index or None]
        self._open: dict[str, list[Any]] = {}

    def add(self, op: Op, time_s: float) -> None:
        split = _split_fault(op.f)
        if split is None:
            self.events.append(NemesisEvent(op.f, time_s, op.index, describe_targets(op.value)))
            return
        phase, kind = split
        current = self._open.get(kind)
        if phase == "start":
            if current is not None and current[3] is not None:
                self._close(kind)
                current = None
            if current is None:
                self._open[kind] = [time_s, op.index, describe_targets(op.value), None, None]
            elif op.value is not None and op.type != "invoke":
                # The completion says what was actually done; prefer it to the request.
                current[2] = describe_targets(op.value)
        elif current is not None:
            current[3], current[4] = time_s, op.index
        else:
            self.events.append(NemesisEvent(op.f, time_s, op.index, describe_targets(op.value)))

    def _close(self, kind: str) -> None:
        start_s, start_index, description, end_s, end_index = self._open.pop(kind)
        self.periods.append(FaultPeriod(kind, start_s, end_s, True, description, start_index, end_index))

    def finish(self, history_end_s: float) -> list[FaultPeriod]:
        for kind in list(self._open):
            start_s, start_index, description, end_s, end_index = self._open[kind]
            if end_s is None:
                del self._open[kind]
                self.periods.append(
                    FaultPeriod(kind, start_s, max(history_end_s, start_s), False, description, start_index, None)
                )
            else:
                self._close(kind)
        self.periods.sort(key=lambda p: (p.start_s, p.kind))
        return self.periods
