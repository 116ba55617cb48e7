"""PartitionLog on real files and on MemoryDisk: appends, reads, reopen, flush, retention,
truncation, timestamps."""

from __future__ import annotations

import pytest

from cluster.storage.batch import InvalidBatchError, parse_header
from cluster.storage.disk import MemoryDisk
from cluster.storage.log import LogConfig, OffsetOutOfRangeError, PartitionLog
from tests.cluster.storage.batches import make_batch

SMALL = LogConfig(segment_bytes=1_000, index_interval_bytes=100, retention_ms=None)


def fill(log: PartitionLog, count: int, *, records: int = 3, body_size: int = 90, epoch: int = 0, ts0: int = 1_000) -> list[bytes]:
    batches = []
    for i in range(count):
        batch = make_batch(log.log_end_offset, records, body_size=body_size, epoch=epoch, base_timestamp_ms=ts0 + 10 * i)
        log.append(batch, now_ms=ts0 + 10 * i)
        batches.append(batch)
    return batches


def as_bytes(chunks) -> list[bytes]:
    return [bytes(c) for c in chunks]


def test_round_trip_across_segments_and_reopen(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    batches = fill(log, 40)
    assert log.segment_count > 5
    assert log.log_end_offset == 120 and log.log_start_offset == 0
    assert log.size_bytes == sum(map(len, batches))
    assert as_bytes(log.read(0, 10**9)) == batches
    for offset in range(120):
        assert as_bytes(log.read(offset, 0)) == [batches[offset // 3]]
    assert [h.base_offset for h in log.batch_headers()] == list(range(0, 120, 3))
    assert [h.base_offset for h in log.batch_headers(61)] == list(range(60, 120, 3))
    log.close()

    reopened = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert reopened.recovery.reason is None and reopened.recovery.truncated_bytes == 0
    assert reopened.recovery.segments == log.segment_count
    assert reopened.log_end_offset == 120 and reopened.recovery_point == 120
    assert as_bytes(reopened.read(0, 10**9)) == batches
    more = fill(reopened, 5)
    assert as_bytes(reopened.read(0, 10**9)) == batches + more
    reopened.close()


def test_read_bounds(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    batches = fill(log, 20)
    size = len(batches[0])
    # max_offset (the HWM) bounds by base offset; fetch at the bound gives nothing.
    assert as_bytes(log.read(0, 10**9, max_offset=30)) == batches[:10]
    assert as_bytes(log.read(0, 10**9, max_offset=31)) == batches[:11]
    assert log.read(30, 10**9, max_offset=30) == []
    assert log.read(45, 10**9, max_offset=30) == []
    assert log.read(60, 10**9) == []
    # max_bytes: whole batches only, across segment boundaries.
    assert as_bytes(log.read(0, 3 * size)) == batches[:3]
    assert as_bytes(log.read(0, 3 * size + size - 1)) == batches[:3]
    assert as_bytes(log.read(4, 7 * size)) == batches[1:8]
    # At least one batch, even if larger than max_bytes (KIP-74).
    assert as_bytes(log.read(7, 1)) == [batches[2]]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(61, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    with pytest.raises(ValueError):
        log.read(0, -1)
    log.close()


def test_read_of_an_empty_log(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert log.read(0, 100) == []
    assert log.max_timestamp() is None and log.offset_for_timestamp(0) is None
    assert list(log.batch_headers()) == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    log.close()


def test_append_rejects_bad_batches(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    fill(log, 2)
    with pytest.raises(ValueError, match="not the log end offset 6"):
        log.append(make_batch(5), now_ms=0)
    corrupt = bytearray(make_batch(6, body_size=20))
    corrupt[-1] ^= 0xFF
    with pytest.raises(InvalidBatchError, match="CRC"):
        log.append(corrupt, now_ms=0)
    with pytest.raises(InvalidBatchError, match="exactly one batch"):
        log.append(make_batch(6) + make_batch(7), now_ms=0)
    with pytest.raises(InvalidBatchError):
        log.append(make_batch(6)[:40], now_ms=0)
    assert log.log_end_offset == 6
    log.append(make_batch(6), now_ms=0)
    assert log.log_end_offset == 7
    log.close()


def test_segment_roll_by_time_uses_record_timestamps(place):
    config = LogConfig(segment_ms=1_000, retention_ms=None)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=0)
    log.append(make_batch(0, base_timestamp_ms=10_000), now_ms=0)
    log.append(make_batch(1, base_timestamp_ms=10_900), now_ms=0)
    assert log.segment_count == 1
    log.append(make_batch(2, base_timestamp_ms=11_001), now_ms=0)
    assert log.segment_base_offsets == [0, 2]
    log.close()


def test_flush_policy_by_messages(place):
    config = LogConfig(flush_interval_messages=5, retention_ms=None)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=0)
    assert log.recovery_point == 0
    fill(log, 1, records=3)
    assert log.recovery_point == 0
    fill(log, 1, records=3)  # 6 unflushed offsets >= 5
    assert log.recovery_point == 6
    fill(log, 1, records=4)
    assert log.recovery_point == 6
    fill(log, 1, records=1)
    assert log.recovery_point == 11
    log.close()


def test_flush_policy_by_time(place):
    config = LogConfig(flush_interval_ms=100, retention_ms=None)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=1_000)
    fill(log, 2)
    assert not log.maybe_flush(now_ms=1_099)
    assert log.recovery_point == 0
    assert log.maybe_flush(now_ms=1_100)
    assert log.recovery_point == 6
    assert not log.maybe_flush(now_ms=5_000)  # nothing left to flush
    fill(log, 1)
    assert log.maybe_flush(now_ms=5_001)  # long since the last flush
    fill(log, 1)
    assert not log.maybe_flush(now_ms=5_050)
    assert log.maybe_flush(now_ms=5_101)
    assert log.recovery_point == log.log_end_offset == 12
    log.close()


def test_explicit_flush_and_roll_advance_the_recovery_point(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    fill(log, 2)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 6
    fill(log, 10)  # rolls: the sealed segments are flushed, as in Kafka
    assert log.segment_count > 1
    assert log.recovery_point == log.active_segment.base_offset
    log.close()


def test_retention_by_time(place):
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=100, retention_ms=10_000)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=0)
    batches = fill(log, 30, ts0=1_000, epoch=1)  # timestamps 1_000 .. 1_292
    bases = log.segment_base_offsets
    assert log.apply_retention(now_ms=11_000) == 0
    # Segment 0 holds batches 0..5, whose newest timestamp is 1_000 + 10*5 + 2.
    assert log.apply_retention(now_ms=11_053) == 1
    assert log.log_start_offset == bases[1]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[1] - 1, 100)
    assert as_bytes(log.read(bases[1], 10**9)) == batches[bases[1] // 3 :]
    assert log.epochs.entries() == [(1, bases[1])]
    # Everything has expired, but the active segment stays.
    deleted = log.apply_retention(now_ms=10**9)
    assert deleted == len(bases) - 2
    assert log.segment_count == 1 and log.log_start_offset == bases[-1]
    log.close()
    reopened = PartitionLog.open(place.disk, place.directory, config, now_ms=0)
    assert reopened.log_start_offset == bases[-1]
    assert as_bytes(reopened.read(bases[-1], 10**9)) == batches[bases[-1] // 3 :]
    reopened.close()


def test_retention_respects_the_high_watermark(place):
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=100, retention_ms=0)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=0)
    fill(log, 30)
    bases = log.segment_base_offsets
    assert log.apply_retention(now_ms=10**9, max_offset=bases[2]) == 2
    assert log.log_start_offset == bases[2]
    log.close()


def test_retention_by_size(place):
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=100, retention_ms=None, retention_bytes=2_000)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=0)
    fill(log, 30)
    total = log.size_bytes
    sizes = [s.size_bytes for s in log._segments]
    deleted = log.apply_retention(now_ms=0)
    # Oldest segments go while the rest still holds at least retention.bytes.
    expected, excess = 0, total - 2_000
    for size in sizes[:-1]:
        if excess < size:
            break
        excess -= size
        expected += 1
    assert deleted == expected > 0
    assert log.size_bytes >= 2_000 and log.size_bytes == total - sum(sizes[:expected])
    assert log.log_start_offset == log.segment_base_offsets[0]
    log.close()


