"""The Disk implementations: one behaviour on real files and in memory, and the crash model."""

from __future__ import annotations

import os

import pytest

from cluster.storage.disk import MemoryDisk, OsDisk, StaleHandleError


def test_files_and_directories(place):
    disk, root = place.disk, place.directory
    assert not disk.exists(root)
    disk.makedirs(root + "/a/b")
    disk.makedirs(root + "/a/b")  # idempotent
    assert disk.exists(root + "/a/b")
    handle = disk.open_append(root + "/a/one.log")
    handle.write(b"hello ")
    handle.write(memoryview(b"world"))
    handle.write(bytearray(b"!"))
    assert disk.file_size(root + "/a/one.log") == 12
    assert disk.read(root + "/a/one.log", 6, 5) == b"world"
    assert disk.read(root + "/a/one.log", 10, 100) == b"d!"
    assert disk.read(root + "/a/one.log", 50, 10) == b""
    assert disk.read_all(root + "/a/one.log") == b"hello world!"
    assert disk.listdir(root + "/a") == ["b", "one.log"]
    disk.truncate(root + "/a/one.log", 5)
    handle.write(b"!")  # appends land at the new end
    assert disk.read_all(root + "/a/one.log") == b"hello!"
    with pytest.raises(ValueError, match="truncate"):
        disk.truncate(root + "/a/one.log", 7)
    handle.fsync()
    handle.close()
    with pytest.raises(StaleHandleError):
        handle.write(b"x")
    disk.write_atomic(root + "/a/cp", b"42\n")
    disk.write_atomic(root + "/a/cp", b"43\n")
    assert disk.read_all(root + "/a/cp") == b"43\n"
    assert disk.listdir(root + "/a") == ["b", "cp", "one.log"]
    disk.remove(root + "/a/cp")
    assert not disk.exists(root + "/a/cp")
    disk.rmtree(root + "/a")
    assert not disk.exists(root + "/a/one.log") and not disk.exists(root + "/a")
    assert disk.listdir(root) == []


def test_missing_paths_raise(place):
    disk, root = place.disk, place.directory
    disk.makedirs(root)
    with pytest.raises(FileNotFoundError):
        disk.read(root + "/nope", 0, 1)
    with pytest.raises(FileNotFoundError):
        disk.file_size(root + "/nope")
    with pytest.raises(FileNotFoundError):
        disk.remove(root + "/nope")
    with pytest.raises(FileNotFoundError):
        disk.open_append(root + "/no-dir/file")
    with pytest.raises(FileNotFoundError):
        disk.listdir(root + "/no-dir")
    with pytest.raises(ValueError):
        disk.read(root + "/nope", -1, 1)


def test_memory_disk_crash_drops_exactly_the_unsynced_bytes():
    disk = MemoryDisk()
    disk.makedirs("/d")
    a = disk.open_append("/d/a")
    b = disk.open_append("/d/b")
    a.write(b"durable")
    a.fsync()
    a.write(b"-lost")
    b.write(b"all lost")
    disk.write_atomic("/d/cp", b"kept")
    assert disk.unflushed_bytes() == len(b"-lost") + len(b"all lost")
    assert disk.fsync_count == 2  # the fsync and the atomic write
    disk.crash()
    assert disk.read_all("/d/a") == b"durable"
    assert disk.read_all("/d/b") == b""  # the file itself survives, empty
    assert disk.read_all("/d/cp") == b"kept"
    assert disk.unflushed_bytes() == 0
    with pytest.raises(StaleHandleError, match="before a crash"):
        a.write(b"x")
    with pytest.raises(StaleHandleError):
        b.fsync()


def test_memory_disk_truncation_is_durable_and_never_undone():
    disk = MemoryDisk()
    disk.makedirs("/d")
    handle = disk.open_append("/d/f")
    handle.write(b"0123456789")
    handle.fsync()
    disk.truncate("/d/f", 4)
    handle.write(b"abc")
    disk.crash()
    assert disk.read_all("/d/f") == b"0123"


