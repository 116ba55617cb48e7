"""A controller's Raft node: builds the metadata quorum (cluster/quorum/raft.py) for a
controller from its config and the I/O its runtime injects, so the process (main.py) and the
simulator (cluster/sim/cluster.py) build it the same way.

The voters are `controller.quorum.voters`; without it the controller is the only voter.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

from cluster.broker.env import Clock, Endpoint, Outbound, Rng, Scheduler
from cluster.controller.config import ControllerConfig
from cluster.protocol.versions import ApiKey, VersionRange
from cluster.quorum.api import MetadataQuorum, QuorumListener, QuorumVoters


def quorum_available() -> bool:
    """Whether this checkout has the Raft quorum (cluster/quorum/raft.py)."""
    return importlib.util.find_spec("cluster.quorum.raft") is not None


def voters_of(config: ControllerConfig) -> QuorumVoters:
    if config.quorum_voters:
        return QuorumVoters.parse(config.quorum_voters)
    return QuorumVoters({config.node_id: Endpoint(config.node_id, config.host, config.port)})


def quorum_versions() -> Mapping[ApiKey, VersionRange]:
    """The quorum's APIs a controller serves (Vote, BeginQuorumEpoch, ...)."""
    from cluster.quorum.rpc import QUORUM_VERSIONS

    return QUORUM_VERSIONS


def raft_factory(config: ControllerConfig, disk: Any, clock: Clock, scheduler: Scheduler, rng: Rng, outbound: Outbound,
                 observer: Callable[[Any], None] | None = None) -> Callable[[QuorumListener], MetadataQuorum]:
    """The factory Controller takes: a RaftQuorum of this controller's voters on its data dir."""
    from cluster.quorum.config import QuorumConfig
    from cluster.quorum.raft import RaftQuorum

    voters = voters_of(config)
    quorum_config = QuorumConfig.from_properties(dict(config.properties))

    def build(listener: QuorumListener) -> MetadataQuorum:
        return RaftQuorum(config.node_id, voters, quorum_config, disk, config.data_dir, clock, scheduler, rng, outbound, listener,
                          observer=observer)

    return build
