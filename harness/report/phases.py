"""Per-phase throughput of a run, from its history: how fast the system served clients
before the first fault, during each fault, after each heal and in the final phase, and
how long it took to recover after each heal (as Redpanda's chaos suites report them).

Phases come from the nemesis ops. Every fault period (faults.FaultTracker: first
`start-<kind>` to last `stop-<kind>`) is merged with any period it overlaps, so "during a
fault" means "some fault was in effect". The main phase ends at the first op of the
harness's final heal (nemesis ops marked `heal`); everything after it is the final phase
(quiet period and the read-to-the-end drain, a different op mix, so no recovery there).
A run without faults has no heal ops, so its whole history is one `before-faults` phase.

Figures, for client ops only:
- ok/s: ok completions whose completion falls in the phase, per second of the phase;
- availability: of the ops invoked in the phase, the fraction that completed ok;
- recovery_s (after a heal): from the heal to the start of the first whole 1-s window whose
  ok count is at least RECOVERY_FRACTION of the pre-fault ok/s; None if no window inside the
  phase gets there (the next fault or the end came first).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

from harness.history import Op
from harness.report.faults import FaultTracker

NEMESIS = "nemesis"
RECOVERY_FRACTION = 0.8  # a second at ≥ 80 % of the pre-fault ok rate counts as recovered
RECOVERY_WINDOW_S = 1.0

BEFORE, DURING, AFTER, FINAL = "before-faults", "fault", "after-heal", "final"


@dataclass(frozen=True)
class Phase:
    kind: str  # before-faults | fault | after-heal | final
    start_s: float  # seconds since the first op of the history
    end_s: float
    faults: str  # the fault kinds in effect ("partition+kill"), "" outside faults
    invoked: int
    ok: int
    ok_per_s: float
    availability: float | None  # None when nothing was invoked in the phase
    recovery_s: float | None = None  # after-heal phases only


@dataclass(frozen=True)
class Throughput:
    pre_fault_ok_per_s: float | None  # None when the run had no fault-free start
    recovery_fraction: float
    recovery_window_s: float
    phases: list[Phase]

    def as_json(self) -> dict[str, Any]:
        return {
            "pre_fault_ok_per_s": self.pre_fault_ok_per_s,
            "recovery_fraction": self.recovery_fraction,
            "recovery_window_s": self.recovery_window_s,
            "phases": [asdict(p) for p in self.phases],
        }


def _is_heal(op: Op) -> bool:
    return op.process == NEMESIS and bool(op.extra.get("heal"))


def _fault_windows(ops: list[Op], first_ns: int, main_end_s: float) -> list[tuple[float, float, str]]:
    """Merged fault periods of the main phase: (start_s, end_s, kinds)."""
    tracker = FaultTracker()
    for op in ops:
        if op.process == NEMESIS and not _is_heal(op):
            tracker.add(op, (op.time_ns - first_ns) / 1e9)
    merged: list[list[Any]] = []
    for period in tracker.finish(main_end_s):
        end_s = min(period.end_s, main_end_s)
        if merged and period.start_s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end_s)
            merged[-1][2].add(period.kind)
        else:
            merged.append([period.start_s, end_s, {period.kind}])
    return [(s, e, "+".join(sorted(kinds))) for s, e, kinds in merged]


def _spans(windows: list[tuple[float, float, str]], main_end_s: float,
           history_end_s: float) -> list[tuple[str, float, float, str]]:
    spans: list[tuple[str, float, float, str]] = []
    cursor, kind = 0.0, BEFORE
    for start_s, end_s, faults in windows:
        spans.append((kind, cursor, start_s, ""))
        spans.append((DURING, start_s, end_s, faults))
        cursor, kind = end_s, AFTER
    spans.append((kind, cursor, main_end_s, ""))
    if history_end_s > main_end_s:
        spans.append((FINAL, main_end_s, history_end_s, ""))
    return [s for s in spans if s[2] > s[1] or s[0] == DURING]


def phase_throughput(history: Iterable[Op]) -> Throughput:
    """Per-phase figures of one history (ops in history order)."""
    ops = list(history)
    if not ops:
        return Throughput(None, RECOVERY_FRACTION, RECOVERY_WINDOW_S, [])
    first_ns = ops[0].time_ns
    history_end_s = (ops[-1].time_ns - first_ns) / 1e9
    heal_at = next((op.time_ns for op in ops if _is_heal(op)), None)
    main_end_s = history_end_s if heal_at is None else (heal_at - first_ns) / 1e9
    spans = _spans(_fault_windows(ops, first_ns, main_end_s), main_end_s, history_end_s)

    # Client ops as (invoke_s, completion_s, ok): an op's phase of invocation decides its
    # availability, its completion time its ok rate.
    invoked_at: dict[Any, float] = {}
    invokes: list[float] = []
    oks: list[float] = []
    ok_invokes: list[float] = []
    for op in ops:
        if op.process == NEMESIS:
            continue
        t = (op.time_ns - first_ns) / 1e9
        if op.type == "invoke":
            invoked_at[op.process] = t
            invokes.append(t)
        elif op.type == "ok":
            oks.append(t)
            started = invoked_at.pop(op.process, None)
            if started is not None:
                ok_invokes.append(started)
        else:
            invoked_at.pop(op.process, None)

    def count(times: list[float], start_s: float, end_s: float, last: bool) -> int:
        return sum(1 for t in times if start_s <= t < end_s or (last and t == end_s))

    pre_fault: float | None = None
    if spans and spans[0][0] == BEFORE and not (len(spans) == 1 or spans[1][0] == FINAL):
        start_s, end_s = spans[0][1], spans[0][2]
        pre_fault = count(oks, start_s, end_s, False) / (end_s - start_s) if end_s > start_s else None
    phases: list[Phase] = []
    for i, (kind, start_s, end_s, faults) in enumerate(spans):
        last = i == len(spans) - 1
        duration_s = end_s - start_s
        ok = count(oks, start_s, end_s, last)
        invoked = count(invokes, start_s, end_s, last)
        ok_of_invoked = count(ok_invokes, start_s, end_s, last)
        recovery = _recovery_s(oks, start_s, end_s, pre_fault) if kind == AFTER else None
        phases.append(Phase(kind, round(start_s, 3), round(end_s, 3), faults, invoked, ok,
                            round(ok / duration_s, 2) if duration_s > 0 else 0.0,
                            round(ok_of_invoked / invoked, 3) if invoked else None, recovery))
    return Throughput(None if pre_fault is None else round(pre_fault, 2), RECOVERY_FRACTION, RECOVERY_WINDOW_S, phases)


def _recovery_s(oks: list[float], heal_s: float, end_s: float, pre_fault: float | None) -> float | None:
    if pre_fault is None or pre_fault <= 0:
        return None
    needed = RECOVERY_FRACTION * pre_fault * RECOVERY_WINDOW_S
    window = 0
    while heal_s + (window + 1) * RECOVERY_WINDOW_S <= end_s:
        start = heal_s + window * RECOVERY_WINDOW_S
        if sum(1 for t in oks if start <= t < start + RECOVERY_WINDOW_S) >= needed:
            return round(window * RECOVERY_WINDOW_S, 3)
        window += 1
    return None


def format_table(throughput: Throughput) -> str:
    """The figures as plain text, one line per phase (printed at the end of a run)."""
    lines = [f"{'phase':<13} {'start s':>8} {'end s':>8} {'ok/s':>8} {'avail':>6} {'recovery':>9}  faults"]
    for p in throughput.phases:
        avail = "-" if p.availability is None else f"{p.availability:.0%}"
        if p.kind == AFTER:
            recovery = "never" if p.recovery_s is None else f"{p.recovery_s:g} s"
        else:
            recovery = ""
        lines.append(f"{p.kind:<13} {p.start_s:>8.1f} {p.end_s:>8.1f} {p.ok_per_s:>8.1f} {avail:>6} {recovery:>9}  {p.faults}")
    return "\n".join(lines)
