"""The contract between the metadata quorum (Raft, `cluster/quorum/`) and the controller that
runs on top of it (`cluster/controller/`).

The quorum replicates opaque record batches; the controller decides what they mean. A
controller appends only while its node leads, and acts on a record only once the quorum
reports it committed (on a majority of voters), so a controller that loses leadership
never acts on a decision the next leader does not have. Every node (leader and followers)
learns committed records, in log order, through `QuorumListener.on_commit`, so standby
controllers keep a current image and take over without a replay from scratch.

With one voter the quorum commits an append as soon as it is durable (a majority of one),
which is the single controller's behaviour before the quorum existed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cluster.broker.env import ClientInfo, Endpoint, Reply


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What a node believes about the quorum now."""

    node_id: int
    epoch: int
    leader_id: int | None  # None while an election is under way
    high_watermark: int  # records below it are committed
    log_end_offset: int


class QuorumListener(Protocol):
    """What the quorum tells the state machine above it (the controller)."""

    def on_commit(self, base_offset: int, records: list[bytes], epoch: int) -> None:
        """Records from `base_offset` on are committed; called in offset order, each record
        once per process lifetime, on every node (after `load_snapshot` when one is used)."""

    def on_become_leader(self, epoch: int) -> None:
        """This node leads `epoch` and everything committed before the epoch has been
        delivered through on_commit: the controller may now append and act."""

    def on_resign(self, epoch: int, new_leader_id: int | None) -> None:
        """This node no longer leads (a higher epoch was seen, or it shut down): the
        controller stops appending; appends not yet committed are answered as failed."""

    def snapshot(self) -> tuple[int, bytes]:
        """(end offset, bytes) of the state machine's image as of its last applied record."""

    def load_snapshot(self, end_offset: int, data: bytes) -> None:
        """Replace the state machine's image with a snapshot (a follower far behind)."""


AppendDone = Callable[[int | None, str | None], None]
"""(base offset, None) once the appended records are committed; (None, why) when they never
will be (leadership lost before commit; the caller answers its request with NOT_CONTROLLER)."""


class MetadataQuorum(Protocol):
    """A Raft node (sans-I/O: clock, scheduler, rng, disk and outbound connections injected)."""

    @property
    def state(self) -> QuorumState: ...

    @property
    def is_leader(self) -> bool: ...

    def start(self) -> None: ...

    def shutdown(self) -> None: ...

    def append(self, records: list[bytes], on_done: AppendDone) -> int | None:
        """Leader only: append one atomic batch; returns its base offset, or None (and
        on_done is never called) when this node does not lead."""

    def handle(self, request: Any, client: ClientInfo, reply: Reply) -> bool:
        """Serve a quorum RPC (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of the
        metadata log, FetchSnapshot, DescribeQuorum); False when `request` is not one."""

    def read_committed(self, offset: int, max_bytes: int) -> list[bytes | memoryview]:
        """Committed record batches from `offset` (brokers' metadata fetches)."""

    def latest_snapshot(self) -> tuple[int, int] | None:
        """(end offset, epoch) of the newest snapshot this node holds, None before the first:
        a broker whose metadata fetch is below the log start is told it, as KRaft's leader
        tells an observer, and fetches it with FetchSnapshot."""


@dataclass(frozen=True, slots=True)
class QuorumVoters:
    """`controller.quorum.voters`: `ID@HOST:PORT,...` as in KRaft."""

    voters: Mapping[int, Endpoint]

    @classmethod
    def parse(cls, text: str) -> QuorumVoters:
        voters: dict[int, Endpoint] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            node, sep, address = item.partition("@")
            host, colon, port = address.rpartition(":")
            if not sep or not colon or not node.isdigit() or not port.isdigit() or not host:
                raise ValueError(f"controller.quorum.voters: {item!r} is not ID@HOST:PORT")
            node_id = int(node)
            if node_id in voters:
                raise ValueError(f"controller.quorum.voters: node {node_id} is named twice")
            voters[node_id] = Endpoint(node_id, host, int(port))
        if not voters:
            raise ValueError("controller.quorum.voters: no voter named")
        return cls(voters)

    def format(self) -> str:
        return ",".join(f"{e.node_id}@{e.host}:{e.port}" for e in self.voters.values())
