"""A `Disk` that fails on command: the disk faults of issue 17, for real and simulated brokers.

`FaultyDisk` wraps another Disk (OsDisk in a broker process, MemoryDisk in the simulator)
and passes every call through, except while a fault is set:

* `fsync_errno` (EIO): every fsync fails with that error, that of an append handle and the
  one inside `write_atomic`; the bytes stay written but not durable (on Linux, after a failed
  fsync the dirty pages may be dropped or marked clean: nothing after the last good fsync
  can be trusted to survive a power loss, which is what the wrapped disk keeps saying).
* `write_errno` (ENOSPC, a full disk): every call that needs new space fails with it, before
  writing anything: an append handle's `write`, `write_atomic`, and `open_append` or
  `makedirs` when they would create something. Truncating and removing still work, as they
  free space.
* `fsync_delay_ms` (a slow disk): every fsync first stalls for that long. Storage never
  sleeps: the stall goes to the injected `stall(delay_ms)` callable, a real sleep in a
  broker process (the broker's single thread blocks, as it would in a slow fsync) and a
  stall of the broker's node on virtual time in the simulator.

`tear_unflushed_tails(rng, corrupt=...)` is the crash half: it keeps a random prefix of each
file's unflushed tail (the bytes written since the file's last good fsync) and makes it
durable, optionally flipping one byte of what a segment file keeps, as a power cut may leave
a device's half-finished writes. The caller crashes right after (MemoryDisk.crash, or the
broker process's SIGKILL), and recovery must cut the torn or corrupt batch on the next open.
The flipped byte is never one of a batch's 4 partitionLeaderEpoch bytes: Kafka's record
format leaves those outside the CRC (the leader rewrites them), so no recovery, Kafka's
included, could tell such a flip from a real epoch.

Injected errors are plain OSErrors with the fault's errno, as the OS would raise them; the
broker cannot tell them from real ones.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from cluster.storage.disk import AppendHandle, Bytes, Disk, RandomSource
from cluster.storage.segment import LOG_SUFFIX

# Names a fault command may use for its errno (what `set_faults` accepts as text).
ERRNO_NAMES: dict[str, int] = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC, "EDQUOT": errno.EDQUOT, "EROFS": errno.EROFS}

# RecordBatch v2 framing: baseOffset (8) + batchLength (4), then partitionLeaderEpoch (4).
_LENGTH = struct.Struct(">i")
_EPOCH_AT, _EPOCH_END = 12, 16
_LOG_OVERHEAD = 12


def errno_from(value: int | str | None, what: str) -> int | None:
    """An errno from a number or a name such as "EIO"; None stays None. Raises ValueError
    naming `what` for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r} is not an errno")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{what} {value} is not a positive errno")
        return value
    if isinstance(value, str) and value.upper() in ERRNO_NAMES:
        return ERRNO_NAMES[value.upper()]
    raise ValueError(f"{what} {value!r} is not an errno; names known: {', '.join(ERRNO_NAMES)}")


@dataclass(frozen=True)
class DiskFaults:
    """The faults in force. The default is a healthy disk."""

    fsync_errno: int | None = None
    write_errno: int | None = None
    fsync_delay_ms: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fsync_errno", errno_from(self.fsync_errno, "fsync_errno"))
        object.__setattr__(self, "write_errno", errno_from(self.write_errno, "write_errno"))
        if isinstance(self.fsync_delay_ms, bool) or not isinstance(self.fsync_delay_ms, int) or self.fsync_delay_ms < 0:
            raise ValueError(f"fsync_delay_ms {self.fsync_delay_ms!r} must be a non-negative integer (milliseconds)")

    @property
    def healthy(self) -> bool:
        return self.fsync_errno is None and self.write_errno is None and self.fsync_delay_ms == 0

    def to_json(self) -> dict:
        return {"fsync_errno": _errno_name(self.fsync_errno), "write_errno": _errno_name(self.write_errno),
                "fsync_delay_ms": self.fsync_delay_ms}


