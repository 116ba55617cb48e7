"""Producer id allocation, unique across restarts: ids are reserved in blocks and the end of
the reserved block is persisted before any id from it is handed out, so a crash can skip
ids but never repeat one."""

from __future__ import annotations

from cluster.storage.disk import Disk

BLOCK_FILE = "producer-id-block"


class ProducerIdAllocator:
    def __init__(self, disk: Disk, data_dir: str, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"producer id block size must be >= 1, got {block_size}")
        self._disk = disk
        self._path = f"{data_dir}/{BLOCK_FILE}"
        self._block_size = block_size
        self._next = 0
        self._reserved_end = 0

    def load(self) -> None:
        if self._disk.exists(self._path):
            raw = self._disk.read_all(self._path).decode().strip()
            try:
                self._next = self._reserved_end = int(raw)
            except ValueError:
                raise ValueError(f"{self._path}: corrupt producer id block {raw!r}") from None

    def allocate(self) -> int:
        if self._next >= self._reserved_end:
            self._reserved_end = self._next + self._block_size
            self._disk.write_atomic(self._path, str(self._reserved_end).encode())
        producer_id = self._next
        self._next += 1
        return producer_id
