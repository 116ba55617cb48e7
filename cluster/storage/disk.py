"""The storage interface: every byte the log keeps goes through a `Disk`.

Two implementations share one durability model, so a crash means the same thing in the real
and the simulated cluster:

* appended bytes are visible to reads at once, but durable only after `fsync()`;
* `truncate`, `remove`, `rmtree`, `makedirs`, file creation by `open_append`, and
  `write_atomic` are metadata operations that take effect durably at once (the log relies on
  a truncation never being undone by a crash, as Kafka does);
* a crash drops every appended byte not yet fsynced, in every file.

`OsDisk` runs on real files. With `lose_unflushed_on_crash` it holds appended bytes in this
process's memory until `fsync()`, so SIGKILL of the process is the power-loss fault. Without
it every write reaches the OS at once and survives a process crash, as in Kafka, whose
default never fsyncs. `MemoryDisk` keeps files in memory for the deterministic simulator and
exposes the crash as `crash()`.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

Bytes = bytes | bytearray | memoryview


class AppendHandle(Protocol):
    def write(self, data: Bytes) -> None: ...
    def fsync(self) -> None: ...
    def close(self) -> None: ...


class Disk(Protocol):
    def exists(self, path: str) -> bool: ...
    def makedirs(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def file_size(self, path: str) -> int: ...
    def read(self, path: str, offset: int, size: int) -> bytes: ...
    def open_append(self, path: str) -> AppendHandle: ...
    def truncate(self, path: str, size: int) -> None: ...
    def remove(self, path: str) -> None: ...
    def rmtree(self, path: str) -> None: ...
    def write_atomic(self, path: str, data: bytes) -> None: ...
    def read_all(self, path: str) -> bytes: ...


class RandomSource(Protocol):
    """What MemoryDisk needs from a seeded RNG (random.Random fits)."""

    def randint(self, a: int, b: int) -> int: ...


class StaleHandleError(OSError):
    """An append handle used after close(), after its file was removed, or after a crash."""


def _check_read_args(path: str, offset: int, size: int) -> None:
    if offset < 0 or size < 0:
        raise ValueError(f"read of {path}: offset {offset} and size {size} must not be negative")


# --------------------------------------------------------------------------------------
# Real files
# --------------------------------------------------------------------------------------


def _write_fully(fd: int, data: Bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _OsAppendHandle:
    def __init__(self, disk: OsDisk, path: str, fd: int) -> None:
        self._disk = disk
        self._path = path
        self._fd: int | None = fd

    def _live_fd(self) -> int:
        if self._fd is None:
            raise StaleHandleError(f"append handle for {self._path} is closed")
        return self._fd

    def write(self, data: Bytes) -> None:
        fd = self._live_fd()
        pending = self._disk._pending.get(self._path)
        if pending is not None:
            pending += data
        else:
            _write_fully(fd, data)

    def fsync(self) -> None:
        fd = self._live_fd()
        pending = self._disk._pending.get(self._path)
        if pending:
            _write_fully(fd, pending)
            pending.clear()
        os.fsync(fd)

    def close(self) -> None:
        # Closing does not flush the user-space buffer: in crash mode, bytes never fsynced
        # stay in this process only, and still count for reads until the process dies.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._disk._handles.discard(self)


class OsDisk:
    """Real files. See the module docstring for the crash model."""

    def __init__(self, *, lose_unflushed_on_crash: bool = False, max_cached_read_fds: int = 128) -> None:
        if max_cached_read_fds < 1:
            raise ValueError(f"max_cached_read_fds={max_cached_read_fds}: must be >= 1")
        self.lose_unflushed_on_crash = lose_unflushed_on_crash
        # path -> bytes appended but not yet handed to the OS (crash mode only)
        self._pending: dict[str, bytearray] = {}
        # Read descriptors stay open between reads (a fetch is one pread, not open+pread+close),
        # least recently used first; bounded so that many partitions cannot exhaust the
        # process's descriptor limit.
        self._read_fds: OrderedDict[str, int] = OrderedDict()
        self._max_cached_read_fds = max_cached_read_fds
        self._handles: set[_OsAppendHandle] = set()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size + len(self._pending.get(path, b""))

    def _read_fd(self, path: str) -> int:
        fd = self._read_fds.get(path)
        if fd is not None:
            self._read_fds.move_to_end(path)
            return fd
        fd = os.open(path, os.O_RDONLY)
        self._read_fds[path] = fd
        while len(self._read_fds) > self._max_cached_read_fds:
            _, oldest = self._read_fds.popitem(last=False)
            os.close(oldest)
        return fd

    def _forget_read_fd(self, path: str) -> None:
        fd = self._read_fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def read(self, path: str, offset: int, size: int) -> bytes:
        _check_read_args(path, offset, size)
        fd = self._read_fd(path)
        chunks: list[bytes] = []
        position, remaining = offset, size
        while remaining > 0:
            chunk = os.pread(fd, remaining, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            remaining -= len(chunk)
        pending = self._pending.get(path)
        if remaining > 0 and pending:
            os_size = os.fstat(fd).st_size
            start = position - os_size
            if start >= 0:
                chunks.append(bytes(pending[start : start + remaining]))
        return b"".join(chunks)

    def open_append(self, path: str) -> AppendHandle:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self.lose_unflushed_on_crash:
            self._pending.setdefault(path, bytearray())
        handle = _OsAppendHandle(self, path, fd)
        self._handles.add(handle)
        return handle

    def truncate(self, path: str, size: int) -> None:
        current = self.file_size(path)
        if size < 0 or size > current:
            raise ValueError(f"truncate of {path} to {size} bytes: the file has {current}")
        pending = self._pending.get(path)
        os_size = os.stat(path).st_size
        if size >= os_size:
            if pending is not None:
                del pending[size - os_size :]
            return
        if pending is not None:
            pending.clear()
        os.truncate(path, size)

    def remove(self, path: str) -> None:
        self._forget_read_fd(path)
        self._pending.pop(path, None)
        os.remove(path)

    def rmtree(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        for known in [p for p in self._read_fds if p.startswith(prefix)]:
            self._forget_read_fd(known)
        for known in [p for p in self._pending if p.startswith(prefix)]:
            del self._pending[known]
        shutil.rmtree(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp_path = path + ".tmp"
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_fully(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._forget_read_fd(path)
        self._pending.pop(path, None)
        os.replace(tmp_path, path)
        dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def read_all(self, path: str) -> bytes:
        return self.read(path, 0, self.file_size(path))

    def close(self) -> None:
        """Release cached read descriptors (append handles are closed by their owners)."""
        for path in list(self._read_fds):
            self._forget_read_fd(path)

    def abandon(self) -> None:
        """Do to this disk what the death of its process would: every byte not fsynced is
        gone and every descriptor closed; open handles become unusable. The in-process
        stand-in for SIGKILL (tests, the simulator's view of a real broker); open a new
        OsDisk on the same files afterwards."""
        self._pending.clear()
        for handle in list(self._handles):
            handle.close()
        self.close()


# --------------------------------------------------------------------------------------
# In memory
# --------------------------------------------------------------------------------------


@dataclass
class _MemFile:
    data: bytearray = field(default_factory=bytearray)
    # Bytes [0, durable_size) survive a crash. Writes only append and truncation lowers
    # durable_size with the data, so the durable prefix is always data[:durable_size].
    durable_size: int = 0


class _MemAppendHandle:
    def __init__(self, disk: MemoryDisk, path: str, file: _MemFile) -> None:
        self._disk = disk
        self._path = path
        self._file: _MemFile | None = file
        self._generation = disk._generation

    def _live_file(self) -> _MemFile:
        if self._file is None:
            raise StaleHandleError(f"append handle for {self._path} is closed")
        if self._generation != self._disk._generation:
            raise StaleHandleError(f"append handle for {self._path} was opened before a crash")
        if self._disk._files.get(self._path) is not self._file:
            raise StaleHandleError(f"{self._path} was removed or replaced after the handle was opened")
        return self._file

    def write(self, data: Bytes) -> None:
        self._live_file().data += data

    def fsync(self) -> None:
        file = self._live_file()
        file.durable_size = len(file.data)
        self._disk.fsync_count += 1

    def close(self) -> None:
        self._file = None


class MemoryDisk:
    """Files in memory with the same durability model as OsDisk in crash mode."""

    def __init__(self) -> None:
        self._files: dict[str, _MemFile] = {}
        self._dirs: dict[str, set[str]] = {"/": set()}
        self._generation = 0
        self.fsync_count = 0

    @staticmethod
    def _norm(path: str) -> str:
        if not path:
            raise ValueError("empty path")
        return posixpath.normpath(posixpath.join("/", path))

    def _file(self, path: str) -> _MemFile:
        file = self._files.get(self._norm(path))
        if file is None:
            raise FileNotFoundError(f"no such file: {path}")
        return file

    def _parent_dir(self, path: str) -> tuple[str, str]:
        norm = self._norm(path)
        parent, name = posixpath.split(norm)
        if parent not in self._dirs:
            raise FileNotFoundError(f"no such directory: {parent} (for {path})")
        if norm in self._dirs:
            raise IsADirectoryError(f"{path} is a directory")
        return parent, name

    def exists(self, path: str) -> bool:
        norm = self._norm(path)
        return norm in self._files or norm in self._dirs

    def makedirs(self, path: str) -> None:
        norm = self._norm(path)
        if norm in self._files:
            raise FileExistsError(f"{path} is a file")
        parts = [p for p in norm.split("/") if p]
        current = "/"
        for part in parts:
            child = posixpath.join(current, part)
            if child in self._files:
                raise FileExistsError(f"{child} is a file")
            if child not in self._dirs:
                self._dirs[child] = set()
                self._dirs[current].add(part)
            current = child

    def listdir(self, path: str) -> list[str]:
        norm = self._norm(path)
        if norm not in self._dirs:
            raise FileNotFoundError(f"no such directory: {path}")
        return sorted(self._dirs[norm])

    def file_size(self, path: str) -> int:
        return len(self._file(path).data)

    def read(self, path: str, offset: int, size: int) -> bytes:
        _check_read_args(path, offset, size)
        return bytes(self._file(path).data[offset : offset + size])

    def open_append(self, path: str) -> AppendHandle:
        parent, name = self._parent_dir(path)
        norm = self._norm(path)
        file = self._files.get(norm)
        if file is None:
            file = _MemFile()
            self._files[norm] = file
            self._dirs[parent].add(name)
        return _MemAppendHandle(self, norm, file)

    def truncate(self, path: str, size: int) -> None:
        file = self._file(path)
        if size < 0 or size > len(file.data):
            raise ValueError(f"truncate of {path} to {size} bytes: the file has {len(file.data)}")
        del file.data[size:]
        file.durable_size = min(file.durable_size, size)

    def remove(self, path: str) -> None:
        norm = self._norm(path)
        if norm not in self._files:
            raise FileNotFoundError(f"no such file: {path}")
        del self._files[norm]
        parent, name = posixpath.split(norm)
        self._dirs[parent].discard(name)

    def rmtree(self, path: str) -> None:
        norm = self._norm(path)
        if norm not in self._dirs:
            raise FileNotFoundError(f"no such directory: {path}")
        if norm == "/":
            raise ValueError("refusing to remove the root of a MemoryDisk")
        prefix = norm + "/"
        for file_path in [p for p in self._files if p.startswith(prefix)]:
            del self._files[file_path]
        for dir_path in [p for p in self._dirs if p == norm or p.startswith(prefix)]:
            del self._dirs[dir_path]
        parent, name = posixpath.split(norm)
        self._dirs[parent].discard(name)

    def write_atomic(self, path: str, data: bytes) -> None:
        parent, name = self._parent_dir(path)
        # A new file object: handles on the old one become stale, as after a rename.
        self._files[self._norm(path)] = _MemFile(bytearray(data), len(data))
        self._dirs[parent].add(name)
        self.fsync_count += 1

    def read_all(self, path: str) -> bytes:
        return bytes(self._file(path).data)

    def crash(self, *, torn_writes: RandomSource | None = None) -> None:
        """Power loss: every byte not fsynced is gone; every open handle becomes invalid.

        With `torn_writes` (a seeded random source), each file instead keeps a random part
        of its unsynced tail, cut at any byte: writes the device had begun but not finished,
        as a real power cut can leave them. Recovery must then cut the torn batch."""
        for file in self._files.values():
            keep = file.durable_size
            if torn_writes is not None and len(file.data) > keep:
                keep += torn_writes.randint(0, len(file.data) - keep)
            del file.data[keep:]
            file.durable_size = keep
        self._generation += 1

    def unflushed_bytes(self) -> int:
        """How many bytes a crash now would drop, over all files."""
        return sum(len(f.data) - f.durable_size for f in self._files.values())