def _errno_name(value: int | None) -> str | None:
    return None if value is None else errno.errorcode.get(value, str(value))


@dataclass
class FaultCounts:
    """What the faults did so far (evidence that they took effect)."""

    fsync_errors: int = 0
    write_errors: int = 0
    stalled_fsyncs: int = 0
    stalled_ms: int = 0

    def to_json(self) -> dict:
        return {"fsync_errors": self.fsync_errors, "write_errors": self.write_errors,
                "stalled_fsyncs": self.stalled_fsyncs, "stalled_ms": self.stalled_ms}


@dataclass(frozen=True)
class TornTail:
    """What `tear_unflushed_tails` did to one file."""

    path: str
    synced_bytes: int  # the durable prefix, untouched
    unflushed_bytes: int  # the tail written since the last good fsync
    kept_bytes: int  # how much of that tail now survives
    flipped_at: int | None = None  # file position of the corrupted byte, if any

    def to_json(self) -> dict:
        return {"path": self.path, "synced_bytes": self.synced_bytes, "unflushed_bytes": self.unflushed_bytes,
                "kept_bytes": self.kept_bytes, "flipped_at": self.flipped_at}


def _injected(code: int, what: str, path: str) -> OSError:
    return OSError(code, f"{os.strerror(code)} ({what}, injected disk fault)", path)


class _FaultyAppendHandle:
    def __init__(self, disk: FaultyDisk, path: str, inner: AppendHandle) -> None:
        self._disk = disk
        self._path = path
        self._inner = inner

    def write(self, data: Bytes) -> None:
        self._disk._check_space("write", self._path)
        self._inner.write(data)
        self._disk._written(self._path)

    def fsync(self) -> None:
        self._disk._before_fsync(self._path)
        self._inner.fsync()
        self._disk._synced(self._path)

    def close(self) -> None:
        self._inner.close()


