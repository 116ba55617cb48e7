"""Recovery on open: torn tails, corrupt batches, garbage, lost indexes, and real crashes."""

from __future__ import annotations

import os
import posixpath
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.storage.disk import MemoryDisk, OsDisk
from cluster.storage.log import LogConfig, PartitionLog
from cluster.storage.segment import segment_file_stem
from tests.cluster.storage.batches import make_batch

CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=150, retention_ms=None)
REPO = Path(__file__).resolve().parents[3]


def build(place, count: int = 40) -> list[bytes]:
    log = PartitionLog.open(place.disk, place.directory, CONFIG, now_ms=0)
    batches = []
    for i in range(count):
        batch = make_batch(i * 2, 2, body_size=100, epoch=i // 10)
        log.append(batch, now_ms=0)
        batches.append(batch)
    log.close()
    return batches


def last_segment(place) -> str:
    logs = [n for n in place.disk.listdir(place.directory) if n.endswith(".log")]
    return posixpath.join(place.directory, logs[-1])


def rewrite(place, path: str, data: bytes) -> None:
    place.disk.remove(path)
    handle = place.disk.open_append(path)
    handle.write(data)
    handle.fsync()
    handle.close()


def reopen_and_check(place, batches: list[bytes], survivors: int) -> PartitionLog:
    log = PartitionLog.open(place.disk, place.directory, CONFIG, now_ms=0)
    assert log.log_end_offset == 2 * survivors
    assert [bytes(b) for b in log.read(0, 10**9)] == batches[:survivors]
    # The log is usable afterwards: appends continue at the recovered end.
    log.append(make_batch(log.log_end_offset, body_size=10), now_ms=0)
    return log


def test_torn_tail_is_cut(place):
    batches = build(place)
    path = last_segment(place)
    data = place.disk.read_all(path)
    rewrite(place, path, data[: len(data) - 50])  # the last batch loses its end
    log = reopen_and_check(place, batches, len(batches) - 1)
    report = log.recovery
    assert report.truncated_bytes == len(batches[-1]) - 50
    assert report.reason.startswith("torn batch at offset 78") and posixpath.basename(path) in report.reason
    log.close()


def test_torn_header_is_cut(place):
    batches = build(place)
    path = last_segment(place)
    data = place.disk.read_all(path)
    rewrite(place, path, data + batches[0][:30])
    log = reopen_and_check(place, batches, len(batches))
    assert log.recovery.truncated_bytes == 30
    assert "torn batch header at offset 80" in log.recovery.reason
    log.close()


def test_corrupt_crc_in_last_batch_is_cut(place):
    batches = build(place)
    path = last_segment(place)
    data = bytearray(place.disk.read_all(path))
    data[-3] ^= 0x55
    rewrite(place, path, bytes(data))
    log = reopen_and_check(place, batches, len(batches) - 1)
    assert log.recovery.truncated_bytes == len(batches[-1])
    assert log.recovery.reason == f"CRC mismatch at offset 78 (byte {len(data) - len(batches[-1])}) in {posixpath.basename(path)}"
    log.close()


def test_garbage_after_the_last_batch_is_cut(place):
    batches = build(place)
    path = last_segment(place)
    rewrite(place, path, place.disk.read_all(path) + os.urandom(5_000))
    log = reopen_and_check(place, batches, len(batches))
    assert log.recovery.truncated_bytes == 5_000
    assert "at offset 80" in log.recovery.reason
    log.close()


def test_out_of_sequence_batch_is_cut(place):
    batches = build(place)
    path = last_segment(place)
    rewrite(place, path, place.disk.read_all(path) + make_batch(81, body_size=100))
    log = reopen_and_check(place, batches, len(batches))
    assert "offset 81" in log.recovery.reason and "offset 80 was expected" in log.recovery.reason
    log.close()


def test_corruption_in_a_middle_segment_after_the_recovery_point_drops_what_follows(place):
    batches = build(place)
    log = PartitionLog.open(place.disk, place.directory, CONFIG, now_ms=0)
    bases = log.segment_base_offsets
    log.close()
    # Pretend the last clean flush was long ago, so the middle segment gets checked.
    place.disk.write_atomic(posixpath.join(place.directory, "recovery-point"), b"0\n")
    middle = posixpath.join(place.directory, segment_file_stem(bases[1]) + ".log")
    data = bytearray(place.disk.read_all(middle))
    data[70] ^= 0x01  # inside the first batch's CRC-covered bytes
    rewrite(place, middle, bytes(data))
    log = PartitionLog.open(place.disk, place.directory, CONFIG, now_ms=0)
    assert log.segment_base_offsets == bases[:2]
    assert log.log_end_offset == bases[1]
    assert [bytes(b) for b in log.read(0, 10**9)] == batches[: bases[1] // 2]
    assert log.recovery.reason.startswith(f"CRC mismatch at offset {bases[1]} (byte 0)")
    assert log.recovery.truncated_bytes == sum(map(len, batches[bases[1] // 2 :]))
    log.close()


def test_lost_index_is_rebuilt(place):
    batches = build(place)
    index = posixpath.join(place.directory, segment_file_stem(0) + ".index")
    original = place.disk.read_all(index)
    assert len(original) > 0
    place.disk.remove(index)
    log = reopen_and_check(place, batches, len(batches))
    assert log.recovery.reason is None and log.recovery.truncated_bytes == 0
    assert log.recovery.rebuilt == (f"{segment_file_stem(0)}.index is missing; rebuilt",)
    assert place.disk.read_all(index) == original
    log.close()


@pytest.mark.parametrize("damage", ["garbage", "short", "wrong_position"])
def test_corrupt_index_is_rebuilt(place, damage):
    batches = build(place)
    index = posixpath.join(place.directory, segment_file_stem(0) + ".index")
    original = place.disk.read_all(index)
    if damage == "garbage":
        broken = os.urandom(len(original))
    elif damage == "short":
        broken = original[:-3]
    else:  # a well-formed entry pointing into the middle of a batch
        broken = original[:-16] + (int.from_bytes(original[-16:-12], "big") + 7).to_bytes(4, "big") + original[-12:]
    rewrite(place, index, broken)
    log = reopen_and_check(place, batches, len(batches))
    assert log.recovery.reason is None
    assert len(log.recovery.rebuilt) == 1 and "00000000000000000000.index is invalid" in log.recovery.rebuilt[0]
    assert place.disk.read_all(index) == original
    log.close()


def test_index_corrupted_while_open_is_rebuilt_on_use(place):
    batches = build(place)
    log = PartitionLog.open(place.disk, place.directory, CONFIG, now_ms=0)
    segment = log._segments[0]
    # Swap two entries' positions in memory: lookups must notice and rebuild, not misread.
    segment.index._positions[1], segment.index._positions[2] = segment.index._positions[2], segment.index._positions[1]
    assert [bytes(b) for b in log.read(0, 10**9)] == batches
    for offset in range(0, 80, 3):
        assert bytes(log.read(offset, 1)[0]) == batches[offset // 2]
    log.close()


def test_leftover_temporary_and_orphan_files_are_removed(place):
    build(place)
    for name in ("recovery-point.tmp", segment_file_stem(9_999) + ".index"):
        handle = place.disk.open_append(posixpath.join(place.directory, name))
        handle.write(b"junk")
        handle.close()
    log = PartitionLog.open(place.disk, place.directory, CONFIG, now_ms=0)
    names = place.disk.listdir(place.directory)
    assert "recovery-point.tmp" not in names and segment_file_stem(9_999) + ".index" not in names
    log.close()


def test_memory_disk_crash_keeps_exactly_the_fsynced_prefix():
    disk = MemoryDisk()
    config = LogConfig(retention_ms=None)
    log = PartitionLog.open(disk, "/p", config, now_ms=0)
    batches = [make_batch(i, body_size=100) for i in range(10)]
    for i, batch in enumerate(batches):
        log.append(batch, now_ms=0)
        if i == 3:
            log.flush()
    assert disk.unflushed_bytes() > 0
    disk.crash()
    with pytest.raises(OSError):
        log.append(make_batch(10), now_ms=0)  # handles from before the crash are dead
    reopened = PartitionLog.open(disk, "/p", config, now_ms=0)
    assert reopened.log_end_offset == 4
    assert [bytes(b) for b in reopened.read(0, 10**9)] == batches[:4]
    assert reopened.recovery.reason is None  # a clean cut at a batch boundary
    reopened.close()


def test_without_a_crash_nothing_is_lost_on_memory_disk():
    disk = MemoryDisk()
    log = PartitionLog.open(disk, "/p", LogConfig(retention_ms=None), now_ms=0)
    batches = [make_batch(i, body_size=100) for i in range(10)]
    for batch in batches:
        log.append(batch, now_ms=0)
    # The process "dies" (the object is dropped) but the disk keeps its page cache.
    reopened = PartitionLog.open(disk, "/p", LogConfig(retention_ms=None), now_ms=0)
    assert [bytes(b) for b in reopened.read(0, 10**9)] == batches
    reopened.close()


def run_crash_writer(directory: Path, count: int, flush_after: int, mode: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.cluster.storage.crash_writer", str(directory), str(count), str(flush_after), mode],
        cwd=REPO, capture_output=True, timeout=120,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()


@pytest.mark.parametrize("mode, survivors", [("lose", 7), ("keep", 30)])
def test_sigkill_of_a_real_process(tmp_path, mode, survivors):
    directory = tmp_path / "topic-0"
    run_crash_writer(directory, count=30, flush_after=7, mode=mode)
    disk = OsDisk()
    try:
        log = PartitionLog.open(disk, str(directory), LogConfig(retention_ms=None, index_interval_bytes=64), now_ms=0)
        assert log.log_end_offset == survivors
        assert [bytes(b) for b in log.read(0, 10**9)] == [make_batch(i, body_size=100) for i in range(survivors)]
        assert log.recovery.reason is None
        log.close()
    finally:
        disk.close()


def test_crash_below_a_moved_log_start_restarts_the_log_empty_there():
    disk = MemoryDisk()
    config = LogConfig(retention_ms=None)
    log = PartitionLog.open(disk, "/p", config, now_ms=0)
    for i in range(10):
        log.append(make_batch(i, body_size=20, epoch=1), now_ms=0)
        if i == 3:
            log.flush()
    log.delete_records_before(8)  # the log start is checkpointed at once; offsets 4.. are not
    disk.crash()
    reopened = PartitionLog.open(disk, "/p", config, now_ms=0)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (8, 8)
    assert reopened.read(8, 100) == [] and reopened.epochs.entries() == []
    assert any("log start 8 is past the recovered end 4" in note for note in reopened.recovery.rebuilt)
    reopened.append(make_batch(8, epoch=2), now_ms=0)
    assert reopened.epochs.entries() == [(2, 8)]
    reopened.close()


@pytest.mark.parametrize("seed", range(8))
def test_torn_writes_on_power_loss_are_cut(seed):
    import random

    disk = MemoryDisk()
    config = LogConfig(retention_ms=None, index_interval_bytes=100)
    log = PartitionLog.open(disk, "/p", config, now_ms=0)
    batches = [make_batch(i, body_size=150) for i in range(12)]
    for i, batch in enumerate(batches):
        log.append(batch, now_ms=0)
        if i == 4:
            log.flush()
    disk.crash(torn_writes=random.Random(seed))
    reopened = PartitionLog.open(disk, "/p", config, now_ms=0)
    survivors = reopened.log_end_offset
    assert 5 <= survivors <= 12
    assert [bytes(b) for b in reopened.read(0, 10**9)] == batches[:survivors]
    report = reopened.recovery
    if report.truncated_bytes:
        assert report.reason is not None and f"at offset {survivors}" in report.reason
    reopened.append(make_batch(survivors), now_ms=0)
    reopened.close()
