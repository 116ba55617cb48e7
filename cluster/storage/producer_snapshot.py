"""Snapshots of the state a log rebuilds by replaying its batches (the producer state and
open transactions, Kafka's `<offset>.snapshot` files), and the interface that state offers
the log.

A snapshot at offset N holds the state after every batch below N, so opening a log reads the
newest good snapshot and replays only the batches from N on. The log writes one when it rolls
a segment (N: the new segment's base) and at a clean close (N: the log end), always after the
batches below N were fsynced; truncation deletes those past its offset before cutting the log.

File `<20-digit offset>.snapshot`, written whole with write_atomic:
  magic "LQPS", version (u16), offset (i64), payload length (u32), CRC-32C (u32) of the
  offset and payload, payload (the state's own encoding).
A snapshot whose size, magic, version, offset or CRC does not check out is never trusted.
"""

from __future__ import annotations

import posixpath
import struct
from typing import Protocol

import crc32c

from cluster.storage.batch import BatchHeader
from cluster.storage.disk import Bytes, Disk
from cluster.storage.txn_index import AbortedTxn

SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"LQPS"
_VERSION = 1
_HEAD = struct.Struct(">4sHqII")  # magic, version, offset, payload length, CRC-32C
_OFFSET = struct.Struct(">q")


class CorruptSnapshotError(ValueError):
    """A snapshot file that fails its checks."""


class ReplayedState(Protocol):
    """State a log keeps by replaying its batches in order (the broker's producer state)."""

    def clear(self) -> None:
        """Forget everything: the state of an empty log."""

    def replay(self, header: BatchHeader, control_batch: Bytes | None) -> AbortedTxn | None:
        """Apply one stored batch (a control batch comes with its bytes); returns the
        transaction it aborted, if it is an abort marker."""

    def snapshot(self) -> bytes:
        """The state, encoded."""

    def restore(self, payload: bytes) -> None:
        """Replace the state with a decoded snapshot; ValueError if it makes no sense."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    """The offset in a `<20 digits>.snapshot` name, or None for any other name."""
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def encode_snapshot(offset: int, payload: bytes) -> bytes:
    crc = crc32c.crc32c(_OFFSET.pack(offset) + payload)
    return _HEAD.pack(_MAGIC, _VERSION, offset, len(payload), crc) + payload


def decode_snapshot(data: bytes, *, offset: int) -> bytes:
    """The payload of a snapshot file named for `offset`; CorruptSnapshotError otherwise."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than the {_HEAD.size}-byte header")
    magic, version, stored_offset, length, crc = _HEAD.unpack_from(data)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptSnapshotError(f"magic {magic!r} version {version}, not {_MAGIC!r} version {_VERSION}")
    if stored_offset != offset:
        raise CorruptSnapshotError(f"it says offset {stored_offset}, its name {offset}")
    payload = data[_HEAD.size :]
    if len(payload) != length:
        raise CorruptSnapshotError(f"payload of {len(payload)} bytes, the header says {length}")
    if crc32c.crc32c(_OFFSET.pack(offset) + payload) != crc:
        raise CorruptSnapshotError("CRC-32C mismatch")
    return payload


class SnapshotFiles:
    """The snapshot files of one partition directory."""

    def __init__(self, disk: Disk, directory: str) -> None:
        self._disk = disk
        self.directory = directory

    def path(self, offset: int) -> str:
        return posixpath.join(self.directory, snapshot_file_name(offset))

    def offsets(self) -> list[int]:
        names = self._disk.listdir(self.directory)
        return sorted(offset for offset in map(parse_snapshot_file_name, names) if offset is not None)

    def write(self, offset: int, payload: bytes) -> None:
        self._disk.write_atomic(self.path(offset), encode_snapshot(offset, payload))

    def read(self, offset: int) -> bytes:
        return decode_snapshot(self._disk.read_all(self.path(offset)), offset=offset)

    def delete(self, offset: int) -> None:
        path = self.path(offset)
        if self._disk.exists(path):
            self._disk.remove(path)

    def delete_above(self, offset: int) -> None:
        """Delete snapshots past `offset` (they describe batches a truncation removes)."""
        for found in self.offsets():
            if found > offset:
                self.delete(found)

    def delete_below(self, offset: int) -> None:
        """Delete snapshots before `offset` (the first segment's base: their batches are gone)."""
        for found in self.offsets():
            if found < offset:
                self.delete(found)
