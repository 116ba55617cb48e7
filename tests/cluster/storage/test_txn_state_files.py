"""The durable transaction state of a log: `.txnindex` files per segment and producer-state
snapshots. What is written, truncated and deleted with the segments; what an open after a
clean close reads (and that it replays nothing); and what an open after a crash, a torn index
or a corrupt snapshot rebuilds, compared with the oracle (session 8's rebuild from the log)."""

from __future__ import annotations

import random

import pytest

from cluster.storage.disk import MemoryDisk
from cluster.storage.log import PartitionLog
from cluster.storage.producer_snapshot import SnapshotFiles, snapshot_file_name
from tests.cluster.storage import txn_oracle
from tests.cluster.storage.conftest import DiskAndDir
from tests.cluster.storage.txn_log_driver import Writer, open_log, table

DIR = "/data/t-0"


def _write_rounds(writer: Writer, rounds: int, start: int = 0) -> None:
    """Per round: producer 1 and 2 interleaved, 2 aborts, 1 commits, a plain batch; every
    third round producer 3 opens a transaction that spans the next round's."""
    for i in range(start, start + rounds):
        if i % 3 == 0:
            writer.data(3)
        writer.data(1)
        writer.data(2, records=2)
        writer.marker(2, committed=False)
        writer.data(1)
        writer.marker(1, committed=True)
        writer.plain()
        if i % 3 == 1:
            writer.marker(3, committed=False)


def _assert_matches_oracle(log: PartitionLog) -> None:
    """The aborted-transaction answers, the LSO and the producer state match the oracle's."""
    oracle = txn_oracle.rebuild(log)
    assert txn_oracle.key(log.aborted_txns()) == txn_oracle.key(oracle.aborted)
    leo = log.log_end_offset
    for fetch in range(log.log_start_offset, leo + 1, 3):
        for upper in (fetch + 1, fetch + 7, leo):
            assert txn_oracle.key(log.aborted_transactions(fetch, upper)) == txn_oracle.key(oracle.overlapping(fetch, upper)), (fetch, upper)
    state = table(log)
    assert state.last_stable_offset(leo) == oracle.table.last_stable_offset(leo)
    assert state.snapshot() == oracle.table.snapshot()


def _txn_index_sizes(disk: MemoryDisk, log: PartitionLog) -> dict[int, int]:
    return {s.base_offset: disk.file_size(s.txn_index_path) for s in log._segments}  # noqa: SLF001


def test_index_files_follow_their_segments() -> None:
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    writer = Writer(log)
    _write_rounds(writer, 12)
    assert log.segment_count > 5
    log.flush()
    # Every abort marker's entry is in its own segment's file, 32 bytes each.
    per_segment: dict[int, int] = {}
    for entry in log.aborted_txns():
        base = max(b for b in log.segment_base_offsets if b <= entry.last_offset)
        per_segment[base] = per_segment.get(base, 0) + 32
    assert _txn_index_sizes(disk, log) == {b: per_segment.get(b, 0) for b in log.segment_base_offsets}
    snapshots = SnapshotFiles(disk, DIR)
    assert snapshots.offsets() == log.segment_base_offsets[1:]  # one per roll

    # Truncation cuts the index of the segment it lands in, deletes the later segments'
    # files and the snapshots past it.
    last_abort = log.aborted_txns()[-1]
    log.truncate_to(last_abort.last_offset)
    assert log.aborted_txns()[-1].last_offset < last_abort.last_offset
    assert sum(_txn_index_sizes(disk, log).values()) == 32 * len(log.aborted_txns())
    assert all(offset <= log.log_end_offset for offset in snapshots.offsets())
    assert sorted(int(n[:20]) for n in disk.listdir(DIR) if n.endswith(".txnindex")) == log.segment_base_offsets
    _assert_matches_oracle(log)

    # DeleteRecords past whole segments deletes their files and the snapshots before the
    # first remaining segment.
    cut = log.segment_base_offsets[3]
    log.delete_records_before(cut)
    names = disk.listdir(DIR)
    assert not [n for n in names if n[:20].isdigit() and int(n[:20]) < cut]
    assert snapshots.offsets()[0] >= cut

    log.truncate_fully_and_start_at(500, now_ms=0)
    assert snapshots.offsets() == [] and log.aborted_txns() == []
    assert table(log).entries() == []
    assert sorted(n for n in disk.listdir(DIR) if n[:20].isdigit()) == [
        f"{500:020d}.index", f"{500:020d}.log", f"{500:020d}.txnindex"]


