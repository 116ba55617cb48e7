"""link-delay, link-loss, link-duplicate, link-reorder: message faults on chosen network links
of a simulated cluster (`logquake test --sim` only).

A real network can do these too (netem), but not reproducibly: which message is delayed,
lost or copied depends on timing no seed controls. In the simulation every draw comes from
the cluster's seeded RNG, so a run with these faults replays exactly. What each fault does
to a TCP connection (delay keeps a connection's order, loss is retransmitted, a duplicate
comes on a connection of its own, reorder overtakes other connections) is written down in
`cluster.sim.network`. Real-process runs refuse these packages, naming --sim.

Schedule (pure, seeded): alternating start/stop. Each start picks a target among the
brokers, the controller and the client host, then the fault's setting:
    node    every link to and from one node
    link    one directed link (from, to)
    subset  a random nonempty subset of the directed links (each with probability 1/2)
or, named in an op (a `--fault-schedule`, a hunt's `--live-links`; the seeded schedule draws
them only when the options list them), a live target between the client host and the
leaders, resolved when the fault starts from the leaders of the tested partitions (every
topic but the internal ones) and recorded in the completion with the links it took
(nemeses.targets.LIVE_LINK_SPECS):
    client>primary    the client's link to the broker leading the most tested partitions
    client>primaries  the client's links to every leader;  primary>client, primaries>client
Links between the client and the controller are left out: no traffic takes them.
    link-delay      delay 2^U[0,9) ms (1-512 ms) plus jitter up to as much again
    link-loss       loss U[0.01, 0.5); one start in five is total loss (a black hole that
                    TCP's retransmissions cross as soon as it ends, unlike a partition)
    link-duplicate  duplicate U[0.05, 1]
    link-reorder    delay 2^U[2,8) ms (4-256 ms), of which a fraction U[0.1, 0.9) of
                    messages skip (netem's reorder)
stop-<name> clears what the package set (its own tag: packages in one combined schedule
may overlap on a link, and their settings add up); heal does the same.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cluster.control import ControlError
from cluster.sim.link_fault import LinkFault, LinkFaultError
from nemeses.base import NemesisError, alternate, live_primaries
from nemeses.targets import LIVE_LINK_SPECS, live_links

LINK_FAULT_NAMES: tuple[str, ...] = ("link-delay", "link-loss", "link-duplicate", "link-reorder")
LINK_TARGETS: tuple[str, ...] = ("node", "link", "subset")
# Live targets (nemeses.targets.live_links): the client host's links to or from the leaders.
LIVE_LINK_TARGETS: tuple[str, ...] = LIVE_LINK_SPECS
# Plot colours (not in nemeses.base.COLORS: the report gives packages it does not know
# spare colours, and these never run on the bundled cluster).
LINK_FAULT_COLORS: dict[str, str] = {
    "link-delay": "#f1a340",
    "link-loss": "#998ec3",
    "link-duplicate": "#d8b365",
    "link-reorder": "#5ab4ac",
}
SIM_ONLY = "runs only in the simulation (logquake test --sim), where every message's fate comes from the seed"
TOTAL_LOSS_PROBABILITY = 0.2

Node = int | str


@runtime_checkable
class LinkFaultControl(Protocol):
    """What the link-fault packages need of a cluster: its brokers, and link faults settable
    by node (a broker id, "controller", "client") under a tag. `SimCluster` is one."""

    @property
    def broker_ids(self) -> list[int]: ...

    def set_link_fault(self, from_node: Node, to_node: Node, fault: LinkFault, tag: str = "") -> None: ...

    def set_node_fault(self, node: Node, fault: LinkFault, tag: str = "") -> None: ...

    def clear_link_faults(self, tag: str | None = None) -> None: ...


@dataclass(frozen=True)
class LinkFaultOptions:
    targets: tuple[str, ...] = LINK_TARGETS
    # Links of the controller and of the client host can be chosen besides broker links.
    with_controller: bool = True
    with_client: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))
        if not self.targets:
            raise NemesisError(f"link fault targets are empty; choose from: {', '.join(LINK_TARGETS)}")
        for target in self.targets:
            if target not in LINK_TARGETS + LIVE_LINK_TARGETS:
                raise NemesisError(f"unknown link fault target {target!r}; known: {', '.join(LINK_TARGETS + LIVE_LINK_TARGETS)}")


def fault_nodes(brokers: Sequence[int], options: LinkFaultOptions) -> list[Node]:
    return [*sorted(brokers), *(["controller"] if options.with_controller else []), *(["client"] if options.with_client else [])]


def fault_links(nodes: Sequence[Node]) -> list[tuple[Node, Node]]:
    """Every directed link between `nodes` that carries traffic, in a fixed order."""
    return [(a, b) for a in nodes for b in nodes if a != b and {a, b} != {"client", "controller"}]


def draw_fault(name: str, rng: random.Random) -> LinkFault:
    if name == "link-delay":
        delay_ms = round(2 ** rng.uniform(0, 9), 3)
        return LinkFault(delay_ms=delay_ms, jitter_ms=round(delay_ms * rng.random(), 3))
    if name == "link-loss":
        return LinkFault(loss=1.0 if rng.random() < TOTAL_LOSS_PROBABILITY else round(rng.uniform(0.01, 0.5), 3))
    if name == "link-duplicate":
        return LinkFault(duplicate=round(rng.uniform(0.05, 1.0), 3))
    if name == "link-reorder":
        return LinkFault(delay_ms=round(2 ** rng.uniform(2, 8), 3), reorder=round(rng.uniform(0.1, 0.9), 3))
    raise NemesisError(f"unknown link fault {name!r}; known: {', '.join(LINK_FAULT_NAMES)}")


def draw_target(nodes: Sequence[Node], options: LinkFaultOptions, rng: random.Random) -> dict[str, Any]:
    target = rng.choice(options.targets)
    if target in LIVE_LINK_TARGETS:
        return {"target": target}
    links = fault_links(nodes)
    if target == "node" or not links:
        return {"target": "node", "node": rng.choice(list(nodes))}
    if target == "link":
        return {"target": "link", "links": [list(rng.choice(links))]}
    chosen = [list(link) for link in links if rng.random() < 0.5]
    return {"target": "subset", "links": chosen or [list(rng.choice(links))]}


def link_fault_schedule(name: str, brokers: Sequence[int], options: LinkFaultOptions, rng: random.Random) -> Iterator[dict]:
    """The package's schedule over `brokers` (pure: needs no cluster)."""
    nodes = fault_nodes(brokers, options)
    if len(nodes) < 2:
        raise NemesisError(f"the {name} nemesis needs two nodes to put a link between; got {nodes}")

    def starts() -> Iterator[dict]:
        while True:
            target = draw_target(nodes, options, rng)
            yield {**target, "fault": draw_fault(name, rng).as_value()}

    return alternate(f"start-{name}", f"stop-{name}", starts())


