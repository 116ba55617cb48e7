"""One segment of a partition log: `<base>.log` (batches back to back), its `<base>.index`
and, in a log that keeps transaction state, its `<base>.txnindex` (see txn_index.py).

A segment knows its byte size, its offset range, its largest batch timestamp, and keeps the
sparse index in memory; only the active (last) segment has open append handles. Loading a
segment validates it: framing, CRC-32C and contiguous offsets, stopping at the first bad
batch so the log can cut a torn or corrupt tail there.
"""

from __future__ import annotations

import bisect
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass

from cluster.storage.batch import HEADER_SIZE, BatchHeader, InvalidBatchError, crc_is_valid, parse_header
from cluster.storage.disk import AppendHandle, Disk
from cluster.storage.index import NO_TIMESTAMP, IndexEntry, IndexInvalidError, SparseIndex
from cluster.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, AbortedTxnIndex, TxnIndexInvalidError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
# Offsets in the index are 32-bit relative to the segment base (as in Kafka).
MAX_RELATIVE_OFFSET = 2**31 - 1
_SCAN_CHUNK_BYTES = 1 << 20
_HEADER_READ_AHEAD_BYTES = 16 * 1024
_LARGE_BATCH_BYTES = 4 * 1024
_RECENT_BATCHES = 256  # positions of the newest batches kept in memory (between 256 and 512)


def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_file_name(name: str) -> int | None:
    """The base offset in a `<20 digits>.log` name, or None for any other name."""
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class CorruptLogError(RuntimeError):
    """Stored batches stopped making sense while the log was open (Kafka: KafkaStorageException)."""


@dataclass(frozen=True)
class LoadResult:
    batches_scanned: int
    problem: str | None  # why the valid data ends before the file does
    invalid_tail_bytes: int
    index_rebuild_reason: str | None


