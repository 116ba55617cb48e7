"""The contract between the harness and the fault packages, and the factory that builds them.

A package is a fault + its seeded schedule + its heal + its plot colour:

    schedule(rng)  pure and seeded: endless alternating {"f": "start-<name>", "value": ...}
                   / {"f": "stop-<name>", "value": None}. Target choice that does not depend
                   on live state (which brokers, which topology, how far to move a clock) is
                   made here, so the same seed gives the same fault schedule.
    invoke(f, v)   perform one scheduled op; returns what was done (JSON-able), including
                   any live choice (e.g. which brokers led partitions for 'primaries').
    heal()         undo every fault of this package; idempotent.

The harness spaces the ops by the nemesis interval and records them as nemesis ops.
`nemeses.combined.Combined` merges several packages into one schedule with quiet periods.

Wiring, for a run on the bundled cluster:

    ensure_private_namespace(command)            # nemeses.net.sandbox; first thing in the CLI
    clocks = BrokerClocks(run_dir / "clocks")    # cluster.control
    with LocalCluster(n, extra_env=clocks.extra_env) as cluster:
        control = ClusterControl(cluster, clocks)
        packages = build_packages(["kill", "partition"], control, NemesisOptions())
        ops = Combined(packages).schedule(rng)   # or each package's own schedule
        ...                                      # invoke ops; heal() every package at the end
    control.close()                              # libfaketime's shm files, by recorded pid
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from cluster.control import ClusterControl, ControlError
from nemeses.targets import CHASING_TOPOLOGIES, CONTROLLER_SPECS, NODE_KINDS, NODE_SPECS, PARTITION_TOPOLOGIES, busiest_leader

# The report's fault-band colours (harness/report/faults.py), kept equal so a band drawn
# from a package and one drawn from a history agree. They are stronger than Jepsen's pastel
# perf colours (#E9DCA0 partition, #E9A4A0 kill, #A0B1E9 pause, #A0E9E3 clock) and chosen
# apart from the ok/fail/info colours of operations.
COLORS: dict[str, str] = {
    "partition": "#e15759",
    "kill": "#7b4fa0",
    "pause": "#59a14f",
    "clock": "#2a9d8f",
    "brokers-down": "#b07aa1",
    "lone-leader-crash": "#8c564b",
    "latency": "#f28e2b",
    "bandwidth": "#edc948",
    "flaky": "#ff9da7",
    "disk": "#9c755f",
}
PACKAGE_NAMES: tuple[str, ...] = ("kill", "pause", "partition", "clock", "brokers-down", "lone-leader-crash")
# Faults on the proxied links (nemeses.toxics): the cluster runs with every link through a proxy.
PACKAGE_NAMES += ("latency", "bandwidth", "flaky")
# Faults of the brokers' disks through their FaultyDisk (nemeses.disk).
PACKAGE_NAMES += ("disk",)
DISK_KINDS: tuple[str, ...] = ("fsync-eio", "disk-full", "slow-fsync", "torn-crash")


class NemesisError(ValueError):
    """A package cannot be built as asked (unknown name, bad option, missing mechanism)."""


class NemesisPackage(Protocol):
    name: str
    color: str

    def schedule(self, rng: random.Random) -> Iterator[dict]: ...
    def invoke(self, f: str, value: Any) -> object: ...
    def heal(self) -> None: ...


@dataclass(frozen=True)
class NemesisOptions:
    # Node targets for kill, pause and clock; topologies for partition (nemeses.targets).
    db_targets: tuple[str, ...] = ("one", "minority", "majority", "all", "primaries")
    partition_targets: tuple[str, ...] = ("one", "majority", "majorities-ring", "bridge", "one-way", "primaries")
    # Topics whose leaders 'primaries' means; None: every topic but the internal ones.
    primary_topics: tuple[str, ...] | None = None
    clock_kinds: tuple[str, ...] = ("bump", "strobe")
    # Strobe periods are drawn from [2^lo, 2^10) ms. Jepsen goes down to 1 ms; each flip is
    # a file write in the harness process, so we start at 4 ms to spare a 2-core machine.
    strobe_min_period_exponent: int = 2
    # Probability that a round of the combined schedule is quiet (no fault).
    quiet_probability: float = 0.25
    # The proxied-link faults (latency, bandwidth, flaky; nemeses.toxics documents them).
    link_targets: tuple[str, ...] = ("one", "link", "direction", "all")
    link_kinds: tuple[str, ...] = ("client", "broker", "controller")
    latency_ms: int = 250
    jitter_ms: int = 50
    bandwidth_kb_per_s: int = 16
    flaky_kinds: tuple[str, ...] = ("reset_peer", "timeout", "slicer")
    flaky_toxicity_percent: int = 50
    # The disk faults the disk package draws from (nemeses.disk documents them).
    disk_kinds: tuple[str, ...] = DISK_KINDS
    # Which processes kill, pause, clock and partition pick among: the brokers (as before),
    # the controllers (node ids 1000...), or both; with 'controller' a partition places the
    # controllers in its shapes like any node instead of keeping them with the majority.
    node_kinds: tuple[str, ...] = ("broker",)

    def __post_init__(self) -> None:
        for name in ("db_targets", "partition_targets", "clock_kinds"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("link_targets", "link_kinds", "flaky_kinds"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.primary_topics is not None:
            object.__setattr__(self, "primary_topics", tuple(self.primary_topics))
        _check_choices("db_targets", self.db_targets, NODE_SPECS + CONTROLLER_SPECS)
        _check_choices("partition_targets", self.partition_targets, PARTITION_TOPOLOGIES + CONTROLLER_SPECS + CHASING_TOPOLOGIES)
        _check_choices("clock_kinds", self.clock_kinds, ("bump", "strobe"))
        if not (isinstance(self.strobe_min_period_exponent, int) and 0 <= self.strobe_min_period_exponent < 10):
            raise NemesisError(f"strobe_min_period_exponent {self.strobe_min_period_exponent!r} must be an int in [0, 10)")
        if not (0.0 <= self.quiet_probability < 1.0):
            raise NemesisError(f"quiet_probability {self.quiet_probability!r} must be in [0, 1)")
        from nemeses.toxics import check_link_options  # it imports this module

        check_link_options(self)
        object.__setattr__(self, "disk_kinds", tuple(self.disk_kinds))
        _check_choices("disk_kinds", self.disk_kinds, DISK_KINDS)
        object.__setattr__(self, "node_kinds", tuple(self.node_kinds))
        _check_choices("node_kinds", self.node_kinds, NODE_KINDS)

    @classmethod
    def from_object(cls, source: object) -> "NemesisOptions":
        """Options from any object with some same-named attributes, or with a
        `nemesis_options` mapping of strings as `--nemesis-option` gives them (a RunSpec);
        the rest keep their defaults."""
        if isinstance(source, NemesisOptions):
            return source
        if source is None:
            return cls()
        given = {f.name: getattr(source, f.name) for f in fields(cls) if getattr(source, f.name, None) is not None}
        given.update(parse_option_strings(getattr(source, "nemesis_options", None) or {}))
        return cls(**given)


# The options a run may set from the command line (`--nemesis-option key=value`), as
# strings: the target lists are comma lists. quiet_probability is left out because the
# combined schedule of a run takes the default (harness.run.combine).
LIST_OPTIONS: tuple[str, ...] = ("db_targets", "partition_targets", "clock_kinds")
INT_OPTIONS: tuple[str, ...] = ("strobe_min_period_exponent",)
LIST_OPTIONS += ("link_targets", "link_kinds", "flaky_kinds")
INT_OPTIONS += ("latency_ms", "jitter_ms", "bandwidth_kb_per_s", "flaky_toxicity_percent")
LIST_OPTIONS += ("disk_kinds",)
LIST_OPTIONS += ("node_kinds",)
SETTABLE_OPTIONS: tuple[str, ...] = LIST_OPTIONS + INT_OPTIONS


def parse_option_strings(raw: Mapping[str, str]) -> dict[str, Any]:
    """`{"partition_targets": "primaries,one"}` -> `{"partition_targets": ("primaries", "one")}`.
    Raises NemesisError naming an unknown option or a value that is not a number; the
    choices themselves are checked when NemesisOptions is built (`checked_options`)."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in LIST_OPTIONS:
            out[key] = tuple(part.strip() for part in str(value).split(",") if part.strip())
        elif key in INT_OPTIONS:
            try:
                out[key] = int(str(value))
            except ValueError:
                raise NemesisError(f"{key} {value!r} is not an integer") from None
        else:
            raise NemesisError(f"unknown nemesis option {key!r}; known: {', '.join(SETTABLE_OPTIONS)}")
    return out


