"""A partition's durable log: segments, recovery, reads, flush policy, truncation, retention.

Kafka's design in miniature. Batches arrive already stamped with their offsets and are
appended whole; reads return whole batches. Nothing here reads a clock: every time-dependent
call takes `now_ms`. All file access goes through the injected `Disk`.

Durability: bytes are durable once fsynced, and `recovery_point` says how far that is. The
flush policy fsyncs after `flush_interval_messages` offsets or, through `maybe_flush`, after
`flush_interval_ms`; by default it never does (Kafka's default: durability comes from
replication). As in Kafka, rolling to a new segment flushes the old one, so at most the
active segment is ever unflushed.

Files in the partition directory:
  <20-digit base offset>.log    batches back to back
  <20-digit base offset>.index  sparse index (see index.py), rebuildable
  leader-epoch-checkpoint      see epochs.py
  recovery-point               the offset below which everything was fsynced, as text
  log-start-offset             the first offset still offered, as text (only once it has moved)
and in a log that keeps transaction state (a ReplayedState attached, as every broker
partition does):
  <20-digit base offset>.txnindex  the segment's aborted transactions (see txn_index.py)
  <20-digit offset>.snapshot   the state after the batches below that offset (see
                               producer_snapshot.py), written at each roll and clean close

Recovery on open validates (framing, CRC-32C, contiguous offsets) every batch past the
checkpointed recovery point and cuts the log at the first torn, corrupt or out-of-sequence
batch. Batches below it were fsynced before the checkpoint was written: a segment's stored
index is trusted up to its last entry when that entry is not past the checkpoint, and only
the batches after it are rescanned. Recovery then fsyncs what it kept.

Transaction state (attach_state, as Kafka's LogLoader): a segment's `.txnindex` is trusted
when the segment lies wholly below the checkpointed recovery point and the file passes its
checks. From the newest good snapshot at or before the first segment whose index is not
trusted (or the log end when all are), the state is restored and the batches after it are
replayed; the untrusted indexes are rebuilt from that replay. After a clean close that
replays nothing. A corrupt snapshot is reported, deleted and never used.
"""

from __future__ import annotations

import bisect
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, replace

from cluster.storage.batch import HEADER_SIZE, BatchHeader, InvalidBatchError, crc_is_valid, parse_header
from cluster.storage.config import LogConfig
from cluster.storage.disk import Bytes, Disk
from cluster.storage.epochs import CorruptCheckpointError, LeaderEpochCache, replay_assignments
from cluster.storage.producer_snapshot import ReplayedState, SnapshotFiles, snapshot_file_name
from cluster.storage.record_times import record_times
from cluster.storage.segment import INDEX_SUFFIX, Segment, parse_segment_file_name
from cluster.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = ["LogConfig", "OffsetOutOfRangeError", "PartitionLog", "RecoveryReport"]

RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"
_TMP_SUFFIX = ".tmp"


