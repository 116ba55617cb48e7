"""Hypothesis strategies for fault schedules of simulated runs (`logquake test --sim`).

A schedule is a tuple of `Fault`s: which fault (`kind`, a nemesis package: kill, pause,
partition, clock), on which brokers (`targets`: broker ids, or a live spec the package
resolves when the fault starts: "primaries", "primary" for partitions), when (`start_s`,
simulated seconds after the main phase starts) and for how long (`duration_s`). `ops()`
turns it into the nemesis ops a simulated run performs (`--fault-schedule FILE` takes them
as JSON, `schedule_json`).

The strategy is built to shrink well: Hypothesis deletes faults (fewer), lowers times and
durations toward 0 (earlier, shorter, in steps of 0.1 s), and targets shrink toward the
fewest brokers with the lowest ids, explicit ids before live specs. A user's own test::

    from hypothesis import given, settings
    import logquake
    from logquake.strategies import fault_schedules

    @settings(max_examples=20, deadline=None)
    @given(fault_schedules(brokers=3, time_limit_s=10, kinds=("kill", "partition")))
    def test_no_acknowledged_write_is_lost(schedule):
        result = logquake.run(logquake.TestSpec(sim=True, time_limit_s=10, nemesis=["kill", "partition"],
                                                fault_schedule=schedule, seed=1))
        assert result.valid, result.describe()
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

# The packages a schedule can name, and the ones whose targets are broker sets.
NODE_KINDS: tuple[str, ...] = ("kill", "pause", "clock")
KINDS: tuple[str, ...] = ("kill", "pause", "partition", "clock")
NODE_LIVE_SPECS: tuple[str, ...] = ("primaries",)
PARTITION_LIVE_SPECS: tuple[str, ...] = ("primary", "primaries")
STEP_S = 0.1  # times and durations are whole tenths of a simulated second: they shrink in steps and print exactly
MAX_CLOCK_DELTA_MS = 60_000


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` on `targets` from `start_s` for `duration_s` simulated seconds.
    `delta_ms` is a clock fault's jump (0 for the other kinds)."""

    kind: str
    targets: tuple[int, ...] | str
    start_s: float
    duration_s: float
    delta_ms: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.start_s < 0 or self.duration_s < 0:
            raise ValueError(f"fault times must be non-negative, got start_s={self.start_s} duration_s={self.duration_s}")
        if isinstance(self.targets, str):
            live = PARTITION_LIVE_SPECS if self.kind == "partition" else NODE_LIVE_SPECS
            if self.targets not in live:
                raise ValueError(f"{self.kind} targets {self.targets!r}: a live spec is one of {', '.join(live)}")
        elif not self.targets:
            raise ValueError(f"{self.kind} needs at least one target broker")

    @property
    def end_s(self) -> float:
        return round(self.start_s + self.duration_s, 6)

    def start_value(self, brokers: Sequence[int]) -> dict[str, Any]:
        """The value of this fault's start op, as the package takes it."""
        if self.kind == "partition":
            if isinstance(self.targets, str):
                return {"topology": self.targets}
            isolated = sorted(self.targets)
            rest = [b for b in brokers if b not in isolated]
            if not rest:
                raise ValueError(f"a partition must leave some broker outside {isolated}")
            blocked = sorted([a, b] for a in isolated for b in rest) + sorted([b, a] for a in isolated for b in rest)
            return {"topology": "isolate", "components": [isolated, rest], "blocked": sorted(blocked)}
        nodes = None if isinstance(self.targets, str) else sorted(self.targets)
        spec = self.targets if isinstance(self.targets, str) else "nodes"
        if self.kind == "clock":
            return {"kind": "bump", "delta_ms": self.delta_ms, "targets": spec, "nodes": nodes}
        return {"targets": spec, "nodes": nodes}

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "targets": self.targets if isinstance(self.targets, str) else list(self.targets),
                               "start_s": self.start_s, "duration_s": self.duration_s}
        if self.kind == "clock":
            out["delta_ms"] = self.delta_ms
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Fault":
        try:
            targets = raw["targets"]
            return cls(kind=str(raw["kind"]), targets=targets if isinstance(targets, str) else tuple(int(t) for t in targets),
                       start_s=float(raw["start_s"]), duration_s=float(raw["duration_s"]), delta_ms=int(raw.get("delta_ms", 0)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a fault is {{'kind', 'targets', 'start_s', 'duration_s'[, 'delta_ms']}}, got {raw!r}") from exc


def ops(schedule: Iterable[Fault], brokers: Sequence[int] | int, time_limit_s: float | None = None) -> list[dict[str, Any]]:
    """The nemesis ops of a schedule, in time order: each fault's start, and its stop when
    its duration ends, or earlier when the next fault of the same kind starts (a package
    holds one fault at a time: its stop undoes everything it did; a fault cut to nothing
    is left out). Stops past
    `time_limit_s` are left to the heal at the end of the main phase."""
    broker_ids = list(range(brokers)) if isinstance(brokers, int) else list(brokers)
    by_kind: dict[str, list[Fault]] = {}
    for fault in schedule:
        by_kind.setdefault(fault.kind, []).append(fault)
    timed: list[tuple[float, int, dict[str, Any]]] = []
    for kind, faults in by_kind.items():
        faults.sort(key=lambda f: f.start_s)
        for i, fault in enumerate(faults):
            stop_s = fault.end_s if i + 1 == len(faults) else min(fault.end_s, faults[i + 1].start_s)
            if stop_s <= fault.start_s:
                continue  # the next fault of its kind starts at the same instant: this one never takes effect
            timed.append((fault.start_s, 1, {"at_s": fault.start_s, "f": f"start-{kind}", "value": fault.start_value(broker_ids)}))
            if time_limit_s is None or stop_s < time_limit_s:
                timed.append((stop_s, 0, {"at_s": stop_s, "f": f"stop-{kind}", "value": None}))
    # At one instant a stop goes before a start, so a fault that ends as the next begins
    # does not undo the next one.
    timed.sort(key=lambda t: (t[0], t[1]))
    return [op for _, _, op in timed]


def schedule_json(schedule: Iterable[Fault], brokers: Sequence[int] | int, time_limit_s: float | None = None) -> str:
    """The `--fault-schedule` file of a schedule: its faults (for people) and its ops (what
    the run performs)."""
    faults = list(schedule)
    return json.dumps({"faults": [f.as_json() for f in faults], "ops": ops(faults, brokers, time_limit_s)},
                      indent=2, sort_keys=True) + "\n"


def _tenths(max_s: float, min_tenths: int = 0) -> st.SearchStrategy[float]:
    top = max(min_tenths, int(round(max_s / STEP_S)))
    return st.integers(min_tenths, top).map(lambda n: round(n * STEP_S, 1))


def _broker_sets(brokers: Sequence[int]) -> st.SearchStrategy[tuple[int, ...]]:
    """Non-empty sets of `brokers`, drawn as one flag per broker: each flag shrinks to off
    on its own (a set of three shrinks to any one of them, not only to its first), and no
    flag at all means the lowest id."""
    ids = sorted(brokers)
    return st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)).map(
        lambda flags: tuple(b for b, on in zip(ids, flags) if on) or (ids[0],))