class FaultyDisk:
    """See the module docstring. `stall` is required only for a slow-fsync fault."""

    def __init__(self, inner: Disk, stall: Callable[[int], None] | None = None) -> None:
        self.inner = inner
        self._stall = stall
        self.faults = DiskFaults()
        self.counts = FaultCounts()
        # path -> bytes known durable (its size at the last good fsync, or when first seen);
        # paths in _dirty have had bytes appended since.
        self._synced_size: dict[str, int] = {}
        self._dirty: set[str] = set()

    # ---- faults ------------------------------------------------------------------------

    def set_faults(self, faults: DiskFaults) -> None:
        if faults.fsync_delay_ms and self._stall is None:
            raise ValueError("a slow-fsync fault needs a FaultyDisk built with a stall callable")
        self.faults = faults

    def update_faults(self, **changes: object) -> DiskFaults:
        """Change some faults, keep the others; returns the faults now in force."""
        self.set_faults(replace(self.faults, **changes))  # type: ignore[arg-type]
        return self.faults

    def clear_faults(self) -> None:
        self.faults = DiskFaults()

    def _check_space(self, what: str, path: str) -> None:
        code = self.faults.write_errno
        if code is not None:
            self.counts.write_errors += 1
            raise _injected(code, what, path)

    def _before_fsync(self, path: str) -> None:
        delay_ms = self.faults.fsync_delay_ms
        if delay_ms and self._stall is not None:
            self.counts.stalled_fsyncs += 1
            self.counts.stalled_ms += delay_ms
            self._stall(delay_ms)
        code = self.faults.fsync_errno
        if code is not None:
            self.counts.fsync_errors += 1
            raise _injected(code, "fsync", path)

    # ---- durability bookkeeping ----------------------------------------------------------

    def _note(self, path: str) -> None:
        if path not in self._synced_size:
            # Bytes already there when this disk first sees the file: a broker recovers and
            # fsyncs what it keeps on open, so they are taken as durable.
            self._synced_size[path] = self.inner.file_size(path) if self.inner.exists(path) else 0

    def _written(self, path: str) -> None:
        self._dirty.add(path)

    def _synced(self, path: str) -> None:
        self._synced_size[path] = self.inner.file_size(path)
        self._dirty.discard(path)

    def _forget(self, path: str) -> None:
        self._synced_size.pop(path, None)
        self._dirty.discard(path)

    def unflushed(self) -> dict[str, tuple[int, int]]:
        """path -> (durable bytes, unflushed bytes) of every file with an unflushed tail."""
        out = {}
        for path in sorted(self._dirty):
            if not self.inner.exists(path):
                continue
            synced = self._synced_size.get(path, 0)
            size = self.inner.file_size(path)
            if size > synced:
                out[path] = (synced, size - synced)
        return out

    # ---- the crash -------------------------------------------------------------------------

    def tear_unflushed_tails(self, rng: RandomSource, *, corrupt: bool) -> list[TornTail]:
        """Keep a random prefix (0 to all bytes) of every unflushed tail and make it durable;
        with `corrupt`, also flip one byte of each segment (.log) file's kept tail. Crash the
        disk (or the process) right after: see the module docstring."""
        torn = []
        for path, (synced, unflushed) in self.unflushed().items():
            kept = rng.randint(0, unflushed)
            data = bytearray(self.inner.read(path, synced, kept))
            flipped_at = None
            if corrupt and path.endswith(LOG_SUFFIX):
                at = _pick_flip_position(data, rng)
                if at is not None:
                    data[at] ^= rng.randint(1, 255)
                    flipped_at = synced + at
            self.inner.truncate(path, synced)
            handle = self.inner.open_append(path)
            try:
                handle.write(data)
                handle.fsync()
            finally:
                handle.close()
            self._synced(path)
            torn.append(TornTail(path, synced, unflushed, kept, flipped_at))
        return torn

    # ---- Disk ------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def makedirs(self, path: str) -> None:
        if not self.inner.exists(path):
            self._check_space("makedirs", path)
        self.inner.makedirs(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def read(self, path: str, offset: int, size: int) -> bytes:
        return self.inner.read(path, offset, size)

    def open_append(self, path: str) -> AppendHandle:
        if not self.inner.exists(path):
            self._check_space("create", path)
        self._note(path)
        return _FaultyAppendHandle(self, path, self.inner.open_append(path))

    def truncate(self, path: str, size: int) -> None:
        self.inner.truncate(path, size)
        if path in self._synced_size:
            self._synced_size[path] = min(self._synced_size[path], size)
            if self._synced_size[path] >= size:
                self._dirty.discard(path)

    def remove(self, path: str) -> None:
        self.inner.remove(path)
        self._forget(path)

    def rmtree(self, path: str) -> None:
        self.inner.rmtree(path)
        prefix = path.rstrip("/") + "/"
        for known in [p for p in self._synced_size if p.startswith(prefix)]:
            self._forget(known)

    def write_atomic(self, path: str, data: bytes) -> None:
        # A temporary file is written and fsynced before the rename: both faults apply.
        self._check_space("write_atomic", path)
        self._before_fsync(path)
        self.inner.write_atomic(path, data)
        self._forget(path)

    def read_all(self, path: str) -> bytes:
        return self.inner.read_all(path)


def _pick_flip_position(tail: bytes | bytearray, rng: RandomSource) -> int | None:
    """A random position in `tail` (which starts at a batch boundary) outside every batch's
    partitionLeaderEpoch field; None for a tail too short to hold anything else. Past the
    first unreadable batch length every position counts."""
    excluded: set[int] = set()
    position = 0
    while position + _EPOCH_END <= len(tail):
        excluded.update(range(position + _EPOCH_AT, position + _EPOCH_END))
        (length,) = _LENGTH.unpack_from(tail, position + 8)
        if length <= 0:
            break
        position += _LOG_OVERHEAD + length
    if len(tail) <= len(excluded):
        return None
    while True:  # at least one position in 17 is not excluded (the header is 61 bytes)
        at = rng.randint(0, len(tail) - 1)
        if at not in excluded:
            return at
