"""The leader-epoch cache: for each leader epoch, the first offset written in it.

It answers OffsetForLeaderEpoch (KIP-101/279/320): a replica or consumer that last saw epoch E
learns where E ended on this replica and truncates anything of its own past that point.
Persisted in `<partition dir>/leader-epoch-checkpoint` in Kafka's text layout (version line,
count line, then one "epoch start_offset" line per entry), rewritten atomically on every
change. Changes are rare: one per leader change, plus truncations.
"""

from __future__ import annotations

import bisect
import posixpath

from cluster.storage.disk import Disk

CHECKPOINT_FILE = "leader-epoch-checkpoint"
_CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be parsed; the caller rebuilds the state it held."""


def _encode(entries: list[tuple[int, int]]) -> bytes:
    lines = [str(_CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {start_offset}" for epoch, start_offset in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def _decode(data: bytes, path: str) -> list[tuple[int, int]]:
    try:
        lines = data.decode("ascii").splitlines()
        version, count = int(lines[0]), int(lines[1])
        if version != _CHECKPOINT_VERSION:
            raise CorruptCheckpointError(f"{path}: unknown checkpoint version {version}")
        if len(lines) != count + 2:
            raise CorruptCheckpointError(f"{path}: header says {count} entries, file has {len(lines) - 2}")
        entries = []
        for line in lines[2:]:
            epoch_text, offset_text = line.split(" ")
            entries.append((int(epoch_text), int(offset_text)))
    except (UnicodeDecodeError, IndexError, ValueError) as error:
        if isinstance(error, CorruptCheckpointError):
            raise
        raise CorruptCheckpointError(f"{path}: unreadable leader-epoch checkpoint ({error})") from error
    for (epoch_a, start_a), (epoch_b, start_b) in zip(entries, entries[1:]):
        if not (epoch_a < epoch_b and start_a <= start_b):
            raise CorruptCheckpointError(f"{path}: entries ({epoch_a}, {start_a}) and ({epoch_b}, {start_b}) are out of order")
    if any(epoch < 0 or start < 0 for epoch, start in entries):
        raise CorruptCheckpointError(f"{path}: negative epoch or offset")
    return entries


def _assign(epochs: list[int], starts: list[int], epoch: int, start_offset: int) -> bool:
    """Kafka's assign on two parallel lists; False if nothing changed."""
    if epochs and epoch == epochs[-1] and start_offset >= starts[-1]:
        return False
    while epochs and (epochs[-1] >= epoch or starts[-1] >= start_offset):
        epochs.pop()
        starts.pop()
    epochs.append(epoch)
    starts.append(start_offset)
    return True


def replay_assignments(changes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The cache that assigning each (epoch, start offset) in turn to an empty one gives."""
    epochs: list[int] = []
    starts: list[int] = []
    for epoch, start_offset in changes:
        if epoch >= 0:
            _assign(epochs, starts, epoch, start_offset)
    return list(zip(epochs, starts))


class LeaderEpochCache:
    """(epoch -> start offset), epochs and start offsets both increasing."""

    def __init__(self, disk: Disk, directory: str, entries: list[tuple[int, int]] | None = None) -> None:
        self._disk = disk
        self.path = posixpath.join(directory, CHECKPOINT_FILE)
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start_offset in entries or []:
            self._epochs.append(epoch)
            self._starts.append(start_offset)

    @classmethod
    def load(cls, disk: Disk, directory: str) -> LeaderEpochCache:
        """The cache stored in `directory`; empty if there is no checkpoint yet.

        Raises CorruptCheckpointError if the file exists but cannot be parsed."""
        path = posixpath.join(directory, CHECKPOINT_FILE)
        if not disk.exists(path):
            return cls(disk, directory)
        return cls(disk, directory, _decode(disk.read_all(path), path))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def latest_start_offset(self) -> int:
        return self._starts[-1] if self._starts else UNDEFINED_EPOCH_OFFSET

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    def _persist(self) -> None:
        self._disk.write_atomic(self.path, _encode(self.entries()))

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` begins at `start_offset`, as Kafka's LeaderEpochFileCache.assign.

        The latest epoch again (at or past its start) changes nothing. Any other epoch first
        drops, from the end, every entry with an epoch >= it or a start offset >= its start:
        a newer epoch simply follows, while an older one (a follower copying a leader whose
        log went another way) rewrites the tail, so the cache never claims that offsets
        written in the older epoch belong to a newer one."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} at offset {start_offset}: both must be >= 0")
        if not _assign(self._epochs, self._starts, epoch, start_offset):
            return
        self._persist()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer (LeaderEpochFileCache.endOffsetFor).

        * the latest epoch: (it, log_end_offset);
        * a known or in-between epoch: (the largest epoch <= requested, the start offset of
          the next epoch), so a hole (ask 7, know 6 and 8) answers epoch 6 ending where 8 began;
        * below every known epoch: (requested, the first entry's start offset), as Kafka does:
          that history is gone from this log, and the asker must not keep anything past the
          oldest start offset we still know;
        * newer than the latest, undefined (-1), or an empty cache: (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which `offset` was written, or -1 if it is before every entry."""
        index = bisect.bisect_right(self._starts, offset)
        return self._epochs[index - 1] if index else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop every entry starting at or after `end_offset` (the log was truncated there)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep == len(self._starts):
            return
        del self._epochs[keep:]
        del self._starts[keep:]
        self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: entries wholly before it go, and the entry
        covering it is moved up to start there."""
        covering = bisect.bisect_right(self._starts, start_offset) - 1
        if covering < 0 or (covering == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:covering]
        del self._starts[:covering]
        self._starts[0] = start_offset
        self._persist()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self._persist()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Overwrite the whole cache (used when it is rebuilt from the log's batch headers)."""
        self._epochs = [epoch for epoch, _ in entries]
        self._starts = [start for _, start in entries]
        self._persist()