def faults(kind: str, brokers: Sequence[int] | int, time_limit_s: float, *, max_duration_s: float | None = None,
           live_targets: bool = True) -> st.SearchStrategy[Fault]:
    """One fault of `kind` within the main phase (`time_limit_s`)."""
    broker_ids = list(range(brokers)) if isinstance(brokers, int) else sorted(brokers)
    if kind not in KINDS:
        raise ValueError(f"fault kind {kind!r} is not one of {', '.join(KINDS)}")
    if not broker_ids:
        raise ValueError("a fault schedule needs at least one broker")
    if time_limit_s <= 0:
        raise ValueError(f"time_limit_s must be positive, got {time_limit_s}")
    if kind == "partition":
        if len(broker_ids) < 2:
            raise ValueError("a partition needs at least two brokers")
        # Isolating a set from the rest is the same cut as isolating the rest, so the set
        # is drawn from all brokers but the last: every split, each once.
        targets: st.SearchStrategy[Any] = _broker_sets(broker_ids[:-1])
        live = PARTITION_LIVE_SPECS
    else:
        targets = _broker_sets(broker_ids)
        live = NODE_LIVE_SPECS
    if live_targets:
        targets = st.one_of(targets, st.sampled_from(live))
    longest = time_limit_s if max_duration_s is None else min(max_duration_s, time_limit_s)
    delta = st.integers(-MAX_CLOCK_DELTA_MS, MAX_CLOCK_DELTA_MS) if kind == "clock" else st.just(0)
    return st.builds(Fault, kind=st.just(kind), targets=targets,
                     start_s=_tenths(time_limit_s - STEP_S), duration_s=_tenths(longest, min_tenths=1), delta_ms=delta)


def fault_schedules(brokers: Sequence[int] | int = 3, time_limit_s: float = 60.0, kinds: Sequence[str] = ("kill", "partition"),
                    *, max_faults: int = 4, max_duration_s: float | None = None,
                    live_targets: bool = True) -> st.SearchStrategy[tuple[Fault, ...]]:
    """Schedules of up to `max_faults` faults of `kinds` on `brokers` (a count or the ids),
    each starting within the main phase of `time_limit_s` simulated seconds. Shrinks to
    fewer, earlier, shorter faults on fewer and lower brokers."""
    kinds = tuple(kinds)
    if not kinds:
        raise ValueError("kinds: name at least one fault kind")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"fault kinds {', '.join(unknown)} have no strategy; known: {', '.join(KINDS)}")
    if max_faults < 1:
        raise ValueError(f"max_faults must be at least 1, got {max_faults}")
    one = st.one_of(*(faults(k, brokers, time_limit_s, max_duration_s=max_duration_s, live_targets=live_targets)
                      for k in kinds))
    return st.lists(one, min_size=1, max_size=max_faults).map(tuple)


def workload_parameters(max_rate_hz: float = 100.0, max_concurrency: int = 5, *,
                        min_rate_hz: float = 10.0) -> st.SearchStrategy[dict[str, Any]]:
    """`rate_hz` and `concurrency` for a TestSpec, shrinking toward `min_rate_hz` from a
    single client. The floor matters: a run of a few simulated seconds at 1 op/s may write
    nothing, and a run that exercised nothing is 'unknown', not a finding."""
    if min_rate_hz < 1 or max_rate_hz < min_rate_hz or max_concurrency < 1:
        raise ValueError(f"need 1 <= min_rate_hz <= max_rate_hz and max_concurrency >= 1, got {min_rate_hz}, "
                         f"{max_rate_hz}, {max_concurrency}")
    return st.fixed_dictionaries({"rate_hz": st.integers(int(min_rate_hz), int(max_rate_hz)).map(float),
                                  "concurrency": st.integers(1, max_concurrency)})