def checked_options(raw: Mapping[str, str]) -> NemesisOptions:
    """The NemesisOptions that `--nemesis-option` strings give; raises NemesisError naming
    the bad key or value."""
    return NemesisOptions(**parse_option_strings(raw))


def _check_choices(name: str, chosen: Sequence[str], known: Sequence[str]) -> None:
    if not chosen:
        raise NemesisError(f"{name} is empty; choose from: {', '.join(known)}")
    for value in chosen:
        if value not in known:
            raise NemesisError(f"unknown {name} value {value!r}; known: {', '.join(known)}")


def build_packages(names: list[str], control: ClusterControl, options: object = None) -> list[NemesisPackage]:
    """One package per name, in the order given. Fails early, naming the problem, if a
    package's mechanism is missing (no private namespace for partitions, clocks not under
    control for clock skew)."""
    opts = NemesisOptions.from_object(options)
    if len(set(names)) != len(names):
        raise NemesisError(f"{names} names a nemesis twice")
    packages: list[NemesisPackage] = []
    for name in names:
        if name == "kill":
            from nemeses.kill import KillPackage
            packages.append(KillPackage(control, opts))
        elif name == "pause":
            from nemeses.pause import PausePackage
            packages.append(PausePackage(control, opts))
        elif name == "partition":
            from nemeses.partition import PartitionPackage
            refused = simulation_only(opts)
            if refused:
                raise NemesisError(refused)
            # A back end whose nodes are not in the run's namespace names the bridge they share
            # (cluster.docker_backend, cluster.docker_compose: nftables on the host's bridge).
            bridge_cut = getattr(control, "bridge_cut", None)
            partitioner = None
            if bridge_cut is not None:
                from nemeses.net.nft import bridge_partitioner
                cut = bridge_cut()
                partitioner = bridge_partitioner(cut.table, cut.subnet)
            packages.append(PartitionPackage(control, opts, partitioner=partitioner))
        elif name == "clock":
            from nemeses.clock import ClockPackage
            packages.append(ClockPackage(control, opts))
        elif name == "brokers-down":
            from nemeses.scripted import BrokersDownPackage
            packages.append(BrokersDownPackage(control, opts))
        elif name == "lone-leader-crash":
            from nemeses.scripted import LoneLeaderCrashPackage
            packages.append(LoneLeaderCrashPackage(control, opts))
        elif name == "latency":
            from nemeses.latency import LatencyPackage
            packages.append(LatencyPackage(control, opts))
        elif name == "bandwidth":
            from nemeses.bandwidth import BandwidthPackage
            packages.append(BandwidthPackage(control, opts))
        elif name == "flaky":
            from nemeses.flaky import FlakyPackage
            packages.append(FlakyPackage(control, opts))
        elif name == "disk":
            from nemeses.disk import DiskPackage
            packages.append(DiskPackage(control, opts))
        elif name.startswith("link-"):
            # Message faults on the simulated network's links: a real cluster's control is
            # refused there, naming --sim.
            from nemeses.link_faults import build_link_fault_packages
            packages.extend(build_link_fault_packages([name], control))
        else:
            raise NemesisError(f"unknown nemesis {name!r}; known: {', '.join(PACKAGE_NAMES)}")
    return packages


