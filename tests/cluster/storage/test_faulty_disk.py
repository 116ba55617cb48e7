"""The fault-injecting Disk: EIO on fsync, ENOSPC on writes, slow fsync, and torn or corrupt
unflushed tails at a crash, each through a real PartitionLog on real files and in memory."""

from __future__ import annotations

import errno
import random

import pytest

from cluster.storage.batch import crc_is_valid, parse_header
from cluster.storage.disk import MemoryDisk, OsDisk
from cluster.storage.faulty_disk import DiskFaults, FaultyDisk, errno_from
from cluster.storage.log import LogConfig, PartitionLog
from tests.cluster.storage.batches import make_batch

# flush.messages=1: every append is fsynced, so each fault meets the log at once.
FLUSH_EACH = LogConfig(segment_bytes=1 << 20, index_interval_bytes=150, retention_ms=None, flush_interval_messages=1)
NEVER_FLUSH = LogConfig(segment_bytes=1 << 20, index_interval_bytes=150, retention_ms=None)


@pytest.fixture
def faulty(place):
    stalls: list[int] = []
    disk = FaultyDisk(place.disk, stall=stalls.append)
    disk.stalls = stalls  # type: ignore[attr-defined]
    return disk


def append(log: PartitionLog, offset: int, count: int = 2) -> bytes:
    batch = make_batch(offset, count, body_size=120)
    log.append(batch, now_ms=0)
    return batch


def test_fsync_eio_fails_the_append_and_the_checkpoint_writes(place, faulty) -> None:
    log = PartitionLog.open(faulty, place.directory, FLUSH_EACH, now_ms=0)
    append(log, 0)
    faulty.set_faults(DiskFaults(fsync_errno="EIO"))
    with pytest.raises(OSError) as raised:
        append(log, 2)
    assert raised.value.errno == errno.EIO
    with pytest.raises(OSError) as raised:
        faulty.write_atomic(f"{place.directory}/high-watermark-checkpoint", b"2\n")
    assert raised.value.errno == errno.EIO
    assert faulty.counts.fsync_errors == 2
    # The failed fsync left the batch written (visible) but not durable.
    assert log.recovery_point == 2
    assert list(faulty.unflushed()) == [log.active_segment.log_path]
    faulty.clear_faults()
    log.flush()
    assert log.recovery_point == 4
    # Index entries are written without an fsync of their own (segment.py): only they remain.
    assert all(path.endswith(".index") for path in faulty.unflushed())


def test_enospc_refuses_new_bytes_but_not_truncation(place, faulty) -> None:
    log = PartitionLog.open(faulty, place.directory, NEVER_FLUSH, now_ms=0)
    first = append(log, 0)
    append(log, 2)
    faulty.set_faults(DiskFaults(write_errno=errno.ENOSPC))
    size_before = faulty.file_size(log.active_segment.log_path)
    with pytest.raises(OSError) as raised:
        append(log, 4)
    assert raised.value.errno == errno.ENOSPC
    assert faulty.file_size(log.active_segment.log_path) == size_before  # nothing written
    with pytest.raises(OSError):
        faulty.write_atomic(f"{place.directory}/recovery-point", b"4\n")
    with pytest.raises(OSError):
        faulty.open_append(f"{place.directory}/new-file")
    assert faulty.counts.write_errors == 3
    faulty.truncate(log.active_segment.log_path, len(first))  # frees space: allowed on a full disk
    assert faulty.read_all(log.active_segment.log_path) == first
    faulty.clear_faults()
    assert append(PartitionLog.open(faulty, place.directory + "-b", NEVER_FLUSH, now_ms=0), 0) == first


def test_slow_fsync_stalls_each_fsync_through_the_injected_stall(place, faulty) -> None:
    log = PartitionLog.open(faulty, place.directory, FLUSH_EACH, now_ms=0)
    append(log, 0)  # its new leader epoch is checkpointed too: one more fsync
    faulty.set_faults(DiskFaults(fsync_delay_ms=250))
    append(log, 2)
    append(log, 4)
    assert faulty.stalls == [250, 250]  # type: ignore[attr-defined]
    assert faulty.counts.stalled_fsyncs == 2 and faulty.counts.stalled_ms == 500
    assert log.recovery_point == 6  # slow, not failed
    with pytest.raises(ValueError, match="stall callable"):
        FaultyDisk(place.disk).set_faults(DiskFaults(fsync_delay_ms=1))


