"""partition: cut network links between brokers (nftables in the run's namespace).

The schedule picks a topology per fault (nemeses.targets) and records the directed pairs it
cuts in broker ids; invoke maps them to the brokers' addresses and installs them as one
atomic nftables transaction; stop and heal let everything through again. Only traffic
between broker addresses is cut: clients connect from 127.0.0.1 and keep reaching every
broker, as Jepsen's control node does (so brokers must bind their outgoing connections to
their own address for partitions to see them).

By default the controllers stand for the KRaft quorum, which in a real deployment runs on
the same machines as the brokers: they stay with the majority. A broker cut off from a strict
majority of the other brokers is cut off from every controller too (both ways), so an
isolated leader is fenced and loses leadership as it would in Kafka. With the nemesis option
node_kinds=broker,controller the controllers (node ids 1000...) are nodes of the topologies
like the brokers instead (every shape mixes them), and `active-controller` isolates the
active controller from every other node (`raft-leader` the quorum's Raft leader, ready or not).
In a simulated run `raft-leaders` chases the leader: the Raft leader is cut off at once, then
each later election's winner `after_ms` (the first) or `then_ms` (the rest) after it won, each
cut recorded as a start-partition of its own, until a stop, heal or next start.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from cluster.control import ClusterControl, ControlError
from nemeses.base import COLORS, NemesisError, NemesisOptions, alternate, fault_nodes, live_controller, live_primaries
from nemeses.net.nft import NftError, NftPartitioner
from nemeses.targets import (CHASING_TOPOLOGIES, CONTROLLER_SPECS, LIVE_SPECS, Topology, active_controller_topology,
                             partition_topology)


def partition_schedule(nodes: list[int], options: NemesisOptions, rng: random.Random) -> Iterator[dict]:
    """The partition package's schedule over brokers `nodes` (pure: needs no namespace)."""

    def starts() -> Iterator[dict]:
        while True:
            name = rng.choice(options.partition_targets)
            if name in CHASING_TOPOLOGIES:
                # Each chase's delays after an election, in tenths of 0-1 s (as logquake.strategies draws them).
                yield {"topology": name, "after_ms": rng.randrange(11) * 100.0, "then_ms": rng.randrange(11) * 100.0}
            elif name in LIVE_SPECS:
                yield {"topology": name}
            else:
                yield partition_topology(name, nodes, rng).as_value()

    return alternate("start-partition", "stop-partition", starts())


def brokers_without_majority(brokers: list[int], blocked: list[tuple[int, int]]) -> list[int]:
    """Brokers cut (in either direction) from a strict majority of the other brokers."""
    cut_off: dict[int, set[int]] = {b: set() for b in brokers}
    for src, dst in blocked:
        if src in cut_off and dst in cut_off:
            cut_off[src].add(dst)
            cut_off[dst].add(src)
    others = len(brokers) - 1
    return sorted(b for b, peers in cut_off.items() if others > 0 and len(peers) * 2 > others)


