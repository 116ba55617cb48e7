"""Leader-epoch cache: Kafka's OffsetForLeaderEpoch answers, truncation, persistence."""

from __future__ import annotations

import pytest

from cluster.storage.disk import MemoryDisk
from cluster.storage.epochs import CHECKPOINT_FILE, CorruptCheckpointError, LeaderEpochCache, replay_assignments
from cluster.storage.log import LogConfig, PartitionLog
from tests.cluster.storage.batches import make_batch


@pytest.fixture
def cache() -> LeaderEpochCache:
    disk = MemoryDisk()
    disk.makedirs("/p")
    return LeaderEpochCache(disk, "/p")


def test_empty_cache(cache):
    assert cache.latest_epoch == -1
    assert cache.entries() == []
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.epoch_for_offset(5) == -1


def test_assign_follows_kafka(cache):
    cache.assign(1, 0)
    cache.assign(1, 10)  # the latest epoch again: nothing to record
    assert cache.entries() == [(1, 0)]
    cache.assign(3, 10)
    cache.assign(5, 20)
    # A newer epoch starting below existing entries replaces them (the log was rewritten).
    cache.assign(6, 15)
    assert cache.entries() == [(1, 0), (3, 10), (6, 15)]
    # An older epoch (a follower copying a leader whose log went another way) drops every
    # entry with an epoch at least as new, so offsets from 30 on are not claimed for epoch 6.
    cache.assign(4, 30)
    assert cache.entries() == [(1, 0), (3, 10), (4, 30)]
    cache.assign(4, 25)  # the latest epoch, but starting earlier
    assert cache.entries() == [(1, 0), (3, 10), (4, 25)]
    cache.assign(0, 40)
    assert cache.entries() == [(0, 40)]
    with pytest.raises(ValueError):
        cache.assign(7, -1)
    with pytest.raises(ValueError):
        cache.assign(-1, 50)


def test_replay_assignments_matches_assigning_one_by_one(cache):
    changes = [(1, 0), (3, 5), (2, 9), (2, 12), (6, 20), (4, 20), (7, 31), (-1, 40), (8, 41)]
    for epoch, start in changes:
        if epoch >= 0:
            cache.assign(epoch, start)
    assert replay_assignments(changes) == cache.entries() == [(1, 0), (2, 9), (4, 20), (7, 31), (8, 41)]


def test_end_offset_for_follows_kafka(cache):
    for epoch, start in [(2, 0), (4, 100), (7, 250)]:
        cache.assign(epoch, start)
    leo = 300
    assert cache.end_offset_for(7, leo) == (7, 300)  # latest: the log end
    assert cache.end_offset_for(4, leo) == (4, 250)
    assert cache.end_offset_for(2, leo) == (2, 100)
    assert cache.end_offset_for(5, leo) == (4, 250)  # a hole: the epoch below, ending where 7 began
    assert cache.end_offset_for(1, leo) == (1, 0)  # below every epoch: the first start offset
    assert cache.end_offset_for(8, leo) == (-1, -1)  # newer than anything known
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert [cache.epoch_for_offset(o) for o in (0, 99, 100, 249, 250, 999)] == [2, 2, 4, 4, 7, 7]


def test_truncation_from_both_ends(cache):
    for epoch, start in [(1, 0), (2, 10), (3, 20), (4, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(21)
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (2, 10)]
    cache.truncate_from_start(5)
    assert cache.entries() == [(1, 5), (2, 10)]
    cache.truncate_from_start(10)
    assert cache.entries() == [(2, 10)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15)]
    cache.truncate_from_start(3)
    assert cache.entries() == [(2, 15)]


def test_every_change_is_persisted(cache):
    disk = cache._disk
    cache.assign(3, 0)
    cache.assign(5, 42)
    assert disk.read_all(f"/p/{CHECKPOINT_FILE}") == b"0\n2\n3 0\n5 42\n"
    disk.crash()  # written atomically: survives a crash
    assert LeaderEpochCache.load(disk, "/p").entries() == [(3, 0), (5, 42)]
    cache.truncate_from_end(10)
    assert LeaderEpochCache.load(disk, "/p").entries() == [(3, 0)]
    cache.clear()
    assert LeaderEpochCache.load(disk, "/p").entries() == []


