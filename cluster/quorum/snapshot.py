"""Snapshots of the state machine's image (KIP-630): one file per snapshot, named by its
id (end offset, epoch of the record before it), written atomically and fsynced, so the log
below the end offset can be deleted. Only the newest is kept once it is durable."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from cluster.storage.disk import Disk

_SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    end_offset: int  # the first offset not in the snapshot
    epoch: int  # the epoch of the record at end_offset - 1

    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{_SUFFIX}"


class SnapshotStore:
    def __init__(self, disk: Disk, directory: str) -> None:
        self._disk = disk
        self.directory = directory
        disk.makedirs(directory)
        self._ids = sorted(self._scan())
        self._cache: tuple[SnapshotId, bytes] | None = None

    def _scan(self) -> list[SnapshotId]:
        ids = []
        for name in self._disk.listdir(self.directory):
            match = _NAME.match(name)
            if match:
                ids.append(SnapshotId(int(match.group(1)), int(match.group(2))))
            elif name.endswith(_SUFFIX + ".tmp"):
                self._disk.remove(posixpath.join(self.directory, name))  # an interrupted write
        return ids

    @property
    def latest_id(self) -> SnapshotId | None:
        return self._ids[-1] if self._ids else None

    def read(self, snapshot_id: SnapshotId) -> bytes:
        if self._cache is not None and self._cache[0] == snapshot_id:
            return self._cache[1]
        data = self._disk.read_all(posixpath.join(self.directory, snapshot_id.file_name()))
        self._cache = (snapshot_id, data)
        return data

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Durable when this returns; older snapshots are then deleted."""
        if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"snapshot id {snapshot_id}: end offset and epoch must be >= 0")
        self._disk.write_atomic(posixpath.join(self.directory, snapshot_id.file_name()), data)
        self._cache = (snapshot_id, data)
        for older in [i for i in self._ids if i != snapshot_id]:
            if older < snapshot_id:
                self._disk.remove(posixpath.join(self.directory, older.file_name()))
        self._ids = sorted({*(i for i in self._ids if i >= snapshot_id), snapshot_id})