def link_fault_control(name: str, control: object) -> LinkFaultControl:
    """`control` itself, or the simulated cluster a simulated run's ClusterControl carries as
    `sim` (nemeses.sim_control.SimControl); NemesisError naming --sim for anything else (a
    real cluster's ClusterControl)."""
    for candidate in (control, getattr(control, "sim", None)):
        if isinstance(candidate, LinkFaultControl):
            return candidate
    raise NemesisError(f"the {name} nemesis {SIM_ONLY}; {type(control).__name__} cannot set link faults")


class LinkFaultPackage:
    def __init__(self, name: str, control: object, options: LinkFaultOptions | None = None) -> None:
        if name not in LINK_FAULT_NAMES:
            raise NemesisError(f"unknown link fault {name!r}; known: {', '.join(LINK_FAULT_NAMES)}")
        self.name = name
        self.color = LINK_FAULT_COLORS[name]
        self.control = link_fault_control(name, control)
        # Where the live targets read the leaders: the simulated run's SimControl (the
        # nemeses' ClusterControl), when it has them.
        self.leaders_source = control if callable(getattr(control, "leaders", None)) else None
        self.options = options or LinkFaultOptions()

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        return link_fault_schedule(self.name, self.control.broker_ids, self.options, rng)

    def invoke(self, f: str, value: Any) -> object:
        if f == f"start-{self.name}":
            return self.start(value)
        if f == f"stop-{self.name}":
            self.heal()
            return {"cleared": True}
        raise ValueError(f"the {self.name} nemesis has no op {f!r}")

    def start(self, value: Any) -> dict:
        targets = LINK_TARGETS + LIVE_LINK_TARGETS
        if not isinstance(value, dict) or value.get("target") not in targets or "fault" not in value:
            raise ValueError(f"start-{self.name} needs a value with a target ({', '.join(targets)}) and a fault, got {value!r}")
        try:
            fault = LinkFault.from_value(value["fault"])
        except LinkFaultError as error:
            raise ValueError(f"start-{self.name}: {error}") from None
        # A start replaces what this package set before (a start without its stop).
        self.control.clear_link_faults(self.name)
        if value["target"] in LIVE_LINK_TARGETS:
            return self._start_live(value, fault)
        if value["target"] == "node":
            self.control.set_node_fault(value["node"], fault, tag=self.name)
        else:
            links = value.get("links")
            if not links:
                raise ValueError(f"start-{self.name}: target {value['target']!r} needs links, got {value!r}")
            for source, destination in links:
                self.control.set_link_fault(source, destination, fault, tag=self.name)
        return dict(value)

    def _start_live(self, value: dict, fault: LinkFault) -> dict:
        """Resolve a live target from the leaders now and fault its links; the completion
        records the leaders seen and the links taken (none, with the reason, when no leader
        is known)."""
        if self.leaders_source is None:
            raise ValueError(f"start-{self.name}: the live target {value['target']!r} needs the cluster's leaders, "
                             f"which {type(self.control).__name__} does not give (a simulated run's SimControl does)")
        try:
            _, seen = live_primaries(self.leaders_source, None)
        except ControlError as error:
            return {**value, "links": [], "error": str(error)}
        links = live_links(value["target"], list(seen["leaders"].values()))
        for source, destination in links:
            self.control.set_link_fault(source, destination, fault, tag=self.name)
        result = {**value, **seen, "links": [list(link) for link in links]}
        if not links:
            result["error"] = "no tested partition has a leader"
        return result

    def heal(self) -> None:
        self.control.clear_link_faults(self.name)


def build_link_fault_packages(names: Sequence[str], control: object, options: LinkFaultOptions | None = None) -> list[LinkFaultPackage]:
    """One package per name (each of LINK_FAULT_NAMES); NemesisError naming --sim when
    `control` cannot set link faults (a real cluster's ClusterControl)."""
    return [LinkFaultPackage(name, control, options) for name in names]
