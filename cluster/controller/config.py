"""Controller configuration under Kafka's property names (the same `--config k=v` mapping the
brokers get; the controller reads the keys that concern it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster.config import _bool, _int
from cluster.quorum.api import QuorumVoters


def _voters(node_id: int, text: str) -> str:
    """controller.quorum.voters checked: well formed, and naming this controller."""
    if not text:
        return ""
    voters = QuorumVoters.parse(text)
    if node_id not in voters.voters:
        raise ValueError(f"controller.quorum.voters={text!r} does not name this controller (node {node_id})")
    return voters.format()


def _elr_version(props: Mapping[str, str]) -> int:
    raw = str(props.get("eligible.leader.replicas.version", "1")).strip()
    if raw not in ("0", "1"):
        raise ValueError(f"eligible.leader.replicas.version={raw!r}: the feature level is 0 (off) or 1 (on)")
    return int(raw)


@dataclass(frozen=True)
class ControllerConfig:
    node_id: int
    host: str
    port: int
    data_dir: str
    properties: Mapping[str, str] = field(default_factory=dict)
    cluster_id: str = "logquake-cluster"
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    # Unsafe when true: a replica outside the ISR may be elected, losing committed records.
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable (topic configs override)
    # Eligible leader replicas (KIP-966): 1, Kafka 4.1's default for new clusters; 0 is the
    # older rule (unsafe with log.crash.lose.unflushed: the last ISR member is elected again
    # after a crash that lost its unflushed tail). Kafka's feature of the same name.
    eligible_leader_replicas_version: int = 1  # eligible.leader.replicas.version
    min_insync_replicas: int = 1  # min.insync.replicas (topic configs override): the ELR's threshold
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    producer_id_block_size: int = 1000  # our own: producer ids per AllocateProducerIds
    fetch_max_wait_cap_ms: int = 500  # our own: longest metadata long poll served
    socket_request_max_bytes: int = 104_857_600  # socket.request.max.bytes
    # KRaft's ID@HOST:PORT,...; empty: this controller is the only voter.
    quorum_voters: str = ""  # controller.quorum.voters

    @classmethod
    def from_properties(cls, node_id: int, host: str, port: int, data_dir: str, props: Mapping[str, str]) -> ControllerConfig:
        props = dict(props)
        if node_id < 0:
            raise ValueError(f"node id must be >= 0, got {node_id}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must lie in [0, 65535], got {port}")
        return cls(
            node_id=node_id,
            host=host,
            port=port,
            data_dir=data_dir,
            properties=props,
            cluster_id=props.get("cluster.id", "logquake-cluster"),
            broker_session_timeout_ms=_int(props, "broker.session.timeout.ms", 9000, 1),
            unclean_leader_election_enable=_bool(props, "unclean.leader.election.enable", False),
            eligible_leader_replicas_version=_elr_version(props),
            min_insync_replicas=_int(props, "min.insync.replicas", 1, 1),
            num_partitions=_int(props, "num.partitions", 1, 1),
            default_replication_factor=_int(props, "default.replication.factor", 1, 1),
            producer_id_block_size=_int(props, "producer.id.block.size", 1000, 1),
            socket_request_max_bytes=_int(props, "socket.request.max.bytes", 104_857_600, 16),
            quorum_voters=_voters(node_id, props.get("controller.quorum.voters", "").strip()),
        )