def test_clean_reopen_reads_the_files_and_replays_nothing(place: DiskAndDir) -> None:
    log = open_log(place.disk, place.directory)
    _write_rounds(Writer(log), 20)
    before = (log.aborted_txns(), table(log).snapshot())
    log.close()

    reopened = open_log(place.disk, place.directory)
    assert reopened.recovery.state_batches == 0
    assert reopened.recovery.snapshot_offset == reopened.log_end_offset
    assert not [r for r in reopened.recovery.rebuilt if "txnindex" in r or "snapshot" in r]
    assert (reopened.aborted_txns(), table(reopened).snapshot()) == before
    _assert_matches_oracle(reopened)
    # Without snapshots, the open replays every batch (the old design's cost, every time).
    reopened.close()
    for offset in SnapshotFiles(place.disk, place.directory).offsets():
        SnapshotFiles(place.disk, place.directory).delete(offset)
    again = open_log(place.disk, place.directory)
    assert again.recovery.snapshot_offset is None
    assert again.recovery.state_batches == len(list(again.batch_headers()))
    assert (again.aborted_txns(), table(again).snapshot()) == before
    again.close()


def test_crash_with_an_unflushed_tail_rebuilds_the_active_segment_only() -> None:
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    writer = Writer(log)
    _write_rounds(writer, 20)
    log.roll(now_ms=0)
    active_base = log.log_end_offset
    writer.data(7)
    writer.marker(7, committed=False)
    log.flush()  # fsynced, but the recovery-point file still says the active segment's base
    flushed_end = log.log_end_offset
    writer.data(5)
    writer.data(6)
    writer.marker(5, committed=False)  # lost with the tail: 5's transaction never happened
    disk.crash()

    reopened = open_log(disk, DIR)
    assert reopened.log_end_offset == flushed_end
    assert reopened.recovery.snapshot_offset == active_base  # the roll's snapshot
    assert 0 < reopened.recovery.state_batches <= len(list(reopened.batch_headers(active_base)))
    assert [r for r in reopened.recovery.rebuilt if ".txnindex" in r] == [
        f"{active_base:020d}.txnindex: its segment held batches past the recovery point; rebuilt"]
    assert table(reopened).entry(5) is None
    _assert_matches_oracle(reopened)


@pytest.mark.parametrize("seed", range(6))
def test_torn_writes_at_a_crash(seed: int) -> None:
    rng = random.Random(seed)
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    writer = Writer(log)
    _write_rounds(writer, 10)
    for round_ in range(3):
        _write_rounds(writer, rng.randint(1, 4), start=10 + 4 * round_)
        if rng.random() < 0.5:
            log.flush()
    disk.crash(torn_writes=rng)
    reopened = open_log(disk, DIR)
    _assert_matches_oracle(reopened)
    # And what was rebuilt is what the next clean open reads.
    reopened.close()
    again = open_log(disk, DIR)
    assert again.recovery.state_batches == 0
    _assert_matches_oracle(again)


def test_a_torn_or_missing_index_of_a_trusted_segment_is_rebuilt() -> None:
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    _write_rounds(Writer(log), 20)
    torn = [s for s in log._segments if len(s.txn_index) >= 1][1]  # noqa: SLF001
    missing = next(s for s in log._segments[log._segments.index(torn) + 2 :] if len(s.txn_index) >= 1)  # noqa: SLF001
    log.close()
    torn_size = disk.file_size(torn.txn_index_path) - 5
    disk.write_atomic(torn.txn_index_path, disk.read_all(torn.txn_index_path)[:torn_size])
    disk.remove(missing.txn_index_path)

    reopened = open_log(disk, DIR)
    rebuilt = [r for r in reopened.recovery.rebuilt if ".txnindex" in r]
    assert rebuilt == [
        f"{torn.base_offset:020d}.txnindex is invalid: size {torn_size} is not a multiple of 32; rebuilt",
        f"{missing.base_offset:020d}.txnindex is missing; rebuilt",
    ]
    # Replayed from the snapshot at the torn segment's base, not from the start.
    assert torn.base_offset > 0 and reopened.recovery.snapshot_offset == torn.base_offset
    assert disk.file_size(torn.txn_index_path) % 32 == 0
    _assert_matches_oracle(reopened)