def simulation_only(options: NemesisOptions) -> str | None:
    """Why a real run cannot take these options (a chasing partition target follows the Raft
    elections as the simulation sees them), or None."""
    chases = [t for t in options.partition_targets if t in CHASING_TOPOLOGIES]
    if not chases:
        return None
    return (f"--nemesis-option partition_targets={chases[0]} follows the Raft elections as they happen: only a "
            "simulated run (--sim) has it")


def alternate(start_f: str, stop_f: str, start_values: Iterator[Any]) -> Iterator[dict]:
    """start, stop, start, stop, ... with the given start values."""
    for value in start_values:
        yield {"f": start_f, "value": value}
        yield {"f": stop_f, "value": None}


def live_primaries(control: ClusterControl, topics: Sequence[str] | None) -> tuple[list[int], dict]:
    """The brokers currently leading a partition of `topics` (all topics when None), and a
    JSON-able record of what was seen, for the completion."""
    leaders = control.leaders(topics)
    if topics is None:
        # Internal topics (__consumer_offsets, ...) would make every broker a primary.
        leaders = {tp: leader for tp, leader in leaders.items() if not tp.topic.startswith("__")}
    seen = {f"{tp.topic}-{tp.partition}": leader for tp, leader in sorted(leaders.items())}
    return sorted(set(leaders.values())), {"leaders": seen}


