"""partition: cut network links between brokers (nftables in the run's namespace).

The schedule picks a topology per fault (nemeses.targets) and records the directed pairs it
cuts in broker ids; invoke maps them to the brokers' addresses and installs them as one
atomic nftables transaction; stop and heal let everything through again. Only traffic
between broker addresses is cut: clients connect from 127.0.0.1 and keep reaching every
broker, as Jepsen's control node does (so brokers must bind their outgoing connections to
their own address for partitions to see them).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from cluster.control import ClusterControl, ControlError
from nemeses.base import COLORS, NemesisError, NemesisOptions, alternate, live_primaries
from nemeses.net.nft import NftError, NftPartitioner
from nemeses.targets import LIVE_SPECS, Topology, partition_topology


def partition_schedule(nodes: list[int], options: NemesisOptions, rng: random.Random) -> Iterator[dict]:
    """The partition package's schedule over brokers `nodes` (pure: needs no namespace)."""

    def starts() -> Iterator[dict]:
        while True:
            name = rng.choice(options.partition_targets)
            if name in LIVE_SPECS:
                yield {"topology": name}
            else:
                yield partition_topology(name, nodes, rng).as_value()

    return alternate("start-partition", "stop-partition", starts())


class PartitionPackage:
    name = "partition"
    color = COLORS["partition"]

    def __init__(self, control: ClusterControl, options: NemesisOptions,
                 partitioner: NftPartitioner | None = None) -> None:
        self.control = control
        self.options = options
        try:
            self.partitioner = partitioner or NftPartitioner()
            self.partitioner.install()
        except NftError as error:
            raise NemesisError(f"the partition nemesis cannot run: {error}") from None

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        return partition_schedule(self.control.broker_ids, self.options, rng)

    def invoke(self, f: str, value: Any) -> object:
        if f == "start-partition":
            return self.start(value)
        if f == "stop-partition":
            self.partitioner.heal()
            return {"healed": True}
        raise ValueError(f"the partition nemesis has no op {f!r}")

    def start(self, value: Any) -> dict:
        if not isinstance(value, dict) or "topology" not in value:
            raise ValueError(f"start-partition needs a topology value, got {value!r}")
        extra: dict = {}
        if value["topology"] in LIVE_SPECS:
            try:
                leaders, extra = live_primaries(self.control, self.options.primary_topics)
            except ControlError as error:
                return {"topology": value["topology"], "error": str(error), "blocked": []}
            topology = partition_topology(value["topology"], self.control.broker_ids, random.Random(0), primaries=leaders)
            self.apply(topology)
            return {**topology.as_value(), **extra}
        self.apply(Topology.from_value(value))
        return dict(value)

    def apply(self, topology: Topology) -> None:
        hosts = self.control.hosts()
        self.partitioner.apply(
            blocked=[(hosts[src], hosts[dst]) for src, dst in topology.blocked],
            blocked_data=[(hosts[src], hosts[dst]) for src, dst in topology.blocked_data],
        )

    def heal(self) -> None:
        self.partitioner.heal()
