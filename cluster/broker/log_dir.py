"""The broker's log directory and what happens when its disk fails (Kafka's
LogDirFailureChannel, KIP-112).

Every file the broker's logs and checkpoints touch goes through `LogDir`, a Disk that passes
each call to the real one and watches what it raises. The first I/O error (EIO, ENOSPC, a
read-only file system: any OSError but the "no such file" family and a stale handle, which
are this program's own mistakes) marks the directory failed and reports it, once, to the
broker; the error still reaches the caller, which answers KAFKA_STORAGE_ERROR where Kafka
does. From then on every call fails at once: a directory that failed is never written
again by this process (Kafka closes the logs of a failed directory for good).

What the broker then does is Kafka's for a broker with one log directory: its
ReplicaManager.handleLogDirFailure takes every partition in the directory offline (clients
get KAFKA_STORAGE_ERROR, replica fetchers stop), and LogManager.handleLogDirFailure halts
the process, because no live log directory is left ("Shutdown broker because all log dirs
in ... have failed", Exit.halt(1)). The controller notices the missing heartbeats, fences
the broker after broker.session.timeout.ms and elects new leaders from the ISR; an operator
replaces the disk and restarts the broker, whose log recovery cuts what the failure left
torn. (KIP-858 lets a KRaft broker with several log directories report one as offline in
its heartbeat and keep the others; with a single directory Kafka still halts.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cluster.storage.disk import AppendHandle, Bytes, Disk, StaleHandleError

log = logging.getLogger(__name__)

# OSErrors that say the program asked for something that is not there (or is in the way),
# not that the disk failed: they pass through without failing the directory.
_NOT_A_DISK_FAILURE = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, StaleHandleError)


class LogDirOfflineError(OSError):
    """A call on a log directory that has already failed (Kafka: KafkaStorageException)."""


def is_disk_failure(error: BaseException) -> bool:
    return isinstance(error, OSError) and not isinstance(error, _NOT_A_DISK_FAILURE)


class _WatchedHandle:
    def __init__(self, owner: LogDir, path: str, inner: AppendHandle) -> None:
        self._owner = owner
        self._path = path
        self._inner = inner

    def write(self, data: Bytes) -> None:
        # Inline rather than through _run: this is every append's path.
        owner = self._owner
        if owner.failure is not None:
            owner._check_online("write", self._path)
        try:
            self._inner.write(data)
        except OSError as error:
            if is_disk_failure(error):
                owner._failed_with("write", self._path, error)
            raise

    def fsync(self) -> None:
        self._owner._run("fsync", self._path, self._inner.fsync)

    def close(self) -> None:
        # Closing a handle of a failed directory must still release it.
        try:
            self._inner.close()
        except OSError as error:
            if not is_disk_failure(error):
                raise
            self._owner._failed_with("close", self._path, error)


class LogDir:
    """A Disk that fails the directory on the first disk error (see the module docstring)."""

    def __init__(self, inner: Disk, path: str, on_failure: Callable[[str], None]) -> None:
        self.inner = inner
        self.path = path
        self._on_failure = on_failure
        self.failure: str | None = None  # why the directory failed, once it has

    @property
    def online(self) -> bool:
        return self.failure is None

    def _failed_with(self, what: str, path: str, error: OSError) -> None:
        if self.failure is not None:
            return
        self.failure = f"{what} of {path} failed: {error}"
        log.error("log directory %s failed: %s", self.path, self.failure)
        self._on_failure(self.failure)

    def _check_online(self, what: str, path: str) -> None:
        if self.failure is not None:
            raise LogDirOfflineError(f"{what} of {path}: the log directory {self.path} is offline ({self.failure})")

    def _run(self, what: str, path: str, call: Callable[[], object]) -> object:
        self._check_online(what, path)
        try:
            return call()
        except OSError as error:
            if is_disk_failure(error):
                self._failed_with(what, path, error)
            raise

    # ---- Disk ------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return bool(self._run("exists", path, lambda: self.inner.exists(path)))

    def makedirs(self, path: str) -> None:
        self._run("makedirs", path, lambda: self.inner.makedirs(path))

    def listdir(self, path: str) -> list[str]:
        return self._run("listdir", path, lambda: self.inner.listdir(path))  # type: ignore[return-value]

    def file_size(self, path: str) -> int:
        return self._run("file_size", path, lambda: self.inner.file_size(path))  # type: ignore[return-value]

    def read(self, path: str, offset: int, size: int) -> bytes:
        # Inline rather than through _run: this is every fetch's path.
        if self.failure is not None:
            self._check_online("read", path)
        try:
            return self.inner.read(path, offset, size)
        except OSError as error:
            if is_disk_failure(error):
                self._failed_with("read", path, error)
            raise

    def open_append(self, path: str) -> AppendHandle:
        inner = self._run("open_append", path, lambda: self.inner.open_append(path))
        return _WatchedHandle(self, path, inner)  # type: ignore[arg-type]

    def truncate(self, path: str, size: int) -> None:
        self._run("truncate", path, lambda: self.inner.truncate(path, size))

    def remove(self, path: str) -> None:
        self._run("remove", path, lambda: self.inner.remove(path))

    def rmtree(self, path: str) -> None:
        self._run("rmtree", path, lambda: self.inner.rmtree(path))

    def write_atomic(self, path: str, data: bytes) -> None:
        self._run("write_atomic", path, lambda: self.inner.write_atomic(path, data))

    def read_all(self, path: str) -> bytes:
        return self._run("read_all", path, lambda: self.inner.read_all(path))  # type: ignore[return-value]