def test_a_corrupt_snapshot_is_deleted_and_an_older_one_used() -> None:
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    _write_rounds(Writer(log), 20)
    active_base = log.active_segment.base_offset
    leo = log.log_end_offset
    log.close()
    path = f"{DIR}/{snapshot_file_name(leo)}"
    data = bytearray(disk.read_all(path))
    data[-1] ^= 0x40
    disk.write_atomic(path, bytes(data))

    reopened = open_log(disk, DIR)
    assert f"{snapshot_file_name(leo)} is invalid: CRC-32C mismatch; deleted" in reopened.recovery.rebuilt
    assert reopened.recovery.snapshot_offset == active_base
    assert reopened.recovery.state_batches == len(list(reopened.batch_headers(active_base)))
    # The replay wrote a good snapshot at the log end in its place.
    assert SnapshotFiles(disk, DIR).read(leo) == table(reopened).snapshot()
    _assert_matches_oracle(reopened)


def test_a_snapshot_with_a_good_crc_but_nonsense_inside_is_not_trusted() -> None:
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    _write_rounds(Writer(log), 10)
    leo = log.log_end_offset
    log.close()
    SnapshotFiles(disk, DIR).write(leo, b"\x00\x00\x00\x09tooshort")
    reopened = open_log(disk, DIR)
    assert any(r.startswith(f"{snapshot_file_name(leo)} is invalid: producer-state snapshot is malformed") for r in reopened.recovery.rebuilt)
    _assert_matches_oracle(reopened)


def test_a_transaction_the_log_start_moved_into_keeps_its_first_offset() -> None:
    """The old rebuild made such a transaction start at its marker after a reopen, so a
    read_committed consumer from the log start kept its aborted records before the marker;
    the snapshot remembers where it began."""
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    writer = Writer(log)
    _write_rounds(writer, 6)
    first = writer.data(9)
    for _ in range(12):
        writer.plain()
    log.delete_records_before(first + 2)
    for _ in range(6):
        writer.data(9)
    marker = writer.marker(9, committed=False)
    log.close()
    reopened = open_log(disk, DIR)
    (entry,) = [e for e in reopened.aborted_txns() if e.producer_id == 9]
    assert (entry.first_offset, entry.last_offset) == (first, marker)
    assert [(e.producer_id, e.first_offset) for e in reopened.aborted_transactions(first + 2, marker)] == [(9, first)]
    (old,) = [e for e in txn_oracle.rebuild(reopened).aborted if e.producer_id == 9]
    assert old.first_offset > first + 2  # the old design's answer: the records at first + 2.. would be kept


def test_a_log_without_state_writes_no_transaction_files() -> None:
    disk = MemoryDisk()
    log = PartitionLog.open(disk, DIR, open_log.__defaults__[0], now_ms=0)  # type: ignore[index]
    _write_rounds(Writer(log), 8)
    log.close()
    assert not [n for n in disk.listdir(DIR) if n.endswith((".txnindex", ".snapshot"))]
    assert log.aborted_txns() == []


def test_truncation_deletes_the_snapshots_past_the_cut_before_new_appends() -> None:
    """A snapshot past a truncation describes batches that new appends replace: were it
    kept, a crash after re-appending past its offset would restore it."""
    disk = MemoryDisk()
    log = open_log(disk, DIR)
    writer = Writer(log)
    writer.data(1)
    writer.data(2)
    log.roll(now_ms=0)
    rolled_at = log.log_end_offset
    writer.marker(2, committed=False)
    writer.data(2)
    log.truncate_to(1)  # 2's transaction and everything after it are gone
    assert rolled_at not in SnapshotFiles(disk, DIR).offsets()
    writer.plain()
    writer.plain()
    writer.data(3)
    writer.marker(1, committed=False)  # past the old snapshot's offset, in the same segment
    log.flush()
    disk.crash()
    reopened = open_log(disk, DIR)
    assert reopened.log_end_offset == 5
    assert table(reopened).entry(2) is None
    _assert_matches_oracle(reopened)


def test_a_clean_close_writes_only_what_changed() -> None:
    """A broker's shutdown closes every partition: an empty log needs no snapshot, and a log
    closed again without new batches rewrites and fsyncs nothing."""
    disk = MemoryDisk()
    open_log(disk, DIR).close()
    assert SnapshotFiles(disk, DIR).offsets() == []
    log = open_log(disk, DIR)
    assert log.recovery.state_batches == 0 and log.recovery.snapshot_offset is None
    _write_rounds(Writer(log), 3)
    log.close()
    reopened = open_log(disk, DIR)
    fsyncs = disk.fsync_count
    reopened.close()
    assert disk.fsync_count == fsyncs
    assert open_log(disk, DIR).recovery.state_batches == 0