@pytest.mark.parametrize("content", [b"0\n2\n3 0\n", b"garbage", b"1\n0\n", b"0\n2\n5 0\n3 10\n", b"0\n1\n-1 0\n"])
def test_corrupt_checkpoint_is_named(content):
    disk = MemoryDisk()
    disk.makedirs("/p")
    disk.write_atomic(f"/p/{CHECKPOINT_FILE}", content)
    with pytest.raises(CorruptCheckpointError, match=CHECKPOINT_FILE):
        LeaderEpochCache.load(disk, "/p")


def test_log_rebuilds_a_lost_or_corrupt_checkpoint_from_batch_headers():
    disk = MemoryDisk()
    config = LogConfig(segment_bytes=500, retention_ms=None)
    log = PartitionLog.open(disk, "/p", config, now_ms=0)
    for i in range(20):
        log.append(make_batch(i, body_size=50, epoch=1 + i // 7), now_ms=0)
    assert log.epochs.entries() == [(1, 0), (2, 7), (3, 14)]
    log.close()
    disk.remove(f"/p/{CHECKPOINT_FILE}")
    reopened = PartitionLog.open(disk, "/p", config, now_ms=0)
    assert reopened.epochs.entries() == [(1, 0), (2, 7), (3, 14)]
    assert any("leader-epoch-checkpoint is missing" in note for note in reopened.recovery.rebuilt)
    reopened.close()
    disk.write_atomic(f"/p/{CHECKPOINT_FILE}", b"nonsense")
    again = PartitionLog.open(disk, "/p", config, now_ms=0)
    assert again.epochs.entries() == [(1, 0), (2, 7), (3, 14)]
    assert any(CHECKPOINT_FILE in note for note in again.recovery.rebuilt)
    again.close()


def test_appends_keep_the_cache_and_recovery_trims_it():
    disk = MemoryDisk()
    log = PartitionLog.open(disk, "/p", LogConfig(retention_ms=None), now_ms=0)
    log.append(make_batch(0, epoch=0), now_ms=0)
    log.append(make_batch(1, epoch=2), now_ms=0)
    log.append(make_batch(2, epoch=1), now_ms=0)  # an older epoch: epoch 2 is forgotten
    log.flush()
    log.append(make_batch(3, epoch=5), now_ms=0)
    assert log.epochs.entries() == [(0, 0), (1, 2), (5, 3)]
    disk.crash()  # offset 3 was never fsynced; the cache entry for it was
    reopened = PartitionLog.open(disk, "/p", LogConfig(retention_ms=None), now_ms=0)
    assert reopened.log_end_offset == 3
    assert reopened.epochs.entries() == [(0, 0), (1, 2)]
    assert reopened.epochs.end_offset_for(1, reopened.log_end_offset) == (1, 3)
    reopened.close()
    # Rebuilt from the batches, the cache comes out the same.
    disk.remove(f"/p/{CHECKPOINT_FILE}")
    rebuilt = PartitionLog.open(disk, "/p", LogConfig(retention_ms=None), now_ms=0)
    assert rebuilt.epochs.entries() == [(0, 0), (1, 2)]
    rebuilt.close()


def test_a_crash_that_undoes_an_older_epochs_rewrite_rebuilds_the_cache():
    # Found by the model test: an older epoch rewrote the cache's tail (the checkpoint is
    # written at once), then a crash lost that batch; the cache must fit the log again.
    disk = MemoryDisk()
    config = LogConfig(retention_ms=None)
    log = PartitionLog.open(disk, "/p", config, now_ms=0)
    log.append(make_batch(0, epoch=1), now_ms=0)
    log.append(make_batch(1, epoch=3), now_ms=0)
    log.flush()
    log.append(make_batch(2, epoch=2), now_ms=0)
    assert log.epochs.entries() == [(1, 0), (2, 2)]
    disk.crash()
    reopened = PartitionLog.open(disk, "/p", config, now_ms=0)
    assert reopened.log_end_offset == 2
    assert reopened.epochs.entries() == [(1, 0), (3, 1)]
    assert any("the last batch (offset 1) has epoch 3, the cache says 1" in note for note in reopened.recovery.rebuilt)
    reopened.close()
