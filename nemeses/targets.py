"""Which brokers a fault hits, and which directed links a partition cuts (pure, seeded).

Node specs (Jepsen's vocabulary, for kill, pause and clock):
    one             a random broker
    minority        floor(n/2) random brokers (at least one)
    minority-third  floor(n/3) random brokers (at least one)
    majority        floor(n/2)+1 random brokers
    all             every broker
    primaries       the leaders of the topic-partitions: live state, resolved when the
                    fault is performed and recorded in its completion
    primary         the broker leading the most tested partitions (ties: the lowest id),
                    live state: after the other in-sync replicas were fenced it is the
                    last one standing, which a kill then takes down with what it alone holds
    active-controller  the active controller of the metadata quorum (live state)
    raft-leader     the quorum's Raft leader: the leader of the highest epoch, whether its
                    LeaderChange is committed (it is then the active controller) or not yet
                    (live state; on real back ends DescribeQuorum's leader)

With the nemesis option node_kinds=broker,controller the nodes are the brokers and the
controllers (node ids 1000...), so every spec and topology mixes them.

Partition topologies (for partition). A topology is a set of directed pairs (src, dst):
dst drops what src sends. `one_way` pairs drop only data segments (see nemeses.net.nft).
    one             one random broker isolated from the rest
    majority        a clean split: floor(n/2) brokers | the rest
    minority-third  floor(n/3) brokers | the rest
    majorities-ring brokers on a shuffled ring, each hearing only the majority window centred
                    on itself: every broker sees a majority, no two see the same one
    bridge          two halves that cannot talk, plus one broker that talks to both
    one-way         one random broker's messages to every other broker are lost, while
                    theirs still reach it
    primaries       every leader in a component of its own (live state, see above). When the
                    tested partitions' leaders are spread over every broker (the queue
                    workload's do) that is every broker alone: no majority is left, so no
                    new leader is elected until the heal
    primary         the broker leading the most tested partitions (ties: the lowest id)
                    isolated from the rest, and so from the controller (live state): the
                    majority elects new leaders while it still serves its clients
    active-controller  the active controller isolated from every other node (live state):
                    the other controllers elect a new one, the brokers follow it
    raft-leader     the Raft leader (see above) isolated from every other node (live state):
                    it can be cut off inside the window between winning its election and
                    its LeaderChange reaching the other voters, where no controller is active
    raft-leaders    a chase (simulation only): the Raft leader isolated from every other
                    node when the fault starts, then the winner of every later election,
                    each cut replacing the last: the first winner `after_ms` after it won,
                    the later ones `then_ms` after, until the fault stops. Raft's Figure 8
                    needs a cut inside the ~0.3 s after each of two elections: cuts at drawn
                    times land there about once in twenty each, a chase whenever its
                    delays are right

Live link targets (for the simulated link faults, nemeses.link_faults): directed links
between the client host and the leaders, resolved when the fault starts.
    client>primary    the client's link to the broker leading the most tested partitions
                      (ties: the lowest id): its Produces and Fetches there, not the
                      requests it sends the other brokers (a coordinator elsewhere)
    client>primaries  the client's links to every broker leading a tested partition
    primary>client, primaries>client  the same links the other way (the answers)
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

NODE_SPECS: tuple[str, ...] = ("one", "minority", "minority-third", "majority", "all", "primaries", "primary")
PARTITION_TOPOLOGIES: tuple[str, ...] = ("one", "majority", "minority-third", "majorities-ring", "bridge", "one-way", "primaries",
                                         "primary")
LIVE_SPECS = frozenset({"primaries", "primary", "active-controller", "raft-leader"})
# The controllers' own live targets, as node specs and as topologies: chosen only by name
# (the broker-only lists above are what the default schedules and their tests cover).
CONTROLLER_SPECS: tuple[str, ...] = ("active-controller", "raft-leader")
# Partition topologies that chase an event, cutting again after each (the simulation's only).
CHASING_TOPOLOGIES: tuple[str, ...] = ("raft-leaders",)
# Live link targets: "<from>><to>" between the client host and the leaders (live_links).
LIVE_LINK_SPECS: tuple[str, ...] = ("client>primary", "client>primaries", "primary>client", "primaries>client")
# What the node specs and topologies pick among (nemesis option node_kinds).
NODE_KINDS: tuple[str, ...] = ("broker", "controller")

Pair = tuple[int, int]


def majority_size(n: int) -> int:
    return n // 2 + 1


def choose_nodes(spec: str, nodes: Sequence[int], rng: random.Random) -> list[int] | None:
    """The brokers `spec` picks among `nodes`, sorted; None for a live spec (primaries)."""
    if spec not in NODE_SPECS + CONTROLLER_SPECS:
        raise ValueError(f"unknown node target {spec!r}; known: {', '.join(NODE_SPECS + CONTROLLER_SPECS)}")
    if not nodes:
        raise ValueError("no brokers to choose from")
    if spec in LIVE_SPECS:
        return None
    ordered = sorted(nodes)
    n = len(ordered)
    count = {"one": 1, "minority": max(1, majority_size(n) - 1), "minority-third": max(1, n // 3),
             "majority": majority_size(n), "all": n}[spec]
    return sorted(rng.sample(ordered, count))


def complete_grudge(components: Iterable[Iterable[int]]) -> set[Pair]:
    """Every directed pair whose ends are in different components."""
    groups = [set(c) for c in components]
    return {(src, dst) for i, a in enumerate(groups) for j, b in enumerate(groups) if i != j
            for src in a for dst in b}


@dataclass(frozen=True)
class Topology:
    """A partition: the directed pairs cut, in broker ids."""

    name: str
    blocked: frozenset[Pair] = frozenset()
    blocked_data: frozenset[Pair] = frozenset()
    components: tuple[tuple[int, ...], ...] = ()
    extra: dict = field(default_factory=dict, compare=False)

    def as_value(self) -> dict:
        """JSON-able description for the history."""
        value: dict = {"topology": self.name}
        if self.components:
            value["components"] = [list(c) for c in self.components]
        value.update(self.extra)
        value["blocked"] = sorted([list(p) for p in self.blocked])
        if self.blocked_data:
            value["blocked_data"] = sorted([list(p) for p in self.blocked_data])
        return value

    @classmethod
    def from_value(cls, value: dict) -> "Topology":
        return cls(
            name=value["topology"],
            blocked=frozenset((int(s), int(d)) for s, d in value.get("blocked", ())),
            blocked_data=frozenset((int(s), int(d)) for s, d in value.get("blocked_data", ())),
            components=tuple(tuple(int(n) for n in c) for c in value.get("components", ())),
        )


def _split(nodes: list[int], size: int) -> tuple[tuple[int, ...], ...]:
    return tuple(sorted(nodes[:size])), tuple(sorted(nodes[size:]))


def components_topology(name: str, components: Sequence[Sequence[int]]) -> Topology:
    parts = tuple(tuple(sorted(c)) for c in components if c)
    return Topology(name, blocked=frozenset(complete_grudge(parts)), components=parts)


def majorities_ring(ring: Sequence[int]) -> set[Pair]:
    """Directed grudges for brokers in ring order: each hears only the majority-sized window
    of ring neighbours centred on itself."""
    n = len(ring)
    m = majority_size(n)
    behind = (m - 1) // 2
    blocked = set()
    for i, dst in enumerate(ring):
        window = {ring[(i + k) % n] for k in range(-behind, m - behind)}
        blocked |= {(src, dst) for src in ring if src not in window}
    return blocked


def partition_topology(name: str, nodes: Sequence[int], rng: random.Random,
                       primaries: Iterable[int] | None = None) -> Topology:
    """The topology `name` over `nodes`. `primaries` is needed (only) for the live topologies:
    the leader of each tested partition, one entry per partition."""
    if name not in PARTITION_TOPOLOGIES + CONTROLLER_SPECS:
        raise ValueError(f"unknown partition topology {name!r}; known: {', '.join(PARTITION_TOPOLOGIES + CONTROLLER_SPECS)}")
    ordered = sorted(nodes)
    if len(ordered) < 2 and name != "primaries":
        return Topology(name, extra={"note": "fewer than two brokers: nothing to partition"})
    shuffled = list(ordered)
    rng.shuffle(shuffled)
    n = len(ordered)
    if name == "one":
        return components_topology(name, _split(shuffled, 1))
    if name == "majority":
        return components_topology(name, _split(shuffled, n // 2))
    if name == "minority-third":
        return components_topology(name, _split(shuffled, max(1, n // 3)))
    if name == "majorities-ring":
        return Topology(name, blocked=frozenset(majorities_ring(shuffled)), extra={"ring": shuffled})
    if name == "bridge":
        left, right = _split(shuffled, n // 2)
        bridge = shuffled[n // 2]
        blocked = {(s, d) for s, d in complete_grudge([left, right]) if bridge not in (s, d)}
        return Topology(name, blocked=frozenset(blocked), components=(left, right), extra={"bridge": bridge})
    if name == "one-way":
        src = shuffled[0]
        return Topology(name, blocked_data=frozenset((src, dst) for dst in ordered if dst != src),
                        extra={"from": src})
    if name in CONTROLLER_SPECS:
        raise ValueError(f"the {name!r} topology is built from the live state by active_controller_topology")
    if primaries is None:
        raise ValueError(f"the {name!r} topology needs the current leaders")
    led = [leader for leader in primaries if leader in ordered]
    if name == "primary":
        busiest = busiest_leader(led)
        if busiest is None:
            return Topology(name, extra={"note": "no broker leads a tested partition: nothing to partition"})
        return Topology(name, blocked=frozenset(complete_grudge([[busiest], [n for n in ordered if n != busiest]])),
                        components=((busiest,), tuple(n for n in ordered if n != busiest)),
                        extra={"isolated": busiest, "leads": led.count(busiest)})
    # primaries
    leaders = sorted(set(led))
    rest = [node for node in ordered if node not in leaders]
    return components_topology(name, [[leader] for leader in leaders] + [rest])


def active_controller_topology(active: int | None, nodes: Sequence[int], name: str = "active-controller") -> Topology:
    """The controller `active` (the one the live spec `name` of CONTROLLER_SPECS resolved
    to) cut off from every other node in `nodes` (brokers and the other controllers)."""
    if name not in CONTROLLER_SPECS:
        raise ValueError(f"unknown controller target {name!r}; known: {', '.join(CONTROLLER_SPECS)}")
    if active is None:
        what = "no active controller" if name == "active-controller" else "no Raft leader"
        return Topology(name, extra={"note": f"{what} known: nothing to partition"})
    rest = tuple(sorted(n for n in nodes if n != active))
    return Topology(name, blocked=frozenset(complete_grudge([[active], rest])), components=((active,), rest), extra={"isolated": active})


def busiest_leader(led: Sequence[int]) -> int | None:
    """The broker leading the most of `led` (one entry per tested partition; ties: the
    lowest id), None when nothing is led."""
    if not led:
        return None
    return min(set(led), key=lambda broker: (-list(led).count(broker), broker))


def live_links(spec: str, led: Sequence[int]) -> list[tuple[int | str, int | str]]:
    """The directed links a live link target names, given `led`: the leader of each tested
    partition, one entry per partition. Empty when no partition has a leader."""
    if spec not in LIVE_LINK_SPECS:
        raise ValueError(f"unknown live link target {spec!r}; known: {', '.join(LIVE_LINK_SPECS)}")
    source, destination = spec.split(">")
    live = destination if source == "client" else source
    busiest = busiest_leader(led)
    leaders = sorted(set(led)) if live == "primaries" else ([] if busiest is None else [busiest])
    return [("client", leader) if source == "client" else (leader, "client") for leader in leaders]
