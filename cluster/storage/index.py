"""The sparse per-segment index: where to start reading for an offset or a timestamp.

One entry every `index.interval.bytes` of appended data, for the batch that starts there. An
entry holds the batch's base offset (relative to the segment), its file position, and the
largest timestamp among the batches *before* it in the segment (with the offset of the batch
that carried it). That last pair makes the same file serve both offset and timestamp lookups
(Kafka keeps a separate .timeindex), and lets a segment's largest timestamp be recovered on
open by scanning only the batches after the last entry.

The file `<base>.index` is a flat array of 20-byte big-endian entries. It is never the source
of truth: if it is missing, cut short or inconsistent, the segment is rescanned and the file
rewritten.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from dataclasses import dataclass

ENTRY = struct.Struct(">iiqi")
ENTRY_SIZE = ENTRY.size  # 20
NO_TIMESTAMP = -1


class IndexInvalidError(ValueError):
    """An index file whose entries cannot describe its segment."""


@dataclass(frozen=True, slots=True)
class IndexEntry:
    offset: int  # absolute base offset of the indexed batch
    position: int  # byte position of that batch in the segment file
    max_timestamp_before_ms: int  # largest batch max-timestamp before this batch, or -1
    offset_of_max_timestamp_before: int  # last offset of the batch that had it, or -1


class SparseIndex:
    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._offsets = array("q")
        self._positions = array("q")
        self._max_ts_before = array("q")
        self._max_ts_offsets = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, entry: IndexEntry) -> bytes:
        """Append an entry in memory; returns its encoded bytes for the caller to write."""
        if self._offsets and (entry.offset <= self._offsets[-1] or entry.position <= self._positions[-1]):
            raise ValueError(f"index entry {entry} does not follow the last one")
        self._offsets.append(entry.offset)
        self._positions.append(entry.position)
        self._max_ts_before.append(entry.max_timestamp_before_ms)
        self._max_ts_offsets.append(entry.offset_of_max_timestamp_before)
        return self._encode_entry(entry)

    def _encode_entry(self, entry: IndexEntry) -> bytes:
        relative_max_offset = -1 if entry.offset_of_max_timestamp_before < 0 else entry.offset_of_max_timestamp_before - self.base_offset
        return ENTRY.pack(entry.offset - self.base_offset, entry.position, entry.max_timestamp_before_ms, relative_max_offset)

    def entry(self, i: int) -> IndexEntry:
        return IndexEntry(self._offsets[i], self._positions[i], self._max_ts_before[i], self._max_ts_offsets[i])

    def last(self) -> IndexEntry | None:
        return self.entry(len(self) - 1) if len(self) else None

    def floor_for_offset(self, offset: int) -> IndexEntry | None:
        """The last entry whose batch starts at or before `offset`."""
        i = bisect.bisect_right(self._offsets, offset)
        return self.entry(i - 1) if i else None

    def floor_for_timestamp(self, timestamp_ms: int) -> IndexEntry | None:
        """The last entry before which no batch reaches `timestamp_ms`: the first batch whose
        max timestamp is >= timestamp_ms is at or after it."""
        i = bisect.bisect_left(self._max_ts_before, timestamp_ms)
        return self.entry(i - 1) if i else None

    def truncate_to_offset(self, offset: int) -> int:
        """Drop entries for batches at or after `offset`; returns how many entries remain."""
        keep = bisect.bisect_left(self._offsets, offset)
        for column in (self._offsets, self._positions, self._max_ts_before, self._max_ts_offsets):
            del column[keep:]
        return keep

    def encode(self) -> bytes:
        base = self.base_offset
        pack = ENTRY.pack
        return b"".join(
            pack(offset - base, position, max_ts, -1 if max_ts_offset < 0 else max_ts_offset - base)
            for offset, position, max_ts, max_ts_offset in zip(self._offsets, self._positions, self._max_ts_before, self._max_ts_offsets)
        )

    @classmethod
    def decode(cls, base_offset: int, data: bytes, *, segment_size_bytes: int) -> SparseIndex:
        """Parse an index file, checking everything that can be checked without the segment."""
        if len(data) % ENTRY_SIZE:
            raise IndexInvalidError(f"size {len(data)} is not a multiple of {ENTRY_SIZE}")
        index = cls(base_offset)
        offsets, positions, max_ts_column, max_ts_offsets = index._offsets, index._positions, index._max_ts_before, index._max_ts_offsets
        previous_offset = previous_position = 0
        previous_max_ts = NO_TIMESTAMP
        for relative_offset, position, max_ts_before, relative_max_offset in ENTRY.iter_unpack(data):
            if relative_offset <= previous_offset or position <= previous_position or position >= segment_size_bytes:
                raise IndexInvalidError(
                    f"entry (offset +{relative_offset}, position {position}) does not follow (+{previous_offset}, {previous_position})"
                    f" inside a segment of {segment_size_bytes} bytes"
                )
            if max_ts_before < previous_max_ts:
                raise IndexInvalidError(f"timestamps go backwards at offset +{relative_offset}")
            if relative_max_offset >= relative_offset or (relative_max_offset < 0) != (max_ts_before == NO_TIMESTAMP):
                raise IndexInvalidError(f"entry at offset +{relative_offset} names a later batch for its timestamp")
            offsets.append(base_offset + relative_offset)
            positions.append(position)
            max_ts_column.append(max_ts_before)
            max_ts_offsets.append(-1 if relative_max_offset < 0 else base_offset + relative_max_offset)
            previous_offset, previous_position, previous_max_ts = relative_offset, position, max_ts_before
        return index
