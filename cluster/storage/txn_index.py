"""The aborted-transaction index of one partition (what Kafka keeps per segment in
`.txnindex` files): for each aborted transaction, its producer id, first offset, last offset
(the abort marker's) and the last stable offset when it was aborted. read_committed fetches
ask it which aborted transactions overlap the range they return, so consumers can drop those
records.

Our design keeps the index in memory and rebuilds it from the log (the control batches)
whenever the partition's state is rebuilt: on every open, which covers a clean restart, an
unclean shutdown and a missing file alike, and after every truncation. Entries below the log
start are dropped as retention and DeleteRecords move it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


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
    last_offset: int
    last_stable_offset: int


class AbortedTxnIndex:
    def __init__(self) -> None:
        # Appended in marker order, so sorted by last offset.
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []  # the entries' last offsets, for bisection

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def add(self, entry: AbortedTxn) -> None:
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {entry.last_offset} is not after the last one ({self._entries[-1].last_offset})")
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def overlapping(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [fetch_offset, upper_bound_offset)."""
        # Entries past the bound may still start below it (a long transaction), so the
        # scan runs to the end; only those ending before the fetch offset are skipped.
        start = bisect.bisect_left(self._last_offsets, fetch_offset)
        return [e for e in self._entries[start:] if e.first_offset < upper_bound_offset]

    def truncate_to(self, offset: int) -> None:
        """The log now ends at `offset`: markers at or past it are gone."""
        keep = bisect.bisect_left(self._last_offsets, offset)
        del self._entries[keep:], self._last_offsets[keep:]

    def drop_below(self, log_start_offset: int) -> None:
        """The log now starts at `log_start_offset`: transactions wholly before it are gone."""
        drop = bisect.bisect_left(self._last_offsets, log_start_offset)
        if drop:
            del self._entries[:drop], self._last_offsets[:drop]

    def clear(self) -> None:
        self._entries.clear()
        self._last_offsets.clear()