def live_leaders(control: ClusterControl, spec: str, topics: Sequence[str] | None) -> tuple[list[int], dict]:
    """The brokers the live broker spec `spec` names now: "primary", the one leading the most
    tested partitions (ties: the lowest id; none when nothing is led), else every leader
    ("primaries"); with what was seen, for the completion. A control that cannot read the
    leaders gives no broker and the error."""
    try:
        leaders, seen = live_primaries(control, topics)
    except ControlError as error:
        return [], {"error": str(error)}
    if spec != "primary":
        return leaders, seen
    busiest = busiest_leader(list(seen["leaders"].values()))
    return ([] if busiest is None else [busiest]), {**seen, "primary": busiest}


def live_controller(control: Any, spec: str) -> tuple[list[int], dict]:
    """The controller a live controller spec names now (nemeses.targets.CONTROLLER_SPECS),
    and a JSON-able record of it for the completion. `active-controller`: the quorum's
    ready leader (control.active_controller). `raft-leader`: the leader of the highest epoch
    whether its LeaderChange is committed or not: control.raft_leader (the simulation reads
    each controller's Raft state); a real cluster's control has none, and its
    active_controller already answers DescribeQuorum's leader, ready or not."""
    if spec == "active-controller":
        find = getattr(control, "active_controller", None)
        key, what = "active_controller", "no active controller known"
    elif spec == "raft-leader":
        find = getattr(control, "raft_leader", None) or getattr(control, "active_controller", None)
        key, what = "raft_leader", "no Raft leader known"
    else:
        raise ValueError(f"unknown controller target {spec!r}; known: active-controller, raft-leader")
    node = find() if find is not None else None
    return ([node], {key: node}) if node is not None else ([], {"error": what})


def fault_nodes(control: Any, options: NemesisOptions) -> list[int]:
    """The nodes kill, pause, clock and partition pick among (options.node_kinds): brokers,
    and the controllers when asked (a control without controllers gives brokers only)."""
    if "controller" in options.node_kinds and hasattr(control, "nemesis_nodes"):
        return list(control.nemesis_nodes(options.node_kinds))
    return list(control.broker_ids)
