"""The aborted-transaction index of one segment (Kafka's `.txnindex`): for each transaction
aborted by a marker stored in the segment, its producer id, first offset, last offset (the
abort marker's) and the last stable offset right after it was aborted. read_committed
fetches ask which aborted transactions overlap the range they return, so consumers can drop
those records.

The file `<base>.txnindex` is a flat array of 32-byte big-endian entries (absolute offsets),
in marker order. It is created with its segment (so a missing file is noticed), appended
when an abort marker is appended, fsynced when the segment is sealed and at a clean close,
cut when the segment is truncated and deleted with it. The log trusts it only for a segment
wholly below the recovery point; otherwise, or when it is missing or fails `decode`'s
checks, the log rebuilds it by replaying the segment's batches (see log.py).
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">qqqq")  # producer id, first offset, last offset, last stable offset
ENTRY_SIZE = ENTRY.size  # 32


class TxnIndexInvalidError(ValueError):
    """A `.txnindex` file whose entries cannot describe its segment."""


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """The record of a transaction marker (control batch): commit or abort, and the epoch of
    the coordinator that wrote it."""

    committed: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    # The LSO once the transaction was aborted: the first offset of the earliest other open
    # transaction, or last_offset + 1 (Kafka's). No transaction aborted later starts below
    # it, which lets a lookup stop early (see AbortedTxnIndex.collect).
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class AbortedTxnIndex:
    """The entries of one segment, in memory (the file's content), sorted by last offset."""

    def __init__(self) -> None:
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []  # the entries' last offsets, for bisection

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def add(self, entry: AbortedTxn) -> None:
        if entry.first_offset > entry.last_offset:
            raise ValueError(f"aborted transaction {entry} starts after its marker")
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {entry.last_offset} is not after the last one ({self._entries[-1].last_offset})")
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def collect(self, fetch_offset: int, upper_bound_offset: int, into: list[AbortedTxn]) -> bool:
        """Add to `into` the entries with records in [fetch_offset, upper_bound_offset);
        True when no transaction aborted after them can overlap that range (Kafka's
        TransactionIndex.collectAbortedTxns): an entry whose LSO is at or past the bound."""
        for i in range(bisect.bisect_left(self._last_offsets, fetch_offset), len(self._entries)):
            entry = self._entries[i]
            if entry.first_offset < upper_bound_offset:
                into.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def truncate_to(self, offset: int) -> int:
        """The log now ends at `offset`: markers at or past it are gone. Returns how many
        entries were dropped."""
        keep = bisect.bisect_left(self._last_offsets, offset)
        dropped = len(self._entries) - keep
        del self._entries[keep:], self._last_offsets[keep:]
        return dropped

    def clear(self) -> None:
        self._entries.clear()
        self._last_offsets.clear()

    def encode(self) -> bytes:
        return b"".join(entry.encode() for entry in self._entries)

    @classmethod
    def decode(cls, data: bytes, *, base_offset: int, next_offset: int) -> AbortedTxnIndex:
        """Parse a `.txnindex` file of the segment holding [base_offset, next_offset),
        checking all that can be checked without the batches: whole entries, markers inside
        the segment and in order, each transaction starting at or before its marker."""
        if len(data) % ENTRY_SIZE:
            raise TxnIndexInvalidError(f"size {len(data)} is not a multiple of {ENTRY_SIZE}")
        index = cls()
        for producer_id, first, last, lso in ENTRY.iter_unpack(data):
            if not base_offset <= last < next_offset:
                raise TxnIndexInvalidError(f"marker offset {last} is outside the segment [{base_offset}, {next_offset})")
            if producer_id < 0 or not 0 <= first <= last or not 0 <= lso <= last + 1:
                raise TxnIndexInvalidError(f"entry (producer {producer_id}, first {first}, last {last}, LSO {lso}) is inconsistent")
            try:
                index.add(AbortedTxn(producer_id, first, last, lso))
            except ValueError as error:
                raise TxnIndexInvalidError(str(error)) from None
        return index