class OffsetOutOfRangeError(Exception):
    """An offset outside [log_start_offset, log_end_offset] (Kafka: OFFSET_OUT_OF_RANGE)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True)
class RecoveryReport:
    segments: int
    batches: int  # batches read and validated while opening
    truncated_bytes: int  # torn or corrupt tail removed on open
    reason: str | None  # e.g. "CRC mismatch at offset 1234 (byte 0) in 00000000000000001000.log"
    # What else was rebuilt on open and why (a missing or invalid index, a lost checkpoint).
    rebuilt: tuple[str, ...] = ()
    # Transaction state (attach_state): batches replayed into it, from the snapshot at
    # `snapshot_offset` (None: no usable snapshot, replayed from the first segment).
    state_batches: int = 0
    snapshot_offset: int | None = None


class PartitionLog:
    def __init__(self, disk: Disk, directory: str, config: LogConfig, now_ms: int) -> None:
        self._disk = disk
        self.directory = directory
        self.config = config
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._checkpointed_recovery_point = -1
        self._size_bytes = 0
        self._last_flush_ms = now_ms
        self.epochs = LeaderEpochCache(disk, directory)
        self.recovery = RecoveryReport(0, 0, 0, None)
        self._closed = False
        # The transaction state the log keeps by replaying its batches (attach_state).
        self.state: ReplayedState | None = None
        self._snapshots = SnapshotFiles(disk, directory)
        # Segments whose .txnindex recovery removed, and why (rebuilt by attach_state).
        self._untrusted_txn_indexes: dict[int, str] = {}

    # ---- opening and recovery ---------------------------------------------------------

    @classmethod
    def open(cls, disk: Disk, directory: str, config: LogConfig, *, now_ms: int, state: ReplayedState | None = None) -> PartitionLog:
        log = cls(disk, directory, config, now_ms)
        log._recover(now_ms)
        if state is not None:
            log.attach_state(state)
        return log

    def _path(self, name: str) -> str:
        return posixpath.join(self.directory, name)

    def _read_offset_file(self, name: str, rebuilt: list[str]) -> int | None:
        path = self._path(name)
        if not self._disk.exists(path):
            return None
        text = self._disk.read_all(path).decode("ascii", errors="replace").strip()
        if text.isdigit():
            return int(text)
        rebuilt.append(f"{name} holds {text[:40]!r}, not an offset; ignored")
        return None

    def _write_offset_file(self, name: str, offset: int) -> None:
        self._disk.write_atomic(self._path(name), f"{offset}\n".encode("ascii"))

    def _recover(self, now_ms: int) -> None:
        self._disk.makedirs(self.directory)
        rebuilt: list[str] = []
        bases = self._remove_leftovers()
        checkpoint = self._read_offset_file(RECOVERY_POINT_FILE, rebuilt) or 0
        log_start_checkpoint = self._read_offset_file(LOG_START_OFFSET_FILE, rebuilt) or 0
        epochs_trusted = self._load_epochs(bool(bases), rebuilt)
        batches, truncated, reason, scanned = self._load_segments(bases, checkpoint, now_ms, rebuilt)

        if not self._segments:
            self._segments.append(self._new_segment(log_start_checkpoint, now_ms))
        self._bases = [s.base_offset for s in self._segments]
        self._size_bytes = sum(s.size_bytes for s in self._segments)
        self._log_start_offset = max(self._segments[0].base_offset, log_start_checkpoint)
        restarted_empty = self._log_start_offset > self.log_end_offset
        if restarted_empty:
            # A crash lost data the log start had already moved past: start empty there, so
            # the log start never moves backwards.
            rebuilt.append(f"log start {self._log_start_offset} is past the recovered end {self.log_end_offset}; log restarted empty there")
            self._reset_to(self._log_start_offset, now_ms)

        # A segment with batches past the checkpoint may have lost aborted-transaction entries
        # with them: its index goes before the checkpoint below would vouch for it.
        for segment in scanned:
            if segment in self._segments:
                self._untrust_txn_index(segment, "held batches past the recovery point")
        self._snapshots.delete_above(self.log_end_offset)
        # What recovery kept is fsynced before the recovery point says so.
        for segment in scanned:
            if segment is not self._segments[-1] and segment in self._segments:
                segment.fsync_closed()
        self._segments[-1].open_for_append()
        self._segments[-1].fsync()
        self._recovery_point = self.log_end_offset
        self._write_recovery_point()

        if restarted_empty:
            self.epochs.clear()  # as truncate_fully_and_start_at does
        elif epochs_trusted:
            self.epochs.truncate_from_end(self.log_end_offset)
            # The checkpoint is rewritten before a new epoch's first batch is stored, so it
            # covers the log, unless a crash undid batches whose older epoch had rewritten
            # the cache's tail: then the cache no longer fits the last batch, and is rebuilt.
            mismatch = self._epoch_mismatch_at_end()
            if mismatch is not None:
                rebuilt.append(f"{mismatch}; leader-epoch cache rebuilt from batch headers")
                self.epochs.replace(self._epoch_starts_from_headers())
        else:
            self.epochs.replace(self._epoch_starts_from_headers())
        self.epochs.truncate_from_start(self._log_start_offset)
        self._delete_segments_below_log_start()
        self._snapshots.delete_below(self._segments[0].base_offset)
        self.recovery = RecoveryReport(len(self._segments), batches, truncated, reason, tuple(rebuilt))

    def _remove_leftovers(self) -> list[int]:
        """Delete leftovers of an interrupted write_atomic and indexes whose segment is gone;
        returns the base offsets of the segment files, in order."""
        names = self._disk.listdir(self.directory)
        bases = sorted(base for base in map(parse_segment_file_name, names) if base is not None)
        base_set = set(bases)
        for name in names:
            stem = name.split(".", 1)[0]
            orphan_index = (name.endswith(INDEX_SUFFIX) or name.endswith(TXN_INDEX_SUFFIX)) and stem.isdigit() and int(stem) not in base_set
            if name.endswith(_TMP_SUFFIX) or orphan_index:
                self._disk.remove(self._path(name))
        return bases

    def _load_epochs(self, have_segments: bool, rebuilt: list[str]) -> bool:
        """Load the leader-epoch checkpoint; False if it must be rebuilt from the batches."""
        try:
            self.epochs = LeaderEpochCache.load(self._disk, self.directory)
        except CorruptCheckpointError as error:
            self.epochs = LeaderEpochCache(self._disk, self.directory)
            rebuilt.append(f"{error}; rebuilt from batch headers")
            return False
        if have_segments and not self._disk.exists(self.epochs.path):
            rebuilt.append("leader-epoch-checkpoint is missing; rebuilt from batch headers")
            return False
        return True

    def _load_segments(
        self, bases: list[int], checkpoint: int, now_ms: int, rebuilt: list[str]
    ) -> tuple[int, int, str | None, list[Segment]]:
        """Load and validate every segment in order, cutting the log at the first problem
        and deleting every segment after it. Returns (batches scanned, bytes cut, why,
        segments that hold data past the checkpoint)."""
        batches = truncated = 0
        reason: str | None = None
        scanned: list[Segment] = []
        for base in bases:
            segment = Segment(self._disk, self.directory, base, index_interval_bytes=self.config.index_interval_bytes, created_ms=now_ms)
            expected = self._segments[-1].next_offset if self._segments else base
            if reason is None and base != expected:
                reason = f"{segment.name} starts at offset {base}, but the log before it ends at {expected}"
            if reason is not None:
                truncated += self._disk.file_size(segment.log_path)
                segment.delete()
                continue
            result = segment.load(trusted_below=checkpoint)
            batches += result.batches_scanned
            if segment.next_offset > checkpoint:
                scanned.append(segment)
            if result.index_rebuild_reason is not None:
                rebuilt.append(f"{result.index_rebuild_reason}; rebuilt")
            if result.problem is not None:
                reason = result.problem
                truncated += result.invalid_tail_bytes
                segment.cut_invalid_tail()
                if segment not in scanned:
                    scanned.append(segment)  # cut below the checkpoint: rechecked like the rest
            self._segments.append(segment)
        return batches, truncated, reason, scanned

    def _new_segment(self, base_offset: int, now_ms: int) -> Segment:
        return Segment.create(self._disk, self.directory, base_offset, index_interval_bytes=self.config.index_interval_bytes, now_ms=now_ms,
                              txn_index=self.state is not None)

    def _untrust_txn_index(self, segment: Segment, why: str) -> None:
        self._untrusted_txn_indexes[segment.base_offset] = f"{posixpath.basename(segment.txn_index_path)}: its segment {why}"
        if self._disk.exists(segment.txn_index_path):
            self._disk.remove(segment.txn_index_path)

    # ---- transaction state ------------------------------------------------------------

    def attach_state(self, state: ReplayedState) -> None:
        """Keep `state` from now on: restore it from the newest good snapshot, replay the
        batches after it, and rebuild every aborted-transaction index that cannot be trusted
        (see the module docstring). Appends and truncations then keep it, its snapshots and
        the segments' indexes up to date."""
        self._check_open()
        if self.state is not None:
            raise RuntimeError(f"log {self.directory} already keeps a state")
        self.state = state
        rebuilt = list(self.recovery.rebuilt)
        untrusted: dict[int, str] = {}
        for segment in self._segments:
            why = self._untrusted_txn_indexes.get(segment.base_offset) or segment.load_txn_index()
            if why is not None:
                untrusted[segment.base_offset] = why
        self._untrusted_txn_indexes = {}
        first_untrusted = min(untrusted, default=self.log_end_offset)
        snapshot_offset = self._restore_snapshot(first_untrusted, rebuilt)
        start = self._segments[0].base_offset if snapshot_offset is None else snapshot_offset
        replayed = self._replay_state(start, set(untrusted))
        for segment in self._segments:
            why = untrusted.get(segment.base_offset)
            if why is not None:
                segment.write_txn_index()
                if not segment.is_empty:
                    rebuilt.append(f"{why}; rebuilt")
        if replayed:
            # The next open starts here (everything below the log end was fsynced by recovery).
            self._snapshots.write(self.log_end_offset, state.snapshot())
        self.recovery = replace(self.recovery, rebuilt=tuple(rebuilt), state_batches=replayed, snapshot_offset=snapshot_offset)

    def reload_state(self) -> int:
        """Rebuild the state from the newest snapshot and the batches after it (after the
        log changed under it); returns how many batches were replayed."""
        self._check_open()
        if self.state is None:
            raise RuntimeError(f"log {self.directory} keeps no state")
        snapshot_offset = self._restore_snapshot(self.log_end_offset, None)
        return self._replay_state(self._segments[0].base_offset if snapshot_offset is None else snapshot_offset, set())

    def _restore_snapshot(self, at_most: int, rebuilt: list[str] | None) -> int | None:
        """Restore the state from the newest good snapshot at or below `at_most`; returns
        its offset, or None (the state then starts empty). Bad snapshots are deleted."""
        assert self.state is not None
        first_base = self._segments[0].base_offset
        for offset in reversed(self._snapshots.offsets()):
            if offset > at_most or offset < first_base:
                continue
            try:
                self.state.restore(self._snapshots.read(offset))
            except (ValueError, OSError) as error:
                if rebuilt is not None:
                    rebuilt.append(f"{snapshot_file_name(offset)} is invalid: {error}; deleted")
                self._snapshots.delete(offset)
                continue
            return offset
        self.state.clear()
        return None

    def _replay_state(self, start: int, rebuild: set[int]) -> int:
        """Replay every batch from the one at `start` into the state; aborted transactions
        found in a segment of `rebuild` go to its index. Returns how many batches."""
        assert self.state is not None
        if start >= self.log_end_offset:
            return 0
        index = self._segment_index_for(start)
        located = self._segments[index].locate(start)
        position = 0 if located is None else located[0]
        replayed = 0
        replay = self.state.replay
        for segment in self._segments[index:]:
            rebuilding = segment.base_offset in rebuild
            for at, header in segment.headers_from(position):
                control = segment.read(at, header.size_bytes) if header.is_control else None
                aborted = replay(header, control)
                if aborted is not None and rebuilding:
                    segment.txn_index.add(aborted)
                replayed += 1
            position = 0
        return replayed

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [fetch_offset, upper_bound_offset), from the
        index of the segment holding fetch_offset on, as Kafka's collectAbortedTransactions:
        later segments may hold the markers of transactions that started earlier, until an
        entry's LSO says no later one can."""
        self._check_open()
        found: list[AbortedTxn] = []
        start = max(fetch_offset, self._log_start_offset)
        for segment in self._segments[self._segment_index_for(start) :]:
            if len(segment.txn_index) and segment.txn_index.collect(start, upper_bound_offset, found):
                break
        return found

    def aborted_txns(self) -> list[AbortedTxn]:
        """Every aborted transaction whose marker is at or past the log start."""
        return [e for s in self._segments for e in s.txn_index.entries() if e.last_offset >= self._log_start_offset]

    def _epoch_mismatch_at_end(self) -> str | None:
        """Why the epoch cache does not fit the log's last batch, or None if it does."""
        if self._log_start_offset >= self.log_end_offset:
            return None
        located = self._segments[self._segment_index_for(self.log_end_offset - 1)].locate(self.log_end_offset - 1)
        if located is None:
            return None
        last = located[1]
        if last.partition_leader_epoch < 0:
            return None
        cached = self.epochs.epoch_for_offset(max(last.base_offset, self._log_start_offset))
        if cached == last.partition_leader_epoch:
            return None
        return f"the last batch (offset {last.base_offset}) has epoch {last.partition_leader_epoch}, the cache says {cached}"

    def _epoch_starts_from_headers(self) -> list[tuple[int, int]]:
        """The cache the appends of the stored batches would have built."""
        changes: list[tuple[int, int]] = []
        for header in self.batch_headers(self._segments[0].base_offset):
            if not changes or header.partition_leader_epoch != changes[-1][0]:
                changes.append((header.partition_leader_epoch, header.base_offset))
        return replay_assignments(changes)

    # ---- state ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"log {self.directory} is closed")

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # ---- appending --------------------------------------------------------------------

    def append(self, batch: Bytes, *, now_ms: int) -> BatchHeader:
        self._check_open()
        view = memoryview(batch).cast("B")
        header = parse_header(view)
        if header.size_bytes != len(view):
            raise InvalidBatchError(f"append expects exactly one batch: got {len(view)} bytes, the header says {header.size_bytes}")
        if not crc_is_valid(view, header):
            raise InvalidBatchError(f"batch at offset {header.base_offset} fails its CRC-32C check")
        leo = self.log_end_offset
        if header.base_offset != leo:
            raise ValueError(f"batch base offset {header.base_offset} is not the log end offset {leo} of {self.directory}")
        active = self._segments[-1]
        if self._should_roll(active, header, now_ms):
            active = self._roll(now_ms)
        epoch = header.partition_leader_epoch
        if epoch >= 0 and epoch != self.epochs.latest_epoch:
            self.epochs.assign(epoch, header.base_offset)
        active.append(view, header)
        self._size_bytes += header.size_bytes
        if self.state is not None:
            aborted = self.state.replay(header, view if header.is_control else None)
            if aborted is not None:
                active.append_aborted(aborted)
        interval = self.config.flush_interval_messages
        if interval is not None and self.log_end_offset - self._recovery_point >= interval:
            self._flush(now_ms)
        return header

    def _should_roll(self, active: Segment, header: BatchHeader, now_ms: int) -> bool:
        if active.is_empty:
            return False
        if active.size_bytes + header.size_bytes > self.config.segment_bytes or not active.fits_offsets(header):
            return True
        segment_ms = self.config.segment_ms
        if segment_ms is None:
            return False
        # Kafka measures a segment's age by record time (the first batch's max timestamp)
        # and falls back to the creation time only when batches carry no timestamps.
        first = active.first_batch_timestamp_ms
        if first is not None and first >= 0:
            return header.max_timestamp_ms - first > segment_ms
        return now_ms - active.created_ms > segment_ms

    def _roll(self, now_ms: int) -> Segment:
        old = self._segments[-1]
        old.seal()
        self._recovery_point = old.next_offset
        self._last_flush_ms = now_ms
        new = self._new_segment(old.next_offset, now_ms)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        if self.state is not None:
            # The batches below the new segment were fsynced by the seal: the snapshot may
            # vouch for them. (The state has not seen the batch that caused the roll yet.)
            self._snapshots.write(new.base_offset, self.state.snapshot())
        # After the new files exist: the checkpoint's directory fsync makes them durable too.
        self._write_recovery_point()
        return new

    def roll(self, *, now_ms: int) -> None:
        """Start a new segment now (if the active one holds anything)."""
        self._check_open()
        if not self._segments[-1].is_empty:
            self._roll(now_ms)

    # ---- flushing ---------------------------------------------------------------------

    def _write_recovery_point(self) -> None:
        if self._recovery_point != self._checkpointed_recovery_point:
            self._write_offset_file(RECOVERY_POINT_FILE, self._recovery_point)
            self._checkpointed_recovery_point = self._recovery_point

    def _flush(self, now_ms: int | None) -> None:
        if self._recovery_point < self.log_end_offset:
            self._segments[-1].fsync()
            self._recovery_point = self.log_end_offset
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def flush(self) -> None:
        """Fsync everything appended so far; recovery_point becomes log_end_offset.

        The recovery-point file is rewritten lazily (on roll, truncation and close): a stale
        one only makes the next recovery scan more, never trust more."""
        self._check_open()
        self._flush(None)

    def maybe_flush(self, *, now_ms: int) -> bool:
        """Apply flush.ms: fsync if there is unflushed data and the interval has passed."""
        self._check_open()
        interval = self.config.flush_interval_ms
        if interval is None or self._recovery_point >= self.log_end_offset:
            return False
        if now_ms - self._last_flush_ms < interval:
            return False
        self._flush(now_ms)
        return True

    # ---- reading ----------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self.log_end_offset)

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None) -> list[bytes | memoryview]:
        """Whole batches from the one holding `fetch_offset`, each its own element.

        Stops before a batch whose base offset is >= max_offset, and before a batch that would
        take the total past max_bytes, but returns at least one batch when there is one
        (KIP-74). Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset]."""
        self._check_open()
        if max_bytes < 0:
            raise ValueError(f"max_bytes {max_bytes} is negative")
        self._check_offset(fetch_offset)
        bound = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if fetch_offset >= bound:
            return []
        out: list[bytes | memoryview] = []
        total = 0
        segment_index = self._segment_index_for(fetch_offset)
        located = self._segments[segment_index].locate(fetch_offset)
        if located is None:
            raise OffsetOutOfRangeError(fetch_offset, self._log_start_offset, self.log_end_offset)
        position, first = located
        while True:
            segment = self._segments[segment_index]
            want = max_bytes - total if out else max(max_bytes, first.size_bytes)
            chunk = memoryview(segment.read(position, want))
            at = 0
            while at < len(chunk):
                if len(chunk) - at < HEADER_SIZE:
                    return out  # the next batch does not fit in max_bytes
                header = parse_header(chunk, at)
                if at + header.size_bytes > len(chunk) or header.base_offset >= bound:
                    return out
                out.append(chunk[at : at + header.size_bytes])
                total += header.size_bytes
                at += header.size_bytes
            if position + at < segment.size_bytes or total >= max_bytes:
                return out
            segment_index += 1
            if segment_index >= len(self._segments) or self._segments[segment_index].base_offset >= bound:
                return out
            position = 0

    def batch_headers(self, from_offset: int = 0) -> Iterator[BatchHeader]:
        """Every batch header from the batch holding `from_offset` (clamped to the log start).
        Reads lazily; do not modify the log while iterating."""
        start = max(from_offset, self._log_start_offset)
        if start >= self.log_end_offset:
            return
        segments = list(self._segments)
        segment_index = self._segment_index_for(start)
        located = segments[segment_index].locate(start)
        position = 0 if located is None else located[0]
        for segment in segments[segment_index:]:
            for _, header in segment.headers_from(position):
                yield header
            position = 0

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or past the log start whose timestamp is
        >= timestamp_ms, as Kafka's LogSegment.findOffsetByTimestamp. A batch whose codec
        cannot be read here answers at batch granularity: its base offset (or the log start
        inside it) and its max timestamp."""
        self._check_open()
        start = self._log_start_offset
        for segment in self._segments[self._segment_index_for(start) :]:
            found = segment.locate_timestamp(timestamp_ms, max(start, segment.base_offset))
            if found is None:
                continue
            for position, header in segment.headers_from(found[0]):
                if header.max_timestamp_ms < timestamp_ms or header.last_offset < start:
                    continue
                records = record_times(segment.read(position, header.size_bytes))
                if records is None:
                    return max(header.base_offset, start), header.max_timestamp_ms
                for offset, record_timestamp_ms in records:
                    if offset >= start and record_timestamp_ms >= timestamp_ms:
                        return offset, record_timestamp_ms
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) for ListOffsets -3: the largest batch max timestamp still in the
        log and the base offset of the first batch carrying it (or the log start if that lies
        inside it). None for an empty log."""
        self._check_open()
        if self._log_start_offset >= self.log_end_offset:
            return None
        best: tuple[int, int] | None = None  # (timestamp, offset)
        first_index = self._segment_index_for(self._log_start_offset)
        for i, segment in enumerate(self._segments[first_index:]):
            if segment.is_empty:
                continue
            if i == 0 and segment.offset_of_max_timestamp < self._log_start_offset:
                # The segment's maximum may lie below the log start: look at what remains.
                candidate = self._max_timestamp_from(segment, self._log_start_offset)
            else:
                candidate = (segment.max_timestamp_ms, segment.offset_of_max_timestamp)
            if candidate is not None and (best is None or candidate[0] > best[0]):
                best = candidate
        if best is None:
            return None
        return max(best[1], self._log_start_offset), best[0]

    @staticmethod
    def _max_timestamp_from(segment: Segment, offset: int) -> tuple[int, int] | None:
        located = segment.locate(offset)
        if located is None:
            return None
        best: tuple[int, int] | None = None
        for _, header in segment.headers_from(located[0]):
            if best is None or header.max_timestamp_ms > best[0]:
                best = (header.max_timestamp_ms, header.base_offset)
        return best

    # ---- truncation, retention, deletion ----------------------------------------------

    def batch_boundary_at_or_below(self, offset: int) -> int:
        """The base offset of the batch holding `offset` (or the log end / start offset when
        `offset` lies at or beyond the end, or before the start)."""
        self._check_open()
        if offset >= self.log_end_offset:
            return self.log_end_offset
        if offset <= self._log_start_offset:
            return self._log_start_offset
        located = self._segments[self._segment_index_for(offset)].locate(offset)
        return offset if located is None else located[1].base_offset

    def truncate_to(self, offset: int) -> None:
        """Drop every batch with base offset >= `offset`, which must be a batch boundary
        (or the log end offset) at or above the log start."""
        self._check_open()
        leo = self.log_end_offset
        if offset == leo:
            return
        if offset > leo or offset < self._log_start_offset:
            raise ValueError(f"truncate_to({offset}): outside the log [{self._log_start_offset}, {leo}] of {self.directory}")
        segment_index = self._segment_index_for(offset)
        segment = self._segments[segment_index]
        located = segment.locate(offset)
        if located is None or located[1].base_offset != offset:
            holder = "" if located is None else f" (it is inside the batch at {located[1].base_offset})"
            raise ValueError(f"truncate_to({offset}): not a batch boundary{holder}")
        # Snapshots past the new end go first: one must never describe batches that a crash
        # after the cut lets new appends replace.
        if self.state is not None:
            self._snapshots.delete_above(offset)
        # The checkpoint goes down first: a crash in between must not leave it above the data.
        if self._recovery_point > offset:
            self._recovery_point = offset
        self._write_recovery_point()
        # Newest first: a crash part way through leaves a shorter log, never one with a hole.
        for later in reversed(self._segments[segment_index + 1 :]):
            self._size_bytes -= later.size_bytes
            later.delete()
        del self._segments[segment_index + 1 :]
        del self._bases[segment_index + 1 :]
        self._size_bytes -= segment.size_bytes
        segment.truncate_to(located[0], offset)
        self._size_bytes += segment.size_bytes
        segment.open_for_append()
        self.epochs.truncate_from_end(offset)
        if self.state is not None:
            self.reload_state()

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        """Delete everything and restart the log empty at `offset` (a follower whose log is
        wholly behind the leader's log start does this, as in Kafka)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"truncate_fully_and_start_at({offset}): negative offset")
        self._reset_to(offset, now_ms)
        self.epochs.clear()

    def _reset_to(self, offset: int, now_ms: int) -> None:
        self._snapshots.delete_above(-1)
        if self.state is not None:
            self.state.clear()
        self._recovery_point = offset
        self._write_recovery_point()
        self._log_start_offset = offset
        self._write_offset_file(LOG_START_OFFSET_FILE, offset)
        for segment in reversed(self._segments):
            segment.delete()
        self._segments = [self._new_segment(offset, now_ms)]
        self._bases = [offset]
        self._size_bytes = 0

    def apply_retention(self, *, now_ms: int, max_offset: int | None = None) -> int:
        """Delete whole segments past retention.ms (by their largest timestamp, or creation
        time if they carry none) or beyond retention.bytes, oldest first, never the active
        one, and with `max_offset` (the high watermark) only segments wholly below it.
        Advances log_start_offset; returns how many segments were deleted."""
        self._check_open()
        candidates = self._segments[:-1]
        if max_offset is not None:
            candidates = [s for s in candidates if s.next_offset <= max_offset]
        doomed = 0
        retention_ms = self.config.retention_ms
        if retention_ms is not None:
            for segment in candidates:
                newest_ms = segment.max_timestamp_ms if segment.max_timestamp_ms >= 0 else segment.created_ms
                if now_ms - newest_ms <= retention_ms:
                    break
                doomed += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes is not None:
            excess = self._size_bytes - retention_bytes - sum(s.size_bytes for s in candidates[:doomed])
            for segment in candidates[doomed:]:
                if excess < segment.size_bytes:
                    break
                excess -= segment.size_bytes
                doomed += 1
        if doomed == 0:
            return self._delete_segments_below_log_start()
        self._advance_log_start(candidates[doomed - 1].next_offset)
        return self._delete_segments_below_log_start()

    def delete_records_before(self, offset: int) -> None:
        """DeleteRecords: move the log start up to `offset` (never down)."""
        self._check_open()
        if offset > self.log_end_offset or offset < 0:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self.log_end_offset)
        if offset > self._log_start_offset:
            self._advance_log_start(offset)
            self._delete_segments_below_log_start()

    def _advance_log_start(self, offset: int) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._write_offset_file(LOG_START_OFFSET_FILE, offset)
        self.epochs.truncate_from_start(offset)

    def _delete_segments_below_log_start(self) -> int:
        deleted = 0
        while len(self._segments) > 1 and self._segments[0].next_offset <= self._log_start_offset:
            segment = self._segments.pop(0)
            self._bases.pop(0)
            self._size_bytes -= segment.size_bytes
            segment.delete()
            deleted += 1
        if deleted and self.state is not None:
            self._snapshots.delete_below(self._segments[0].base_offset)
        return deleted

    # ---- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Flush, checkpoint the recovery point and close every handle (a clean shutdown)."""
        if self._closed:
            return
        self._flush(None)
        if self.state is not None:
            # A clean shutdown: the next open trusts every index and replays nothing. (An
            # empty log needs no snapshot; nor does one whose end already has one.)
            self._segments[-1].fsync_txn_index()
            end = self.log_end_offset
            if end > self._segments[0].base_offset and not self._disk.exists(self._snapshots.path(end)):
                self._snapshots.write(end, self.state.snapshot())
        self._write_recovery_point()
        for segment in self._segments:
            segment.close()
        self._closed = True

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory!r}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )

