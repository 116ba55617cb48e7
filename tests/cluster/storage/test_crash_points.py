"""Power loss at every step inside every log operation.

The disk fails just before its k-th write-side call (write, fsync, truncate, remove,
write_atomic, ...) while a PartitionLog operation runs: a MemoryDisk then loses power,
dropping what was not fsynced (or, torn, keeping a random part of it); an OsDisk in
lose-unflushed mode dies with its process (abandon). Then the log is reopened.
Whatever the step, recovery must succeed and give a consistent log: a prefix of what was
written, keeping everything fsynced before the operation began (unless the operation itself
discards it), with a log start that never goes back and an epoch cache that fits the data.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from cluster.storage.disk import AppendHandle, Bytes, MemoryDisk, OsDisk
from cluster.storage.log import LogConfig, PartitionLog
from tests.cluster.storage.batches import make_batch

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=120, retention_bytes=1_000, retention_ms=None)


class PowerLoss(Exception):
    pass


class _CountingHandle:
    def __init__(self, disk: FailingDisk, inner: AppendHandle) -> None:
        self._disk = disk
        self._inner = inner

    def write(self, data: Bytes) -> None:
        self._disk.step()
        self._inner.write(data)

    def fsync(self) -> None:
        self._disk.step()
        self._inner.fsync()

    def close(self) -> None:
        self._inner.close()


class FailingDisk:
    """A real Disk (MemoryDisk, or OsDisk in lose-unflushed mode) that raises PowerLoss at a
    chosen write-side call, and can then lose power."""

    def __init__(self, make_inner: Callable[[], MemoryDisk | OsDisk]) -> None:
        self._make_inner = make_inner
        self.inner = make_inner()
        self.steps = 0
        self.fail_at: int | None = None

    def step(self) -> None:
        if self.fail_at is not None and self.steps >= self.fail_at:
            raise PowerLoss()
        self.steps += 1

    def power_loss(self, torn_seed: int | None) -> None:
        self.fail_at = None
        if isinstance(self.inner, MemoryDisk):
            self.inner.crash(torn_writes=None if torn_seed is None else random.Random(torn_seed))
        else:
            # The process dies with its unsynced bytes; a new one opens the same files.
            self.inner.abandon()
            self.inner = self._make_inner()

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def read(self, path: str, offset: int, size: int) -> bytes:
        return self.inner.read(path, offset, size)

    def read_all(self, path: str) -> bytes:
        return self.inner.read_all(path)

    def makedirs(self, path: str) -> None:
        self.step()
        self.inner.makedirs(path)

    def open_append(self, path: str) -> AppendHandle:
        self.step()
        return _CountingHandle(self, self.inner.open_append(path))

    def truncate(self, path: str, size: int) -> None:
        self.step()
        self.inner.truncate(path, size)

    def remove(self, path: str) -> None:
        self.step()
        self.inner.remove(path)

    def rmtree(self, path: str) -> None:
        self.step()
        self.inner.rmtree(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.step()
        self.inner.write_atomic(path, data)


@dataclass
class World:
    disk: FailingDisk
    directory: str
    log: PartitionLog
    written: list[bytes]  # every batch appended, in offset order (the log is a prefix of the tail)
    now_ms: int = 0

    def append(self, count: int, epoch: int, body_size: int = 90) -> None:
        for _ in range(count):
            self.now_ms += 10
            batch = make_batch(self.log.log_end_offset, 2, body_size=body_size, epoch=epoch, base_timestamp_ms=self.now_ms)
            self.written = [b for b in self.written if int.from_bytes(b[:8], "big") < self.log.log_end_offset]
            self.log.append(batch, now_ms=self.now_ms)
            self.written.append(batch)


Operation = Callable[[World], None]


def reopen(world: World) -> None:
    world.log.close()
    world.log = PartitionLog.open(world.disk, world.directory, CONFIG, now_ms=world.now_ms)


SCENARIO: list[tuple[str, Operation, Callable[[World], int | None]]] = [
    # (name, operation, the offset it truncates to, if it discards data on purpose)
    ("append", lambda w: w.append(3, epoch=1), lambda w: None),
    ("flush", lambda w: w.log.flush(), lambda w: None),
    ("append with rolls", lambda w: w.append(8, epoch=2), lambda w: None),
    ("truncate to a boundary", lambda w: w.log.truncate_to(w.log.log_end_offset - 6), lambda w: w.log.log_end_offset - 6),
    ("append in a new epoch", lambda w: w.append(4, epoch=3), lambda w: None),
    ("retention by size", lambda w: w.log.apply_retention(now_ms=w.now_ms), lambda w: None),
    ("delete records", lambda w: w.log.delete_records_before(w.log.log_start_offset + 3), lambda w: None),
    ("append more", lambda w: w.append(9, epoch=3), lambda w: None),
    ("flush", lambda w: w.log.flush(), lambda w: None),
    (
        "truncate three segments back",
        lambda w: w.log.truncate_to(w.log.segment_base_offsets[-3] + 2),
        lambda w: w.log.segment_base_offsets[-3] + 2,
    ),
    ("append", lambda w: w.append(3, epoch=4), lambda w: None),
    ("clean close and reopen", reopen, lambda w: None),
    ("reset", lambda w: w.log.truncate_fully_and_start_at(w.log.log_end_offset + 5, now_ms=w.now_ms), lambda w: None),
    ("append after reset", lambda w: w.append(2, epoch=5), lambda w: None),
]


@dataclass(frozen=True)
class Before:
    recovery_point: int
    log_start_offset: int
    truncation_target: int | None


def run_until(place: Place, index: int, fail_at: int | None) -> tuple[World, Before, bool]:
    """Run operations before `index` normally, then operation `index` with power lost at its
    `fail_at`-th write-side step. Returns the world, the state just before that operation,
    and whether the operation finished."""
    disk = FailingDisk(place.make_disk)
    directory = place.new_directory()
    world = World(disk, directory, PartitionLog.open(disk, directory, CONFIG, now_ms=0), [])
    for _, operation, _ in SCENARIO[:index]:
        operation(world)
    _, operation, target = SCENARIO[index]
    before = Before(world.log.recovery_point, world.log.log_start_offset, target(world))
    disk.fail_at = None if fail_at is None else disk.steps + fail_at
    try:
        operation(world)
    except PowerLoss:
        return world, before, False
    return world, before, True


def check_recovered(world: World, before: Before, torn_seed: int | None) -> PartitionLog:
    world.disk.power_loss(torn_seed)
    log = PartitionLog.open(world.disk, world.directory, CONFIG, now_ms=world.now_ms)
    by_offset = {int.from_bytes(b[:8], "big"): b for b in world.written}
    if torn_seed is None:
        # Without torn writes the disk only ever holds whole batches: nothing looks corrupt.
        assert log.recovery.reason is None, log.recovery
    start, end = log.log_start_offset, log.log_end_offset
    assert start >= before.log_start_offset
    floor = before.recovery_point if before.truncation_target is None else min(before.recovery_point, before.truncation_target)
    assert end >= floor, (end, floor)
    stored = [bytes(b) for b in log.read(start, 10**9)]
    # A prefix of what was written: contiguous batches, each exactly as appended.
    offset = None
    for batch in stored:
        base = int.from_bytes(batch[:8], "big")
        assert by_offset.get(base) == batch
        assert offset is None or base == offset
        offset = base + int.from_bytes(batch[23:27], "big") + 1
        epoch = int.from_bytes(batch[12:16], "big")
        assert log.epochs.epoch_for_offset(max(base, start)) == epoch
    assert offset is None or offset == end
    for _, entry_start in log.epochs.entries():
        # An entry may sit at the end only in an empty log, moved up to its start.
        assert start <= entry_start < end or start == entry_start == end
    return log


@dataclass
class Place:
    make_disk: Callable[[], MemoryDisk | OsDisk]
    new_directory: Callable[[], str]


FAULTS = {
    # name: (disk kind, torn-write seed)
    "memory-clean": ("memory", None),
    "memory-torn-1": ("memory", 1),
    "memory-torn-2": ("memory", 2),
    "os-process-death": ("os", None),
}


def make_place(kind: str, tmp_path) -> Place:
    if kind == "memory":
        return Place(MemoryDisk, lambda: "/kafka/t-0")
    runs = iter(range(10**6))
    return Place(lambda: OsDisk(lose_unflushed_on_crash=True), lambda: str(tmp_path / f"run-{next(runs)}" / "t-0"))


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("index", range(len(SCENARIO)), ids=[name for name, _, _ in SCENARIO])
def test_power_loss_at_every_step(tmp_path, index, fault):
    kind, torn_seed = FAULTS[fault]
    place = make_place(kind, tmp_path)
    fail_at = 0
    while True:
        world, before, finished = run_until(place, index, fail_at)
        log = check_recovered(world, before, torn_seed)
        # Recovery made everything it kept durable: another crash changes nothing.
        kept = ([bytes(b) for b in log.read(log.log_start_offset, 10**9)], log.log_start_offset, log.log_end_offset)
        world.disk.power_loss(None)
        again = PartitionLog.open(world.disk, world.directory, CONFIG, now_ms=world.now_ms)
        assert ([bytes(b) for b in again.read(again.log_start_offset, 10**9)], again.log_start_offset, again.log_end_offset) == kept
        assert again.recovery.reason is None
        # And the log goes on.
        batch = make_batch(again.log_end_offset, body_size=30, epoch=9)
        again.append(batch, now_ms=world.now_ms)
        assert [bytes(b) for b in again.read(again.log_end_offset - 1, 100)] == [batch]
        again.close()
        world.disk.power_loss(None)  # releases the descriptors of the OsDisk run
        if finished:
            break
        fail_at += 1
    assert fail_at > 0, "the operation wrote nothing: the scenario does not exercise it"