def test_memory_disk_handle_on_a_removed_file_is_stale():
    disk = MemoryDisk()
    disk.makedirs("/d")
    handle = disk.open_append("/d/f")
    disk.remove("/d/f")
    with pytest.raises(StaleHandleError, match="removed"):
        handle.write(b"x")
    disk.write_atomic("/d/g", b"1")
    handle = disk.open_append("/d/g")
    disk.write_atomic("/d/g", b"2")  # replaced by rename
    with pytest.raises(StaleHandleError):
        handle.write(b"x")


def test_memory_disk_refuses_files_where_directories_are():
    disk = MemoryDisk()
    disk.makedirs("/d/e")
    with pytest.raises(IsADirectoryError):
        disk.open_append("/d/e")
    disk.open_append("/d/f").close()
    with pytest.raises(FileExistsError):
        disk.makedirs("/d/f/g")
    with pytest.raises(ValueError):
        disk.rmtree("/")


def test_os_disk_crash_mode_keeps_unsynced_bytes_out_of_the_file(tmp_path):
    disk = OsDisk(lose_unflushed_on_crash=True)
    path = str(tmp_path / "seg.log")
    handle = disk.open_append(path)
    handle.write(b"first")
    handle.fsync()
    handle.write(b"+second")
    # The process sees everything; the OS has only what was fsynced.
    assert disk.read_all(path) == b"first+second"
    assert disk.file_size(path) == 12
    assert disk.read(path, 3, 5) == b"st+se"
    assert disk.read(path, 6, 100) == b"second"
    assert open(path, "rb").read() == b"first"
    disk.truncate(path, 8)  # inside the unsynced part
    assert disk.read_all(path) == b"first+se" and open(path, "rb").read() == b"first"
    disk.truncate(path, 3)  # inside the synced part: the OS file shrinks
    assert disk.read_all(path) == b"fir" and open(path, "rb").read() == b"fir"
    handle.write(b"e!")
    handle.fsync()
    assert open(path, "rb").read() == b"fire!"
    handle.close()
    disk.close()


def test_os_disk_default_mode_writes_through(tmp_path):
    disk = OsDisk()
    path = str(tmp_path / "seg.log")
    handle = disk.open_append(path)
    handle.write(b"at once")
    assert open(path, "rb").read() == b"at once"
    handle.close()
    disk.write_atomic(str(tmp_path / "cp"), b"1")
    assert sorted(os.listdir(tmp_path)) == ["cp", "seg.log"]  # no temporary file left
    disk.close()


def test_os_disk_bounds_its_cached_read_descriptors(tmp_path):
    disk = OsDisk(max_cached_read_fds=3)
    paths = []
    for i in range(10):
        path = str(tmp_path / f"f{i}")
        handle = disk.open_append(path)
        handle.write(f"file {i}".encode())
        handle.close()
        paths.append(path)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        for i, path in enumerate(paths):
            assert disk.read_all(path) == f"file {i}".encode()
    assert len(os.listdir("/proc/self/fd")) <= before + 3
    disk.close()
    assert len(os.listdir("/proc/self/fd")) <= before
    with pytest.raises(ValueError):
        OsDisk(max_cached_read_fds=0)


def test_an_active_segment_holds_one_descriptor(tmp_path):
    from cluster.storage.log import LogConfig, PartitionLog
    from tests.cluster.storage.batches import make_batch

    disk = OsDisk(max_cached_read_fds=1)
    before = len(os.listdir("/proc/self/fd"))
    logs = [PartitionLog.open(disk, str(tmp_path / f"p{i}"), LogConfig(index_interval_bytes=0), now_ms=0) for i in range(20)]
    for log in logs:
        for offset in range(5):
            log.append(make_batch(offset, body_size=50), now_ms=0)
        log.flush()
        log.read(0, 100)
    assert len(os.listdir("/proc/self/fd")) <= before + 20 + 1
    for log in logs:
        log.close()
    disk.close()
    assert len(os.listdir("/proc/self/fd")) <= before
