"""Hypothesis strategies for fault schedules of simulated runs (`logquake test --sim`).

A schedule is a tuple of `Fault`s: which fault (`kind`, a nemesis package: kill, pause,
partition, clock, disk, link-delay, link-loss, link-duplicate, link-reorder), on which
brokers (`targets`: broker ids, or a live spec the package resolves when the fault starts:
"primaries", "primary" for partitions, and for kill and pause when `live_nodes` asks for it
(the broker leading the most tested partitions); for the link kinds, directed links between brokers,
the controller and the client host, as nemeses.link_faults takes them, or a live link target:
"client>primary", "client>primaries" (the client's links to the leaders) and the reverse,
resolved when the fault starts, drawn only when `live_links` names them), when (`start_s`,
simulated seconds after the main phase starts) and for how long (`duration_s`), and how
(`variant`: the disk fault, one of fsync-eio, disk-full, slow-fsync, torn-crash; `params`:
a link fault's delay_ms, jitter_ms, loss, duplicate, reorder, a slow fsync's delay_ms, a
torn crash's seed). `ops()` turns it into the nemesis ops a simulated run performs
(`--fault-schedule FILE` takes them as JSON, `schedule_json`).

Controllers (a metadata quorum, `--controllers 3` or 5): with `node_kinds` naming
"controller" (the nemesis option node_kinds=broker,controller of `logquake test`), kill,
pause and partition also take controller node ids (1000, 1001, ...) and the live spec
"active-controller" (the quorum's leader when the fault starts; as a partition, it cut off
from every other node), and, only when `live_nodes` asks for it, "raft-leader" (the leader
of the highest Raft epoch, its LeaderChange committed or not) and, for partitions,
"raft-leaders" (a chase: the Raft leader cut off, then each later election's winner
`after_ms` or `then_ms` after it won, its two params), and link faults take the
links between controllers and between a controller and a broker. A partition whose set holds a controller (or every broker) cuts it
from every other node, brokers and controllers alike; a set of brokers only is cut from the
other brokers, and the partition package places the controllers by its node_kinds option
(with "controller" they reach every node; by default they stay with the brokers' majority). Clock and disk faults stay on brokers: a controller's elections run
on its monotonic clock, and its disk has no fault door. Without "controller" in node_kinds
(the default) a schedule is drawn exactly as before.

Starts are anchored (`anchored=True`, the default): about half of the faults after the first
start from an earlier fault of the schedule instead of anywhere in the run, at its start or
inside it, or at or after its end, by an offset of 0, up to a second, or up to the longest
fault. The losses hunts look for need faults that overlap or follow closely (a kill inside a
pause, a second cut soon after a partition), which starts drawn independently over the run
rarely give. A drawn schedule is still plain faults with absolute times (the anchor is how it
was drawn, not part of it); the anchor shrinks toward none and its offset toward 0.
`anchored=False` draws every start on its own, as before.

The strategy is built to shrink well: Hypothesis deletes faults (fewer), lowers times and
durations toward 0 (earlier, shorter, in steps of 0.1 s), and targets shrink toward the
fewest brokers with the lowest ids, explicit ids before live specs; link targets toward one
link, the first (0>1); link settings toward the smallest delay and probability; disk faults
toward the first variant (fsync-eio), the shortest slow fsync and torn-crash seed 0. A
user's own test::

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
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

# The link-fault packages (nemeses.link_faults.LINK_FAULT_NAMES) and the disk package's
# faults (nemeses.base.DISK_KINDS), spelled out so that a user's strategy imports no nemeses
# (tests/logquake/test_strategies.py checks they match).
LINK_KINDS: tuple[str, ...] = ("link-delay", "link-loss", "link-duplicate", "link-reorder")
DISK_VARIANTS: tuple[str, ...] = ("fsync-eio", "disk-full", "slow-fsync", "torn-crash")
LINK_HOSTS: tuple[str, ...] = ("controller", "client")
# Live link targets (nemeses.targets.LIVE_LINK_SPECS, spelled out as above), simplest first:
# the client's link to the busiest leader, to every leader, then the answers' way.
LIVE_LINK_SPECS: tuple[str, ...] = ("client>primary", "client>primaries", "primary>client", "primaries>client")
# The packages a schedule can name, and the ones whose targets are broker sets.
NODE_KINDS: tuple[str, ...] = ("kill", "pause", "clock", "disk")
KINDS: tuple[str, ...] = ("kill", "pause", "partition", "clock", "disk", *LINK_KINDS)
# Each link kind's settings (LinkFault's fields): their names, and per name the integer range
# drawn and the divisor that turns it into the value (probabilities are drawn in percent).
LINK_PARAMS: dict[str, tuple[tuple[str, int, int, int], ...]] = {
    "link-delay": (("delay_ms", 1, 512, 1), ("jitter_ms", 0, 512, 1)),
    "link-loss": (("loss", 1, 100, 100),),
    "link-duplicate": (("duplicate", 5, 100, 100),),
    "link-reorder": (("delay_ms", 4, 256, 1), ("reorder", 10, 90, 100)),
}
SLOW_FSYNC_MS = (16, 512)
NODE_LIVE_SPECS: tuple[str, ...] = ("primaries",)
PARTITION_LIVE_SPECS: tuple[str, ...] = ("primary", "primaries")
# The quorum's leader, resolved when the fault starts (nemeses.targets): kill and pause take
# it as a node, partition as a topology cutting it off from every other node.
CONTROLLER_LIVE_SPECS: tuple[str, ...] = ("active-controller",)
# Live node specs drawn only when a schedule asks for them (`live_nodes`). "raft-leader": the
# leader of the highest Raft epoch whether its LeaderChange is committed or not
# (nemeses.targets). Cutting a leader off inside the window between its election and its
# LeaderChange reaching the others (Raft's Figure 8) needs it: active-controller names
# only a leader that has committed it. "primary" (kill and pause; partitions draw it
# anyway): the broker leading the most tested partitions when the fault starts ("kill the
# leader"). After a pause of two brokers fenced them it is the lone in-sync leader, whose
# kill is min ISR 1's loss; measured, it did not speed that hunt up (1 of 3 seeds in 240 s),
# whose loss mostly comes from a pause of every broker, where the kill must take the broker
# fenced last before anyone is fenced; so no hunt entry asks for it.
LIVE_NODE_SPECS: tuple[str, ...] = ("raft-leader", "primary", "raft-leaders")
# The live node specs that name a controller (the rest name a broker).
CONTROLLER_LIVE_NODE_SPECS: tuple[str, ...] = ("raft-leader", "raft-leaders")
# Partitions that chase an event (nemeses.targets.CHASING_TOPOLOGIES, spelled out as above),
# drawn only when `live_nodes` names them: "raft-leaders" cuts off the Raft leader when it
# starts, then every later election's winner (each cut replacing the last), the first
# `after_ms` after it won, the later ones `then_ms` after (its two params). Raft's Figure 8
# needs a cut inside the ~0.3 s after each of two elections, which cuts at drawn tenths of an
# 8-s run hit about once in 1,000 schedules; a chase hits it whenever its delays do.
CHASING_SPECS: tuple[str, ...] = ("raft-leaders",)
CHASE_PARAMS: tuple[str, ...] = ("after_ms", "then_ms")
AFTER_ELECTION_TENTHS = 10  # each delay is drawn in tenths of a second, 0-1 s
CONTROLLER_KINDS: tuple[str, ...] = ("kill", "pause", "partition", *LINK_KINDS)
# nemeses.targets.NODE_KINDS and cluster.sim.cluster.CONTROLLER_ID, spelled out as above.
NODE_KIND_NAMES: tuple[str, ...] = ("broker", "controller")
FIRST_CONTROLLER_ID = 1000
STEP_S = 0.1  # times and durations are whole tenths of a simulated second: they shrink in steps and print exactly
MAX_CLOCK_DELTA_MS = 60_000


Node = int | str
Link = tuple[Node, Node]


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` on `targets` from `start_s` for `duration_s` simulated seconds.
    `delta_ms` is a clock fault's jump (0 for the other kinds); `variant` a disk fault's kind
    (DISK_VARIANTS, "" for the other kinds); `params` a link fault's settings, a slow fsync's
    delay_ms or a torn crash's seed, as (name, value) pairs. A link fault's `targets` are
    directed links (from, to) between broker ids, "controller" and "client"."""

    kind: str
    targets: tuple[int, ...] | tuple[Link, ...] | str
    start_s: float
    duration_s: float
    delta_ms: int = 0
    variant: str = ""
    params: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.start_s < 0 or self.duration_s < 0:
            raise ValueError(f"fault times must be non-negative, got start_s={self.start_s} duration_s={self.duration_s}")
        # One spelling per fault (as JSON writes them back, sorted), so equal faults compare equal.
        object.__setattr__(self, "params", tuple(sorted(self.params)))
        if self.kind in LINK_KINDS:
            self._check_link()
            return
        if self.kind == "disk":
            if self.variant not in DISK_VARIANTS:
                raise ValueError(f"a disk fault's variant {self.variant!r} is not one of {', '.join(DISK_VARIANTS)}")
            if self.variant == "torn-crash" and (isinstance(self.targets, str) or len(self.targets) != 1):
                raise ValueError(f"a torn-crash is the power loss of one broker, got targets {self.targets!r}")
        elif self.kind == "partition" and self.targets in CHASING_SPECS:
            if self.variant or tuple(name for name, _ in self.params) != CHASE_PARAMS or min(dict(self.params).values()) < 0:
                raise ValueError(f"partition[{self.targets}] takes the params {', '.join(CHASE_PARAMS)} (ms, >= 0), "
                                 f"got {self.params!r}")
        elif self.variant or self.params:
            raise ValueError(f"{self.kind} takes no variant or params, got {self.variant!r} {self.params!r}")
        if isinstance(self.targets, str):
            live = PARTITION_LIVE_SPECS if self.kind == "partition" else NODE_LIVE_SPECS
            if self.kind in CONTROLLER_KINDS:
                live += CONTROLLER_LIVE_SPECS + tuple(n for n in LIVE_NODE_SPECS if n not in CHASING_SPECS or self.kind == "partition")
            if self.targets not in live:
                raise ValueError(f"{self.kind} targets {self.targets!r}: a live spec is one of {', '.join(live)}")
        elif not self.targets:
            raise ValueError(f"{self.kind} needs at least one target broker")

    def _check_link(self) -> None:
        if isinstance(self.targets, str):
            if self.targets not in LIVE_LINK_SPECS:
                raise ValueError(f"{self.kind} needs at least one link (from, to) or a live link target "
                                 f"({', '.join(LIVE_LINK_SPECS)}), got {self.targets!r}")
        elif not self.targets:
            raise ValueError(f"{self.kind} needs at least one link (from, to), got {self.targets!r}")
        for link in () if isinstance(self.targets, str) else self.targets:
            if not isinstance(link, tuple) or len(link) != 2 or link[0] == link[1] or set(link) == set(LINK_HOSTS):
                raise ValueError(f"{self.kind}: {link!r} is not a link between two nodes (client-controller carries nothing)")
            for node in link:
                if not (node in LINK_HOSTS or (isinstance(node, int) and not isinstance(node, bool) and node >= 0)):
                    raise ValueError(f"{self.kind}: node {node!r} is not a broker id, 'controller' or 'client'")
        names = {name for name, *_ in LINK_PARAMS[self.kind]}
        given = dict(self.params)
        if set(given) != names:
            raise ValueError(f"{self.kind} needs params {', '.join(sorted(names))}, got {self.params!r}")

    @property
    def end_s(self) -> float:
        return round(self.start_s + self.duration_s, 6)

    def start_value(self, brokers: Sequence[int], controllers: Sequence[int] = ()) -> dict[str, Any]:
        """The value of this fault's start op, as the package takes it, on a cluster of
        `brokers` and `controllers` (node ids); ValueError naming a target it lacks."""
        if self.kind in LINK_KINDS and isinstance(self.targets, str):
            return {"target": self.targets, "fault": dict(self.params)}
        if self.kind in LINK_KINDS:
            missing = sorted({n for link in self.targets for n in link
                              if isinstance(n, int) and n not in brokers and n not in controllers})
            if missing:
                raise ValueError(f"{self.kind}: broker(s) {missing} are not among {list(brokers)}"
                                 + (f" nor controller(s) {list(controllers)}" if controllers else ""))
            links = [list(link) for link in self.targets]
            return {"target": "link" if len(links) == 1 else "subset", "links": links, "fault": dict(self.params)}
        if not isinstance(self.targets, str):
            self._check_nodes(brokers, controllers)
        if self.kind == "disk":
            nodes = None if isinstance(self.targets, str) else sorted(self.targets)
            value: dict[str, Any] = {"kind": self.variant, "targets": self.targets if nodes is None else "nodes",
                                     "nodes": nodes, **dict(self.params)}
            if self.variant == "torn-crash":
                value["corrupt"] = True
            return value
        if self.kind == "partition":
            if self.targets in CHASING_SPECS:
                return {"topology": self.targets, **dict(self.params)}
            if isinstance(self.targets, str):
                return {"topology": self.targets}
            isolated = sorted(self.targets)
            # A set of brokers only: the controllers stay with the majority (the package cuts
            # a broker without a majority from them), as before controllers were targets. A
            # set holding a controller, or every broker of a quorum's cluster: cut off from
            # every other node.
            placed = any(n in controllers for n in isolated) or (len(controllers) > 1 and set(brokers) <= set(isolated))
            rest = [n for n in [*brokers, *(controllers if placed else ())] if n not in isolated]
            if not rest:
                raise ValueError(f"a partition must leave some {'node' if placed else 'broker'} outside {isolated}")
            blocked = sorted([a, b] for a in isolated for b in rest) + sorted([b, a] for a in isolated for b in rest)
            return {"topology": "isolate", "components": [isolated, rest], "blocked": sorted(blocked)}
        nodes = None if isinstance(self.targets, str) else sorted(self.targets)
        spec = self.targets if isinstance(self.targets, str) else "nodes"
        if self.kind == "clock":
            return {"kind": "bump", "delta_ms": self.delta_ms, "targets": spec, "nodes": nodes}
        return {"targets": spec, "nodes": nodes}

    def _check_nodes(self, brokers: Sequence[int], controllers: Sequence[int]) -> None:
        """Every target is a broker, or a controller for the kinds that take one."""
        takes = controllers if self.kind in CONTROLLER_KINDS else ()
        stray = sorted(n for n in self.targets if n not in brokers and n not in takes)  # type: ignore[operator]
        if not stray:
            return
        if self.kind in ("clock", "disk") and any(n in controllers for n in stray):  # type: ignore[operator]
            raise ValueError(f"{self.kind} targets {stray}: {self.kind} faults act on brokers {list(brokers)} only, "
                             "not on controllers")
        raise ValueError(f"{self.kind} targets {stray}, which are neither brokers {list(brokers)} nor controllers "
                         f"{list(controllers)}")

    def as_json(self) -> dict[str, Any]:
        targets: Any = self.targets
        if not isinstance(targets, str):
            targets = [list(t) if isinstance(t, tuple) else t for t in targets]
        out: dict[str, Any] = {"kind": self.kind, "targets": targets, "start_s": self.start_s, "duration_s": self.duration_s}
        if self.kind == "clock":
            out["delta_ms"] = self.delta_ms
        if self.variant:
            out["variant"] = self.variant
        if self.params:
            out["params"] = dict(self.params)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Fault":
        try:
            kind, targets = str(raw["kind"]), raw["targets"]
            if isinstance(targets, str):
                parsed: Any = targets
            elif kind in LINK_KINDS:
                parsed = tuple(tuple(_node(n) for n in link) for link in targets)
            else:
                parsed = tuple(int(t) for t in targets)
            params = raw.get("params") or {}
            return cls(kind=kind, targets=parsed, start_s=float(raw["start_s"]), duration_s=float(raw["duration_s"]),
                       delta_ms=int(raw.get("delta_ms", 0)), variant=str(raw.get("variant", "")),
                       params=tuple((str(k), v) for k, v in params.items()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a fault is {{'kind', 'targets', 'start_s', 'duration_s'[, 'delta_ms', 'variant', "
                             f"'params']}}, got {raw!r}") from exc


def _node(raw: Any) -> Node:
    return raw if isinstance(raw, str) else int(raw)


def controller_ids(controllers: Sequence[int] | int) -> list[int]:
    """Controller node ids from a count (1000, 1001, ...) or the ids themselves."""
    if isinstance(controllers, int):
        return list(range(FIRST_CONTROLLER_ID, FIRST_CONTROLLER_ID + controllers))
    return sorted(controllers)


def ops(schedule: Iterable[Fault], brokers: Sequence[int] | int, time_limit_s: float | None = None,
        controllers: Sequence[int] | int = 1) -> list[dict[str, Any]]:
    """The nemesis ops of a schedule, in time order: each fault's start, and its stop when
    its duration ends, or earlier when the next fault of the same kind starts (a package
    holds one fault at a time: its stop undoes everything it did; a fault cut to nothing
    is left out). Stops past
    `time_limit_s` are left to the heal at the end of the main phase. `controllers` (a
    count or the node ids) are the targets a controller fault may name."""
    broker_ids = list(range(brokers)) if isinstance(brokers, int) else list(brokers)
    controller_list = controller_ids(controllers)
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
            timed.append((fault.start_s, 1, {"at_s": fault.start_s, "f": f"start-{kind}", "value": fault.start_value(broker_ids, controller_list)}))
            if time_limit_s is None or stop_s < time_limit_s:
                timed.append((stop_s, 0, {"at_s": stop_s, "f": f"stop-{kind}", "value": None}))
    # At one instant a stop goes before a start, so a fault that ends as the next begins
    # does not undo the next one.
    timed.sort(key=lambda t: (t[0], t[1]))
    return [op for _, _, op in timed]


def schedule_json(schedule: Iterable[Fault], brokers: Sequence[int] | int, time_limit_s: float | None = None,
                  controllers: Sequence[int] | int = 1) -> str:
    """The `--fault-schedule` file of a schedule: its faults (for people) and its ops (what
    the run performs)."""
    faults = list(schedule)
    return json.dumps({"faults": [f.as_json() for f in faults], "ops": ops(faults, brokers, time_limit_s, controllers)},
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


def fault_links(brokers: Sequence[int], controllers: Sequence[int] = (),
                node_kinds: Sequence[str] = ("broker",)) -> list[Link]:
    """Every directed link a link fault can take, in a fixed order: between brokers, and
    between each broker and the controller and the client host (nemeses.link_faults). With
    "controller" in `node_kinds`, the controllers are named by node id (`controllers`)
    instead of "controller": the links between them and to and from the brokers (only
    those, when "broker" is not in `node_kinds`)."""
    if "controller" not in node_kinds:
        nodes: list[Node] = [*sorted(brokers), *LINK_HOSTS]
        return [(a, b) for a in nodes for b in nodes if a != b and {a, b} != set(LINK_HOSTS)]
    quorum = set(controllers)
    nodes = [*sorted(brokers), *sorted(controllers), "client"]
    return [(a, b) for a in nodes for b in nodes if a != b
            and not ("client" in (a, b) and (a in quorum or b in quorum))  # clients never reach a controller
            and ("broker" in node_kinds or a in quorum or b in quorum)]


def _link_sets(links: list[Link]) -> st.SearchStrategy[tuple[Link, ...]]:
    """One directed link; every link to and from one node; or any set of links (a flag per
    link, shrinking off). Shrinks toward one link, the first."""
    nodes: list[Node] = list(dict.fromkeys(n for link in links for n in link))
    return st.one_of(
        st.sampled_from(links).map(lambda link: (link,)),
        st.sampled_from(nodes).map(lambda node: tuple(link for link in links if node in link)),
        st.lists(st.booleans(), min_size=len(links), max_size=len(links)).map(
            lambda flags: tuple(link for link, on in zip(links, flags) if on) or (links[0],)))


def _link_params(kind: str) -> st.SearchStrategy[tuple[tuple[str, float], ...]]:
    def value(n: int, divisor: int) -> float:
        return float(n) if divisor == 1 else round(n / divisor, 2)

    fields = [st.integers(lo, hi).map(lambda n, d=divisor: value(n, d)) for _, lo, hi, divisor in LINK_PARAMS[kind]]
    names = [name for name, *_ in LINK_PARAMS[kind]]
    return st.tuples(*fields).map(lambda values: tuple(zip(names, values)))


def _disk_faults(broker_ids: list[int], node_sets: st.SearchStrategy[tuple[int, ...]], live_targets: bool,
                 start: st.SearchStrategy[float], duration: st.SearchStrategy[float]) -> st.SearchStrategy[Fault]:
    """Disk faults: the variant drawn first (shrinking toward fsync-eio), then what it needs.
    One strategy, not a one_of per variant, which Hypothesis would flatten into the kinds'
    one_of and so draw disk faults four times as often as any other kind."""
    targets: st.SearchStrategy[Any] = node_sets
    if live_targets:
        targets = st.one_of(targets, st.sampled_from(NODE_LIVE_SPECS))
    one_broker = st.sampled_from(broker_ids).map(lambda b: (b,))

    @st.composite
    def disk(draw: Any) -> Fault:
        variant = draw(st.sampled_from(DISK_VARIANTS))
        params: tuple = ()
        if variant == "slow-fsync":
            params = (("delay_ms", draw(st.integers(*SLOW_FSYNC_MS))),)
        elif variant == "torn-crash":
            params = (("seed", draw(st.integers(0, 2**32 - 1))),)
        return Fault("disk", draw(one_broker if variant == "torn-crash" else targets), draw(start), draw(duration),
                     variant=variant, params=params)

    return disk()


def _live_links(names: Sequence[str], node_kinds: Sequence[str]) -> list[str]:
    """`names` in LIVE_LINK_SPECS order (the order they shrink in); ValueError for an unknown
    one, or when brokers are not targets (the live links run between the client and them)."""
    unknown = [n for n in names if n not in LIVE_LINK_SPECS]
    if unknown:
        raise ValueError(f"live links {', '.join(unknown)}: choose from {', '.join(LIVE_LINK_SPECS)}")
    if "broker" not in node_kinds:
        raise ValueError("live links run between the client and the leading brokers: node_kinds must name broker")
    return [n for n in LIVE_LINK_SPECS if n in names]


def _live_nodes(names: Sequence[str], quorum: Sequence[int], on_brokers: bool = True) -> tuple[str, ...]:
    """`names` in LIVE_NODE_SPECS order; ValueError for an unknown one, for raft-leader
    without a quorum's controllers among the targets (it names a controller), and for
    primary without the brokers (it names one)."""
    unknown = [n for n in names if n not in LIVE_NODE_SPECS]
    if unknown:
        raise ValueError(f"live nodes {', '.join(unknown)}: choose from {', '.join(LIVE_NODE_SPECS)}")
    of_controllers = [n for n in names if n in CONTROLLER_LIVE_NODE_SPECS]
    if of_controllers and not quorum:
        raise ValueError(f"live nodes {', '.join(of_controllers)} name a controller of a metadata quorum: node_kinds "
                         "must name controller (with --controllers 3 or 5)")
    of_brokers = [n for n in names if n not in CONTROLLER_LIVE_NODE_SPECS]
    if of_brokers and not on_brokers:
        raise ValueError(f"live nodes {', '.join(of_brokers)} name a broker: node_kinds must name broker")
    return tuple(n for n in LIVE_NODE_SPECS if n in names)


def _at_most(brokers: Sequence[int], max_targets: int) -> st.SearchStrategy[tuple[int, ...]]:
    """Sets of 1..`max_targets` of `brokers`, shrinking toward fewer and lower ids."""
    return st.lists(st.sampled_from(sorted(brokers)), min_size=1, max_size=max_targets, unique=True).map(
        lambda ids: tuple(sorted(ids)))


def _quorum(controllers: Sequence[int] | int, node_kinds: Sequence[str]) -> list[int]:
    """The controller ids a schedule may target: none unless `node_kinds` names "controller"
    (ValueError for an unknown kind, or for controller faults without a quorum)."""
    kinds = tuple(node_kinds)
    unknown = [k for k in kinds if k not in NODE_KIND_NAMES]
    if unknown or not kinds:
        raise ValueError(f"node_kinds {', '.join(unknown) or '(empty)'}: choose from {', '.join(NODE_KIND_NAMES)}")
    if "controller" not in kinds:
        return []
    ids = controller_ids(controllers)
    if len(ids) < 2:
        raise ValueError(f"node_kinds=controller needs a metadata quorum (--controllers 3 or 5), got {len(ids)} "
                         "controller(s)")
    return ids


def faults(kind: str, brokers: Sequence[int] | int, time_limit_s: float, *, max_duration_s: float | None = None,
           live_targets: bool = True, max_targets: int | None = None, controllers: Sequence[int] | int = 1,
           node_kinds: Sequence[str] = ("broker",), live_links: Sequence[str] = (),
           live_nodes: Sequence[str] = ()) -> st.SearchStrategy[Fault]:
    """One fault of `kind` within the main phase (`time_limit_s`). `max_targets` bounds the
    nodes a kill, pause, clock or disk fault takes at once (and then leaves out the live
    specs, which may name more). With "controller" in `node_kinds`, kill, pause, partition
    and link faults draw among the `controllers` too (a count or the node ids), and "broker"
    left out of it draws those kinds among the controllers only. `live_links` (of
    LIVE_LINK_SPECS) are drawn by link faults as often as explicit link sets, which they
    shrink toward ("client>primary" first). `live_nodes` (of LIVE_NODE_SPECS: "raft-leader"
    on a quorum's controllers, drawn by kill, pause and partition; "primary", the busiest
    leader, drawn by kill and pause) are drawn as often as explicit node sets and as the
    other live specs, and shrink toward those."""
    broker_ids = list(range(brokers)) if isinstance(brokers, int) else sorted(brokers)
    if kind not in KINDS:
        raise ValueError(f"fault kind {kind!r} is not one of {', '.join(KINDS)}")
    if not broker_ids:
        raise ValueError("a fault schedule needs at least one broker")
    if time_limit_s <= 0:
        raise ValueError(f"time_limit_s must be positive, got {time_limit_s}")
    quorum = _quorum(controllers, node_kinds)
    on_brokers = "broker" in node_kinds
    asked = _live_nodes(live_nodes, quorum, on_brokers)
    if not on_brokers and kind not in CONTROLLER_KINDS:
        raise ValueError(f"{kind} faults act on brokers only: node_kinds=controller leaves them nothing to target")
    # The nodes this kind's sets are drawn from: brokers first, so sets shrink toward fewer controllers.
    nodes = [*(broker_ids if on_brokers else []), *(quorum if kind in CONTROLLER_KINDS else [])]
    if max_targets is not None:
        if kind not in NODE_KINDS:
            raise ValueError(f"max_targets bounds the brokers of {', '.join(NODE_KINDS)} faults, not {kind}")
        if max_targets < 1:
            raise ValueError(f"max_targets of {kind} must be at least 1, got {max_targets}")
        if max_targets < len(nodes):
            live_targets = False
    longest = time_limit_s if max_duration_s is None else min(max_duration_s, time_limit_s)
    start, duration = _tenths(time_limit_s - STEP_S), _tenths(longest, min_tenths=1)
    if kind in LINK_KINDS:
        links = fault_links(broker_ids, quorum, node_kinds if quorum else ("broker",))
        link_targets: st.SearchStrategy[Any] = _link_sets(links)
        if live_links:
            link_targets = st.one_of(st.sampled_from(_live_links(live_links, node_kinds)), link_targets)
        return st.builds(Fault, kind=st.just(kind), targets=link_targets, start_s=start, duration_s=duration,
                         params=_link_params(kind))
    node_sets = _broker_sets(nodes) if max_targets is None or max_targets >= len(nodes) \
        else _at_most(nodes, max_targets)
    if kind == "disk":
        return _disk_faults(broker_ids, node_sets, live_targets, start, duration)
    if kind == "partition":
        if len(broker_ids) < 2 and not quorum:
            raise ValueError("a partition needs at least two brokers")
        # Isolating a set from the rest is the same cut as isolating the rest, so the set
        # is drawn from all nodes but the last: every split, each once. (A set of brokers
        # only keeps the controllers with the majority, so with controllers drawn too the
        # last broker is kept: isolating it alone is not isolating everyone else.)
        sets = broker_ids[:-1] if not quorum else (nodes[:-1] if on_brokers else nodes)
        targets: st.SearchStrategy[Any] = _broker_sets(sets)
        live = (PARTITION_LIVE_SPECS if on_brokers else ()) + (CONTROLLER_LIVE_SPECS if quorum else ())
    else:
        targets = node_sets
        live = (NODE_LIVE_SPECS if on_brokers else ()) + (CONTROLLER_LIVE_SPECS if quorum and kind in CONTROLLER_KINDS else ())
    if not live_targets and max_targets is not None and quorum and kind in CONTROLLER_KINDS:
        live = CONTROLLER_LIVE_SPECS  # the active controller is one node: within any bound
        live_targets = True
    # Explicit sets first, then the live specs, then the asked-for ones: the order they shrink in.
    branches = [targets]
    if live_targets and live:
        branches.append(st.sampled_from(live))
    # One node each: within any max_targets. A partition draws "primary" among its own live specs.
    asked = tuple(n for n in asked if (n in CONTROLLER_LIVE_NODE_SPECS or kind in ("kill", "pause"))
                  and (n not in CHASING_SPECS or kind == "partition"))
    if asked and kind in CONTROLLER_KINDS:
        branches.append(st.sampled_from(asked))
    if len(branches) > 1:
        targets = st.one_of(*branches)
    delta = st.integers(-MAX_CLOCK_DELTA_MS, MAX_CLOCK_DELTA_MS) if kind == "clock" else st.just(0)
    if kind == "partition" and set(asked) & set(CHASING_SPECS):
        # A chase's delays after each election, in tenths (toward 0); the other targets drop them.
        tenths = st.integers(0, AFTER_ELECTION_TENTHS)
        return st.builds(_partition, targets=targets, start_s=start, duration_s=duration, delays=st.tuples(tenths, tenths))
    return st.builds(Fault, kind=st.just(kind), targets=targets, start_s=start, duration_s=duration, delta_ms=delta)


def _partition(targets: Any, start_s: float, duration_s: float, delays: tuple[int, ...]) -> Fault:
    chase = targets in CHASING_SPECS
    params = tuple((name, float(n * 100)) for name, n in zip(CHASE_PARAMS, delays)) if chase else ()
    return Fault("partition", targets, start_s, duration_s, params=params)


def fault_schedules(brokers: Sequence[int] | int = 3, time_limit_s: float = 60.0, kinds: Sequence[str] = ("kill", "partition"),
                    *, max_faults: int = 4, max_duration_s: float | None = None,
                    live_targets: bool = True,
                    max_targets: Mapping[str, int] | None = None, controllers: Sequence[int] | int = 1,
                    node_kinds: Sequence[str] = ("broker",), live_links: Sequence[str] = (),
                    anchored: bool = True, live_nodes: Sequence[str] = ()) -> st.SearchStrategy[tuple[Fault, ...]]:
    """Schedules of up to `max_faults` faults of `kinds` on `brokers` (a count or the ids),
    each starting within the main phase of `time_limit_s` simulated seconds. Shrinks to
    fewer, earlier, shorter faults on fewer and lower brokers. `max_targets` bounds, per
    kind, the nodes one fault takes ({"kill": 1}: one node down at a time, since a kind
    holds one fault at a time). `node_kinds` ("broker", "controller" or both) says whether
    kill, pause, partition and link faults also take the `controllers` of a metadata quorum
    (a count or the node ids; the module docstring says how). `anchored` lets a fault start
    from an earlier one (the module docstring says how). `live_links` (LIVE_LINK_SPECS)
    are drawn by the link kinds besides explicit links: "client>primary" holds the client's
    requests to the busiest leader and not those to a coordinator elsewhere. `live_nodes`
    (LIVE_NODE_SPECS: "raft-leader", with "controller" in `node_kinds`; "primary") are
    drawn by kill, pause and partition (primary: kill and pause) besides their other targets."""
    kinds = tuple(kinds)
    if not kinds:
        raise ValueError("kinds: name at least one fault kind")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"fault kinds {', '.join(unknown)} have no strategy; known: {', '.join(KINDS)}")
    if max_faults < 1:
        raise ValueError(f"max_faults must be at least 1, got {max_faults}")
    bounds = dict(max_targets or {})
    stray = sorted(set(bounds) - set(kinds))
    if stray:
        raise ValueError(f"max_targets names {', '.join(stray)}, which is not among the kinds {', '.join(kinds)}")
    if live_nodes and not set(kinds) & {"kill", "pause", "partition"}:
        raise ValueError(f"live nodes {', '.join(live_nodes)} need kill, pause or partition among the kinds")
    chases = [n for n in live_nodes if n in CHASING_SPECS]
    if chases and "partition" not in kinds:
        raise ValueError(f"live nodes {', '.join(chases)} chase with partitions: partition must be among the kinds")
    if live_links and not set(kinds) & set(LINK_KINDS):
        raise ValueError(f"live links {', '.join(live_links)} need a link kind among the kinds ({', '.join(LINK_KINDS)})")
    one = st.one_of(*(faults(k, brokers, time_limit_s, max_duration_s=max_duration_s, live_targets=live_targets,
                             max_targets=bounds.get(k), controllers=controllers, node_kinds=node_kinds,
                             live_links=live_links if k in LINK_KINDS else (),
                             live_nodes=live_nodes) for k in kinds))
    if not anchored or max_faults == 1:
        return st.lists(one, min_size=1, max_size=max_faults).map(tuple)
    longest = time_limit_s if max_duration_s is None else min(max_duration_s, time_limit_s)
    drafts = st.tuples(one, _anchors(max_faults, longest))
    return st.lists(drafts, min_size=1, max_size=max_faults).map(lambda d: _place(d, time_limit_s))


# How a fault's start may follow an earlier fault of its schedule (`anchored`): from within it
# (offset from its start, held inside it) or after its end (offset from its end).
ANCHOR_MODES: tuple[str, ...] = ("inside", "after")
Anchor = tuple[int, str, int]  # (which earlier fault, counted back from the one anchored; mode; offset in tenths)


def _anchors(max_faults: int, longest_s: float) -> st.SearchStrategy[Anchor | None]:
    """No anchor (the start drawn on its own, what shrinking tends to), or an earlier fault
    to start from. The losses the hunts look for need faults that overlap or follow closely
    (a kill inside a pause, a cut just after a partition); starts drawn uniformly over the
    run rarely do. The offset is 0 (the same instant as the other fault's start or end: some
    windows are shorter than a tenth, e.g. a kill within a flush interval of a pause), within
    a second (timeouts and elections), or anywhere up to the longest fault, about a third of
    the time each, and shrinks toward 0."""
    top = int(round(longest_s / STEP_S))
    if top < 1:
        offsets: st.SearchStrategy[int] = st.just(0)
    else:
        offsets = st.one_of(st.just(0), st.integers(1, min(10, top)), st.integers(0, top))
    return st.one_of(st.none(), st.tuples(st.integers(0, max_faults - 2), st.sampled_from(ANCHOR_MODES), offsets))


def _place(drafts: list[tuple[Fault, Anchor | None]], time_limit_s: float) -> tuple[Fault, ...]:
    """The schedule's faults with each anchored start resolved against the fault it names
    (already placed), kept within the main phase."""
    last_tenth = int(round(time_limit_s / STEP_S)) - 1
    placed: list[Fault] = []
    for fault, anchor in drafts:
        if anchor is not None and placed:
            back, mode, offset = anchor
            base = placed[-1 - back % len(placed)]
            start_tenths, duration_tenths = int(round(base.start_s / STEP_S)), int(round(base.duration_s / STEP_S))
            if mode == "inside":
                tenths = start_tenths + min(offset, duration_tenths - 1)
            else:
                tenths = start_tenths + duration_tenths + offset
            fault = replace(fault, start_s=round(min(tenths, last_tenth) * STEP_S, 1))
        placed.append(fault)
    return tuple(placed)


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
