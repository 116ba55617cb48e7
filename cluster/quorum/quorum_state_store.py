"""The durable election state (KRaft's `quorum-state` file): the current epoch, whom this
node voted for in it, and the leader it knows of.

Raft's safety rests on a voter never voting twice in an epoch and never going back to an
older epoch, across crashes too: so the file is written atomically and fsynced (the Disk's
`write_atomic`) before the node acts on a new epoch or answers a vote.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass

from cluster.storage.disk import Disk

STATE_FILE = "quorum-state"
_VERSION = 1


class CorruptQuorumStateError(ValueError):
    """The quorum-state file cannot be read; a node must not guess its epoch or vote."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    voted_for: int | None
    leader_id: int | None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch {self.epoch} is negative")


class QuorumStateStore:
    def __init__(self, disk: Disk, directory: str) -> None:
        self._disk = disk
        disk.makedirs(directory)
        self.path = posixpath.join(directory, STATE_FILE)
        self.writes = 0

    def read(self) -> ElectionState:
        """The stored state; epoch 0 with no vote and no leader for a new node."""
        if not self._disk.exists(self.path):
            return ElectionState(0, None, None)
        raw = self._disk.read_all(self.path)
        try:
            data = json.loads(raw.decode("utf-8"))
            if data.get("version") != _VERSION:
                raise CorruptQuorumStateError(f"{self.path}: unknown version {data.get('version')!r}")
            epoch = data["epoch"]
            voted_for = data["voted_for"]
            leader_id = data["leader_id"]
            if not isinstance(epoch, int) or epoch < 0:
                raise CorruptQuorumStateError(f"{self.path}: epoch {epoch!r} is not a non-negative integer")
            for name, value in (("voted_for", voted_for), ("leader_id", leader_id)):
                if value is not None and not isinstance(value, int):
                    raise CorruptQuorumStateError(f"{self.path}: {name} {value!r} is not a node id")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError, TypeError) as error:
            raise CorruptQuorumStateError(f"{self.path}: unreadable quorum state ({error})") from None
        return ElectionState(epoch, voted_for, leader_id)

    def write(self, state: ElectionState) -> None:
        """Durable when this returns."""
        data = {"version": _VERSION, "epoch": state.epoch, "voted_for": state.voted_for, "leader_id": state.leader_id}
        self._disk.write_atomic(self.path, json.dumps(data, sort_keys=True).encode("utf-8"))
        self.writes += 1