class Segment:
    def __init__(self, disk: Disk, directory: str, base_offset: int, *, index_interval_bytes: int, created_ms: int) -> None:
        self._disk = disk
        self.base_offset = base_offset
        stem = segment_file_stem(base_offset)
        self.log_path = posixpath.join(directory, stem + LOG_SUFFIX)
        self.index_path = posixpath.join(directory, stem + INDEX_SUFFIX)
        self.txn_index_path = posixpath.join(directory, stem + TXN_INDEX_SUFFIX)
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.size_bytes = 0
        self.next_offset = base_offset
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1  # base offset of the batch holding max_timestamp_ms
        self.first_batch_timestamp_ms: int | None = None
        self.index = SparseIndex(base_offset)
        self._bytes_since_index_entry = 0
        self._log_handle: AppendHandle | None = None
        # Index entries not yet in the file. They are written when the segment is fsynced,
        # so an active segment holds one file descriptor, not two; a crash that loses them
        # only makes recovery scan a little more.
        self._index_pending = bytearray()
        # The aborted transactions whose markers are in this segment, and the entries not yet
        # in the file (written with the index's pending entries, fsynced at seal and close).
        self.txn_index = AbortedTxnIndex()
        self._txn_pending = bytearray()
        # False once entries went to the file without an fsync (a clean close then fsyncs it).
        self._txn_index_synced = True
        # Where the most recently accounted batches are (parallel lists, oldest first), so
        # that reads near the log end, nearly every fetch of a follower or a caught-up
        # consumer, find their batch without scanning headers from the last index entry.
        self._recent_bases: list[int] = []
        self._recent: list[tuple[int, BatchHeader]] = []

    def _forget_recent(self) -> None:
        self._recent_bases.clear()
        self._recent.clear()

    @property
    def name(self) -> str:
        return posixpath.basename(self.log_path)

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    # ---- lifecycle ------------------------------------------------------------------

    @classmethod
    def create(cls, disk: Disk, directory: str, base_offset: int, *, index_interval_bytes: int, now_ms: int,
               txn_index: bool = False) -> Segment:
        """A new empty segment; with `txn_index`, its (empty) `.txnindex` file too, so that
        a missing one is noticed on open."""
        segment = cls(disk, directory, base_offset, index_interval_bytes=index_interval_bytes, created_ms=now_ms)
        for path in (segment.log_path, segment.index_path, segment.txn_index_path):
            if disk.exists(path):
                disk.remove(path)
        segment.open_for_append()
        disk.open_append(segment.index_path).close()
        if txn_index:
            disk.open_append(segment.txn_index_path).close()
        return segment

    def open_for_append(self) -> None:
        if self._log_handle is None:
            self._log_handle = self._disk.open_append(self.log_path)

    @property
    def is_open_for_append(self) -> bool:
        return self._log_handle is not None

    def fsync(self) -> None:
        """Make every batch of the segment durable. Pending index entries go to the disk
        too, but without an fsync of their own: a crash that loses some only makes recovery
        scan a little more, so flush.messages=1 costs one fsync per write, not two. A
        segment without an append handle was fsynced when it was sealed or loaded."""
        if self._log_handle is not None:
            self._log_handle.fsync()
        self._write_index_pending(fsync=False)
        self._write_txn_pending(fsync=False)

    def _write_index_pending(self, *, fsync: bool) -> None:
        if not self._index_pending and not fsync:
            return
        handle = self._disk.open_append(self.index_path)
        try:
            handle.write(self._index_pending)
            if fsync:
                handle.fsync()
        finally:
            handle.close()
        self._index_pending.clear()

    def _write_txn_pending(self, *, fsync: bool) -> None:
        """Append the pending aborted-transaction entries; with `fsync`, make the whole file
        durable (only a log that keeps one has the file)."""
        if not self._txn_pending and (not fsync or self._txn_index_synced or not self._disk.exists(self.txn_index_path)):
            return
        handle = self._disk.open_append(self.txn_index_path)
        try:
            handle.write(self._txn_pending)
            if fsync:
                handle.fsync()
        finally:
            handle.close()
        self._txn_pending.clear()
        self._txn_index_synced = fsync

    def fsync_txn_index(self) -> None:
        """Make the aborted-transaction index durable (a clean close: the recovery point
        about to cover this segment says its index can be trusted)."""
        self._write_txn_pending(fsync=True)

    def fsync_closed(self) -> None:
        """Fsync a segment that has no append handle (after recovery validated it)."""
        for path in (self.log_path, self.index_path, self.txn_index_path):
            if path == self.txn_index_path and not self._disk.exists(path):
                continue
            handle = self._disk.open_append(path)
            try:
                handle.fsync()
            finally:
                handle.close()

    def seal(self) -> None:
        """Fsync the segment and its index and close the append handle: it is no longer the
        active one, and its index is trusted on the next open."""
        if self._log_handle is not None:
            self._log_handle.fsync()
        self._write_index_pending(fsync=True)
        self._write_txn_pending(fsync=True)
        self.close()

    def close(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.txn_index_path):
            if self._disk.exists(path):
                self._disk.remove(path)

    # ---- appending --------------------------------------------------------------------

    def fits_offsets(self, header: BatchHeader) -> bool:
        return header.last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(self, batch: memoryview, header: BatchHeader) -> None:
        if self._log_handle is None:
            raise RuntimeError(f"segment {self.name} is not open for appending")
        position = self.size_bytes
        self._log_handle.write(batch)
        entry = self._account(header, position)
        if entry is not None:
            self._index_pending += entry

    def _account(self, header: BatchHeader, position: int) -> bytes | None:
        """Update the in-memory state for a batch stored at `position`; returns the encoded
        index entry to persist, if the batch gets one."""
        self._recent_bases.append(header.base_offset)
        self._recent.append((position, header))
        if len(self._recent) > 2 * _RECENT_BATCHES:
            del self._recent_bases[:_RECENT_BATCHES]
            del self._recent[:_RECENT_BATCHES]
        encoded = None
        if position > 0 and self._bytes_since_index_entry > self.index_interval_bytes:
            encoded = self.index.add(IndexEntry(header.base_offset, position, self.max_timestamp_ms, self.offset_of_max_timestamp))
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size_bytes
        self.size_bytes = position + header.size_bytes
        self.next_offset = header.next_offset
        if header.max_timestamp_ms > self.max_timestamp_ms:
            self.max_timestamp_ms = header.max_timestamp_ms
            self.offset_of_max_timestamp = header.base_offset
        if self.first_batch_timestamp_ms is None:
            self.first_batch_timestamp_ms = header.max_timestamp_ms
        return encoded

    def append_aborted(self, entry: AbortedTxn) -> None:
        """Note a transaction aborted by a marker in this segment (kept in memory, written
        to the file with the next fsync)."""
        self.txn_index.add(entry)
        self._txn_pending += entry.encode()

    # ---- reading ----------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        size = min(size, self.size_bytes - position)
        return self._disk.read(self.log_path, position, size) if size > 0 else b""

    def header_at(self, position: int) -> BatchHeader:
        return parse_header(self._disk.read(self.log_path, position, HEADER_SIZE))

    def locate(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the batch holding `offset`, or None if it is past the end."""
        if offset >= self.next_offset or offset < self.base_offset:
            return None
        bases = self._recent_bases
        if bases and offset >= bases[0]:
            # Batches are contiguous in offsets (the log appends only at its end), so the
            # last remembered batch starting at or before `offset` holds it.
            position, header = self._recent[bisect.bisect_right(bases, offset) - 1]
            if header.next_offset > offset:
                return position, header
        entry = self.index.floor_for_offset(offset)
        position = 0 if entry is None else entry.position
        for found_at, header in self.headers_from(position):
            if entry is not None and found_at == position and header.base_offset != entry.offset:
                self.rebuild_index(f"index entry for offset {entry.offset} points at a batch with offset {header.base_offset}")
                return self.locate(offset)
            if header.next_offset > offset:
                return found_at, header
        raise CorruptLogError(f"offset {offset} is below {self.name}'s end {self.next_offset} but no batch holds it")

    def locate_timestamp(self, timestamp_ms: int, from_offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch at or after the one holding `from_offset` whose max timestamp is
        >= timestamp_ms, or None if there is none in this segment."""
        if self.max_timestamp_ms < timestamp_ms:
            return None
        by_time = self.index.floor_for_timestamp(timestamp_ms)
        located = self.locate(from_offset)
        if located is None:
            return None
        if by_time is not None and by_time.position > located[0]:
            located = (by_time.position, self.header_at(by_time.position))
        for position, header in self.headers_from(located[0]):
            if header.max_timestamp_ms >= timestamp_ms:
                return position, header
        return None

    def headers_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from the one starting at `position`.

        Small batches are read ahead in chunks, so walking many of them costs few reads;
        after a large batch only the next header is read."""
        buffer = b""
        buffer_start = position
        last_size = 0
        while position < self.size_bytes:
            at = position - buffer_start
            if len(buffer) - at < HEADER_SIZE:
                read_ahead = HEADER_SIZE if last_size >= _LARGE_BATCH_BYTES else _HEADER_READ_AHEAD_BYTES
                buffer, buffer_start, at = self.read(position, read_ahead), position, 0
            header = parse_header(buffer, at)
            yield position, header
            position += header.size_bytes
            last_size = header.size_bytes

    # ---- truncation -------------------------------------------------------------------

    def truncate_to(self, position: int, offset: int) -> None:
        """Cut the segment so that it ends at `position`, the start of the batch `offset`.
        Leaves the segment without append handles; the caller reopens it if it is active."""
        self.close()
        self._disk.truncate(self.log_path, position)
        self.index.truncate_to_offset(offset)
        self._recompute_from_last_index_entry(position)
        # Rewritten whole rather than cut: the file may hold fewer entries than memory.
        self._write_whole_index()
        self.txn_index.truncate_to(offset)
        if self._disk.exists(self.txn_index_path):
            self.write_txn_index()

    def write_txn_index(self) -> None:
        """Write the aborted-transaction index whole (after truncation or a rebuild)."""
        self._disk.write_atomic(self.txn_index_path, self.txn_index.encode())
        self._txn_pending.clear()
        self._txn_index_synced = True

    def load_txn_index(self) -> str | None:
        """Read the `.txnindex` file of a loaded segment; returns why it cannot be trusted
        (then the index is left empty for the caller to rebuild), or None."""
        self.txn_index = AbortedTxnIndex()
        self._txn_pending.clear()
        name = posixpath.basename(self.txn_index_path)
        if not self._disk.exists(self.txn_index_path):
            return f"{name} is missing"
        try:
            self.txn_index = AbortedTxnIndex.decode(self._disk.read_all(self.txn_index_path), base_offset=self.base_offset,
                                                    next_offset=self.next_offset)
        except TxnIndexInvalidError as error:
            return f"{name} is invalid: {error}"
        return None

    def _write_whole_index(self) -> None:
        self._disk.write_atomic(self.index_path, self.index.encode())
        self._index_pending.clear()

    def _recompute_from_last_index_entry(self, end_position: int) -> None:
        last = self.index.last()
        if last is None:
            position, self.next_offset = 0, self.base_offset
            self.max_timestamp_ms, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        else:
            position, self.next_offset = last.position, last.offset
            self.max_timestamp_ms, self.offset_of_max_timestamp = last.max_timestamp_before_ms, last.offset_of_max_timestamp_before
        self._bytes_since_index_entry = 0
        self._forget_recent()
        self.size_bytes = end_position
        self.first_batch_timestamp_ms = None if end_position == 0 else self.header_at(0).max_timestamp_ms
        while position < end_position:
            header = self.header_at(position)
            self._account_existing(header, position)
            position += header.size_bytes

    def _account_existing(self, header: BatchHeader, position: int) -> None:
        """Like _account, for a batch already in the file: size_bytes must not shrink."""
        size = self.size_bytes
        self._account(header, position)
        self.size_bytes = max(size, self.size_bytes)

    # ---- loading and validation -------------------------------------------------------

    def load(self, *, trusted_below: int | None) -> LoadResult:
        """Read the segment from disk and validate it.

        Batches below `trusted_below` (the recovery point: they were fsynced) may be skipped
        by resuming from the stored index, if it is sane and its last entry is not past that
        offset; everything after the resume point is checked (framing, CRC, offsets). With
        None every batch is checked and the index rebuilt. The caller cuts the file at the
        problem, if any.
        """
        file_size = self._disk.file_size(self.log_path)
        rebuild_reason = None
        start = None
        full_scan = trusted_below is None
        if trusted_below is not None:
            start, rebuild_reason = self._load_index(file_size)
            if start is not None and start[1] > trusted_below:
                start = None  # the index reaches into unflushed data: check everything
            full_scan = start is None
        if start is None:
            self.index = SparseIndex(self.base_offset)
            start = (0, self.base_offset, NO_TIMESTAMP, -1)
        position, offset, max_ts, max_ts_offset = start
        self._forget_recent()
        self.size_bytes = position
        self.next_offset = offset
        self.max_timestamp_ms, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self._bytes_since_index_entry = 0
        self.first_batch_timestamp_ms = None
        entries_before = len(self.index)
        batches, problem = self._scan(position, file_size)
        if position > 0:
            self.first_batch_timestamp_ms = self.header_at(0).max_timestamp_ms
        index_dirty = full_scan or len(self.index) != entries_before or rebuild_reason is not None
        if problem is not None or index_dirty:
            # Written whole: a rebuilt index replaces whatever was there.
            self._write_whole_index()
        return LoadResult(batches, problem, file_size - self.size_bytes, rebuild_reason)

    def _load_index(self, file_size: int) -> tuple[tuple[int, int, int, int] | None, str | None]:
        """Where to resume scanning from the stored index, or (None, why it cannot be used)."""
        if not self._disk.exists(self.index_path):
            return None, f"{posixpath.basename(self.index_path)} is missing"
        try:
            index = SparseIndex.decode(self.base_offset, self._disk.read_all(self.index_path), segment_size_bytes=file_size)
            last = index.last()
            if last is not None:
                header = parse_header(self._disk.read(self.log_path, last.position, HEADER_SIZE))
                if header.base_offset != last.offset:
                    raise IndexInvalidError(f"its last entry points at offset {header.base_offset}, not {last.offset}")
        except (IndexInvalidError, InvalidBatchError) as error:
            return None, f"{posixpath.basename(self.index_path)} is invalid: {error}"
        self.index = index
        if last is None:
            return (0, self.base_offset, NO_TIMESTAMP, -1), None
        return (last.position, last.offset, last.max_timestamp_before_ms, last.offset_of_max_timestamp_before), None

    def _scan(self, position: int, file_size: int) -> tuple[int, str | None]:
        """Validate batches from `position` to the end of the file, accounting each good one;
        stops at the first bad one. Returns (batches, problem)."""
        batches = 0
        buffer = b""
        buffer_start = position
        expected_offset = self.next_offset
        while position < file_size:
            at = position - buffer_start
            if len(buffer) - at < HEADER_SIZE:
                buffer, buffer_start, at = self._disk.read(self.log_path, position, _SCAN_CHUNK_BYTES), position, 0
            where = f"at offset {expected_offset} (byte {position}) in {self.name}"
            if len(buffer) - at < HEADER_SIZE:
                return batches, f"torn batch header {where}: {len(buffer) - at} of {HEADER_SIZE} bytes"
            try:
                header = parse_header(buffer, at)
            except InvalidBatchError as error:
                return batches, f"invalid batch {where}: {error}"
            if header.size_bytes > file_size - position:
                return batches, f"torn batch {where}: it claims {header.size_bytes} bytes, {file_size - position} remain"
            if len(buffer) - at < header.size_bytes:
                buffer = self._disk.read(self.log_path, position, max(_SCAN_CHUNK_BYTES, header.size_bytes))
                buffer_start, at = position, 0
            if not crc_is_valid(buffer, header, at):
                return batches, f"CRC mismatch {where}"
            if header.base_offset != expected_offset:
                return batches, f"batch with offset {header.base_offset} {where}, where offset {expected_offset} was expected"
            if not self.fits_offsets(header):
                return batches, f"batch {where} ends past the segment's 32-bit relative offset range"
            self._account(header, position)
            batches += 1
            position += header.size_bytes
            expected_offset = header.next_offset
        return batches, None

    def cut_invalid_tail(self) -> None:
        """Truncate the log file to the valid data found by load()."""
        if self._disk.file_size(self.log_path) > self.size_bytes:
            self._disk.truncate(self.log_path, self.size_bytes)

    def rebuild_index(self, reason: str) -> None:
        """Rescan the whole segment (while the log is open) and rewrite its index."""
        was_open = self.is_open_for_append
        self.close()
        result = self.load(trusted_below=None)
        if result.problem is not None:
            raise CorruptLogError(f"{self.name} became unreadable while open ({reason}): {result.problem}")
        if was_open:
            self.open_for_append()