def test_bad_fault_values_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="fsync_errno 'EFOO'"):
        DiskFaults(fsync_errno="EFOO")
    with pytest.raises(ValueError, match="fsync_delay_ms -1"):
        DiskFaults(fsync_delay_ms=-1)
    assert errno_from("enospc", "x") == errno.ENOSPC and errno_from(None, "x") is None


@pytest.mark.parametrize("seed", range(12))
def test_torn_and_corrupt_tail_is_cut_by_recovery_and_never_served(seed: int) -> None:
    """Crash with a torn, corrupted unflushed tail: recovery keeps exactly the batches that
    are whole and valid, every one of them the bytes appended, and nothing else."""
    memory = MemoryDisk()
    faulty = FaultyDisk(memory)
    directory = "/data/t-0"
    log = PartitionLog.open(faulty, directory, NEVER_FLUSH, now_ms=0)
    batches = [append(log, 2 * i) for i in range(5)]
    log.flush()  # offsets 0-9 durable
    batches += [append(log, 10 + 2 * i) for i in range(6)]  # 10-21 unflushed
    torn = faulty.tear_unflushed_tails(random.Random(seed), corrupt=True)
    memory.crash()
    segment = [t for t in torn if t.path.endswith(".log")]
    assert len(segment) == 1 and segment[0].unflushed_bytes == sum(len(b) for b in batches[5:])

    reopened = PartitionLog.open(memory, directory, NEVER_FLUSH, now_ms=0)
    served = [bytes(b) for b in reopened.read(0, 10**6)]
    assert served == batches[: len(served)], "recovery served bytes that were never appended"
    assert len(served) >= 5, "recovery cut into the durable prefix"
    whole = segment[0].kept_bytes // len(batches[5])
    flipped_batch = None if segment[0].flipped_at is None else (segment[0].flipped_at - sum(len(b) for b in batches[:5])) // len(batches[5])
    expected = 5 + (whole if flipped_batch is None else min(whole, flipped_batch))
    assert len(served) == expected
    for batch in served:
        assert crc_is_valid(batch, parse_header(batch))
    if segment[0].kept_bytes > sum(len(b) for b in batches[5:expected]):
        assert reopened.recovery.truncated_bytes > 0 and reopened.recovery.reason is not None


def test_tear_on_real_files_then_a_process_restart(tmp_path) -> None:
    """The process form: bytes reach the OS as written; the tear rewrites the tail in place
    and a new OsDisk (the restarted broker) recovers from it."""
    disk = OsDisk()
    faulty = FaultyDisk(disk)
    directory = str(tmp_path / "t-0")
    log = PartitionLog.open(faulty, directory, NEVER_FLUSH, now_ms=0)
    batches = [append(log, 2 * i) for i in range(4)]
    log.flush()
    batches += [append(log, 8 + 2 * i) for i in range(4)]
    # A cut in the middle of the 6th batch, with no flip.
    cut = sum(len(b) for b in batches[4:5]) + 30

    class Fixed:
        def randint(self, a: int, b: int) -> int:
            return min(max(cut, a), b)

    torn = faulty.tear_unflushed_tails(Fixed(), corrupt=False)
    disk.abandon()
    assert [t.kept_bytes for t in torn if t.path.endswith(".log")] == [cut]
    reopened = PartitionLog.open(OsDisk(), directory, NEVER_FLUSH, now_ms=0)
    assert [bytes(b) for b in reopened.read(0, 10**6)] == batches[:5]
    assert reopened.recovery.truncated_bytes == 30
    assert "torn" in (reopened.recovery.reason or "")
    reopened.close()


def test_the_leader_epoch_field_is_never_the_flipped_byte() -> None:
    for seed in range(200):
        memory = MemoryDisk()
        faulty = FaultyDisk(memory)
        log = PartitionLog.open(faulty, "/d/t-0", NEVER_FLUSH, now_ms=0)
        log.flush()
        sizes = [len(append(log, 2 * i)) for i in range(3)]
        torn = [t for t in faulty.tear_unflushed_tails(random.Random(seed), corrupt=True) if t.path.endswith(".log")]
        flipped = torn[0].flipped_at
        if flipped is None:
            continue
        starts = [sum(sizes[:i]) for i in range(3)]
        assert not any(s + 12 <= flipped < s + 16 for s in starts), f"seed {seed} flipped the epoch at byte {flipped}"