def test_delete_records_before(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    batches = fill(log, 30)
    log.delete_records_before(40)  # inside the batch at 39
    assert log.log_start_offset == 40
    with pytest.raises(OffsetOutOfRangeError):
        log.read(39, 100)
    assert as_bytes(log.read(40, 1)) == [batches[13]]
    assert log.segment_base_offsets[0] <= 39
    log.delete_records_before(10)  # never moves back
    assert log.log_start_offset == 40
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(91)
    assert [h.base_offset for h in log.batch_headers()][0] == 39
    # Record granularity: offset 40 is the batch's second record, stamped its base + 1.
    assert log.offset_for_timestamp(0) == (40, parse_header(batches[13]).base_timestamp_ms + 1)
    log.close()
    reopened = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert reopened.log_start_offset == 40
    reopened.close()


def test_truncate_to(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    log.epochs.assign(1, 0)
    first = fill(log, 10, epoch=1)
    second = fill(log, 10, epoch=2)
    assert log.epochs.entries() == [(1, 0), (2, 30)]
    log.flush()
    with pytest.raises(ValueError, match="not a batch boundary"):
        log.truncate_to(31)
    with pytest.raises(ValueError):
        log.truncate_to(61)
    log.truncate_to(33)
    assert log.log_end_offset == 33 and log.recovery_point == 33
    assert log.epochs.entries() == [(1, 0), (2, 30)]
    assert as_bytes(log.read(0, 10**9)) == first + second[:1]
    log.truncate_to(30)
    assert log.epochs.entries() == [(1, 0)]
    assert log.size_bytes == sum(map(len, first))
    third = fill(log, 10, epoch=3)
    assert as_bytes(log.read(0, 10**9)) == first + third
    assert log.epochs.entries() == [(1, 0), (3, 30)]
    log.truncate_to(60)  # the end: nothing to do
    log.close()
    reopened = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert as_bytes(reopened.read(0, 10**9)) == first + third
    assert reopened.epochs.entries() == [(1, 0), (3, 30)]
    reopened.truncate_to(0)
    assert reopened.log_end_offset == 0 and reopened.read(0, 100) == []
    assert reopened.epochs.entries() == []
    reopened.close()


def test_truncate_fully_and_start_at(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    fill(log, 10, epoch=4)
    log.truncate_fully_and_start_at(500, now_ms=0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (500, 500, 0)
    assert log.epochs.entries() == []
    batch = make_batch(500, epoch=5)
    log.append(batch, now_ms=0)
    log.close()
    reopened = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert reopened.log_start_offset == 500
    assert as_bytes(reopened.read(500, 100)) == [batch]
    assert reopened.epochs.entries() == [(5, 500)]
    reopened.close()


def test_timestamps(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    stamps = [5_000, 4_000, 7_000, 6_000, 7_000, 9_000, 8_000] * 5
    for i, ts in enumerate(stamps):
        log.append(make_batch(i * 2, 2, body_size=60, base_timestamp_ms=ts - 1, max_timestamp_ms=ts), now_ms=0)
    assert log.segment_count > 2
    # Each batch holds two records, stamped ts - 1 and ts: the answer is the first record
    # whose own timestamp reaches the target (Kafka's record granularity).
    records = [(2 * i + r, ts - 1 + r) for i, ts in enumerate(stamps) for r in (0, 1)]
    for target in [0, 4_000, 4_999, 5_000, 5_001, 6_500, 7_000, 8_500, 9_000]:
        expected = next(((offset, ts) for offset, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    assert log.offset_for_timestamp(5_000) == (1, 5_000)  # the batch's second record
    assert log.offset_for_timestamp(9_001) is None
    assert log.max_timestamp() == (10, 9_000)
    log.delete_records_before(12)
    assert log.max_timestamp() == (24, 9_000)
    assert log.offset_for_timestamp(0) == (12, 7_999)
    log.close()
    reopened = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert reopened.max_timestamp() == (24, 9_000)
    assert reopened.offset_for_timestamp(6_500) == (12, 7_999)
    assert reopened.offset_for_timestamp(8_000) == (13, 8_000)
    assert reopened.offset_for_timestamp(8_500) == (24, 8_999)
    reopened.delete_records_before(13)  # inside the batch: its first record (7_999) is gone
    assert reopened.offset_for_timestamp(7_999) == (13, 8_000)
    reopened.close()


def test_closed_log_refuses_work(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    log.close()
    with pytest.raises(RuntimeError, match="closed"):
        log.append(make_batch(0), now_ms=0)
    log.close()  # idempotent


def test_config_from_properties():
    config = LogConfig.from_properties(
        {"log.segment.bytes": "2048", "segment.bytes": "4096", "log.retention.hours": "2", "retention.bytes": "-1",
         "flush.messages": "1", "log.flush.interval.ms": "9223372036854775807", "log.roll.ms": "60000", "unrelated": "x"}
    )
    assert config == LogConfig(segment_bytes=4096, segment_ms=60_000, retention_ms=7_200_000, retention_bytes=None,
                               flush_interval_messages=1, flush_interval_ms=None)
    assert LogConfig.from_properties({"log.retention.ms": "-1"}).retention_ms is None
    assert LogConfig.from_properties({"log.retention.minutes": "3", "log.retention.hours": "1"}).retention_ms == 180_000
    assert LogConfig.from_properties({}) == LogConfig()
    assert LogConfig.from_properties({"log.flush.scheduler.interval.ms": "500"}).flush_interval_ms == 500
    assert LogConfig.from_properties({"log.flush.scheduler.interval.ms": "500", "log.flush.interval.ms": "9"}).flush_interval_ms == 9
    for props, message in [
        ({"segment.bytes": "10"}, "segment.bytes='10'"),
        ({"retention.ms": "soon"}, "retention.ms='soon': not an integer"),
        ({"flush.messages": "0"}, "flush.messages='0'"),
        ({"log.retention.bytes": "-5"}, "log.retention.bytes='-5'"),
        ({"index.interval.bytes": "-1"}, "index.interval.bytes='-1'"),
    ]:
        with pytest.raises(ValueError, match=message):
            LogConfig.from_properties(props)
    with pytest.raises(ValueError, match="segment_bytes"):
        LogConfig(segment_bytes=0)


class CountingDisk(MemoryDisk):
    """A MemoryDisk that counts reads, to check how much a lookup touches."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, path: str, offset: int, size: int) -> bytes:
        self.reads += 1
        return super().read(path, offset, size)


@pytest.mark.parametrize("index_interval_bytes", [0, 4096])
def test_lookups_touch_the_same_few_places_however_long_the_log(index_interval_bytes):
    costs = {}
    for batches in (50, 5_000):
        disk = CountingDisk()
        config = LogConfig(segment_bytes=200_000, index_interval_bytes=index_interval_bytes, retention_ms=None)
        log = PartitionLog.open(disk, "/p", config, now_ms=0)
        for i in range(batches):
            log.append(make_batch(i * 2, 2, body_size=200, base_timestamp_ms=i), now_ms=0)
        worst = {"read": 0, "timestamp": 0, "headers": 0}
        for offset in range(0, 2 * batches, max(1, batches // 40)):
            disk.reads = 0
            log.read(offset, 1_000)
            worst["read"] = max(worst["read"], disk.reads)
            disk.reads = 0
            log.offset_for_timestamp(offset // 2)
            worst["timestamp"] = max(worst["timestamp"], disk.reads)
            disk.reads = 0
            next(log.batch_headers(offset))
            worst["headers"] = max(worst["headers"], disk.reads)
        costs[batches] = worst
        log.close()
    # Reads per lookup depend on the index interval, not on how many batches there are
    # (the long log has several segments: a read that crosses into the next costs one more).
    for kind, cost in costs[5_000].items():
        assert cost <= costs[50][kind] + 1, costs
    # A timestamp lookup reads one more: the batch it lands on, for its records' timestamps.
    assert max(costs[5_000]['read'], costs[5_000]['headers']) <= 4 and costs[5_000]['timestamp'] <= 5, costs


def test_roll_by_time_falls_back_to_creation_time_without_timestamps(place):
    config = LogConfig(segment_ms=1_000, retention_ms=None)
    log = PartitionLog.open(place.disk, place.directory, config, now_ms=5_000)
    log.append(make_batch(0, base_timestamp_ms=-1, max_timestamp_ms=-1), now_ms=5_000)
    log.append(make_batch(1, base_timestamp_ms=-1, max_timestamp_ms=-1), now_ms=6_000)
    assert log.segment_count == 1
    log.append(make_batch(2, base_timestamp_ms=-1, max_timestamp_ms=-1), now_ms=6_001)
    assert log.segment_base_offsets == [0, 2]
    assert log.max_timestamp() == (0, -1)
    log.close()


def test_roll_when_offsets_outgrow_the_index(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    log.append(make_batch(0), now_ms=0)
    log.append(make_batch(1), now_ms=0)
    # Its last offset lies 2**31 past the segment base: it cannot share the segment's index.
    huge = make_batch(2, 2**31 - 1)
    log.append(huge, now_ms=0)
    assert log.segment_base_offsets == [0, 2]
    assert log.log_end_offset == 2 + 2**31 - 1
    assert as_bytes(log.read(2**30, 1)) == [huge]
    log.close()
    reopened = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    assert reopened.log_end_offset == 2 + 2**31 - 1 and reopened.recovery.reason is None
    reopened.close()


def test_maybe_flush_without_a_flush_interval_never_flushes(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    fill(log, 3)
    assert not log.maybe_flush(now_ms=10**12)
    assert log.recovery_point == 0
    log.close()
    assert log.recovery_point == 9


def test_explicit_roll(place):
    log = PartitionLog.open(place.disk, place.directory, SMALL, now_ms=0)
    log.roll(now_ms=0)  # nothing to roll away from
    assert log.segment_base_offsets == [0]
    fill(log, 2)
    log.roll(now_ms=0)
    assert log.segment_base_offsets == [0, 6]
    assert log.recovery_point == 6  # the sealed segment was flushed
    fill(log, 1)
    assert [h.base_offset for h in log.batch_headers()] == [0, 3, 6]
    log.close()


@pytest.mark.parametrize("index_interval_bytes", [0, 4096])
def test_the_remembered_newest_batches_locate_what_a_header_scan_locates(index_interval_bytes):
    """Segment.locate answers reads near the end from the positions of the newest batches it
    remembers, and older ones from the index and a header scan. Both must name the batch a
    full scan names, after the memory is trimmed, after a truncation and after a reopen."""
    disk = MemoryDisk()
    config = LogConfig(segment_bytes=10_000_000, index_interval_bytes=index_interval_bytes, retention_ms=None)
    log = PartitionLog.open(disk, "/p", config, now_ms=0)
    offset = 0
    for i in range(700):  # more than twice the remembered batches: the memory is trimmed
        log.append(make_batch(offset, 1 + i % 3), now_ms=0)
        offset += 1 + i % 3

    def check(segment):
        scanned = list(segment.headers_from(0))
        for wanted in range(segment.base_offset, segment.next_offset):
            expected = next((p, h) for p, h in scanned if h.next_offset > wanted)
            assert segment.locate(wanted) == expected, wanted
        assert segment.locate(segment.next_offset) is None

    (segment,) = log._segments
    assert segment._recent_bases and segment._recent_bases[0] > 0  # both paths are taken
    check(segment)
    log.truncate_to(900)
    check(segment)
    log.close()
    reopened = PartitionLog.open(disk, "/p", config, now_ms=0)
    check(reopened._segments[0])
    reopened.close()