class PartitionPackage:
    name = "partition"
    color = COLORS["partition"]

    def __init__(self, control: ClusterControl, options: NemesisOptions,
                 partitioner: NftPartitioner | None = None) -> None:
        self.control = control
        self.options = options
        self._chase_stop: Callable[[], None] | None = None  # a chase's stop (_chase)
        try:
            self.partitioner = partitioner or NftPartitioner()
            self.partitioner.install()
        except NftError as error:
            raise NemesisError(f"the partition nemesis cannot run: {error}") from None

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        return partition_schedule(fault_nodes(self.control, self.options), self.options, rng)

    def invoke(self, f: str, value: Any) -> object:
        if f == "start-partition":
            return self.start(value)
        if f == "stop-partition":
            self._end_chase()
            self.partitioner.heal()
            return {"healed": True}
        raise ValueError(f"the partition nemesis has no op {f!r}")

    def _chase(self, value: dict) -> dict:
        """`raft-leaders` (simulation only): cut off the Raft leader now, then the winner of
        each later election, the first `after_ms` after it won and the later ones `then_ms`
        after, each cut replacing the last and recorded as a start-partition of its own,
        until a stop, heal or next start."""
        watch = getattr(self.control, "watch_elections", None)
        if watch is None:
            raise ValueError(f"the {value['topology']!r} partition follows elections as they happen: only a simulated "
                             "run has it")
        delays_s = [float(value.get(name, 0)) / 1000.0 for name in ("after_ms", "then_ms")]
        pending: dict[str, Any] = {"timer": None, "elections": 0}
        record = getattr(self.control, "record_nemesis", None)

        def cut(node: int, seen: dict) -> dict:
            everyone = self.control.nemesis_nodes(("broker", "controller"))
            topology = active_controller_topology(node, everyone, "raft-leader")
            self.apply(topology)
            return {**topology.as_value(), **value, **seen}

        def elected(seen: dict) -> None:
            pending["elections"] += 1
            if pending["timer"] is not None:
                pending["timer"].cancel()  # a newer leader: cut that one instead

            def go() -> None:
                pending["timer"] = None
                chased = {**seen, "chased": True}
                if record is None:
                    cut(seen["elected"], chased)
                else:
                    record("start-partition", {**value, **chased}, lambda: cut(seen["elected"], chased),
                           extra={"nemesis": self.name, "chased": True})

            pending["timer"] = self.control.schedule(delays_s[0 if pending["elections"] == 1 else 1], go)

        def stop() -> None:
            stop_watching()
            if pending["timer"] is not None:
                pending["timer"].cancel()
                pending["timer"] = None

        self._end_chase()
        nodes, seen = live_controller(self.control, "raft-leader")
        done = cut(nodes[0], seen) if nodes else {**value, **seen, "blocked": []}
        stop_watching = watch(elected)
        self._chase_stop = stop
        return done

    def _end_chase(self) -> None:
        """Stop the running chase, if any (a stop, heal or next start ends it)."""
        stop = self._chase_stop
        if stop is not None:
            stop()
            self._chase_stop = None

    def start(self, value: Any) -> dict:
        if not isinstance(value, dict) or "topology" not in value:
            raise ValueError(f"start-partition needs a topology value, got {value!r}")
        if value["topology"] in CHASING_TOPOLOGIES:
            return self._chase(value)
        self._end_chase()
        extra: dict = {}
        if value["topology"] in CONTROLLER_SPECS:
            everyone = self.control.nemesis_nodes(("broker", "controller")) if hasattr(self.control, "nemesis_nodes") else []
            nodes, _ = live_controller(self.control, value["topology"])
            topology = active_controller_topology(nodes[0] if nodes else None, everyone, value["topology"])
            self.apply(topology)
            return topology.as_value()
        if value["topology"] in LIVE_SPECS:
            try:
                _, extra = live_primaries(self.control, self.options.primary_topics)
            except ControlError as error:
                return {"topology": value["topology"], "error": str(error), "blocked": []}
            # One entry per tested partition: 'primary' counts them.
            leaders = list(extra["leaders"].values())
            topology = partition_topology(value["topology"], fault_nodes(self.control, self.options), random.Random(0), primaries=leaders)
            cut = self.apply(topology)
            return {**topology.as_value(), **extra, **({"cut-from-controller": cut} if cut else {})}
        cut = self.apply(Topology.from_value(value))
        return {**value, **({"cut-from-controller": cut} if cut else {})}

    def apply(self, topology: Topology) -> list[int]:
        """Install the cuts; returns the brokers also cut off from the controllers (when the
        controllers stay with the majority)."""
        hosts = self.control.node_hosts() if hasattr(self.control, "node_hosts") else self.control.hosts()
        blocked = [(hosts[src], hosts[dst]) for src, dst in topology.blocked]
        placed = any(node in getattr(self.control, "controller_ids", ()) for pair in topology.blocked | topology.blocked_data
                     for node in pair) or topology.name in CONTROLLER_SPECS
        controllers = [] if placed or "controller" in self.options.node_kinds else (
            self.control.controller_hosts() if hasattr(self.control, "controller_hosts") else
            [h for h in [self.control.controller_host()] if h is not None])
        brokers = list(self.control.broker_ids)
        cut_from_controller = brokers_without_majority(brokers, list(topology.blocked)) if controllers else []
        for broker in cut_from_controller:
            for controller in controllers:
                blocked += [(hosts[broker], controller), (controller, hosts[broker])]
        self.partitioner.apply(blocked=blocked, blocked_data=[(hosts[src], hosts[dst]) for src, dst in topology.blocked_data])
        return cut_from_controller

    def heal(self) -> None:
        self._end_chase()
        self.partitioner.heal()
