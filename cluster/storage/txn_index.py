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

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def add(self, entry: AbortedTxn) -> None:
        if self._entries and entry.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {entry.last_offset} is not after the last one ({self._entries[-1].last_offset})")
        self._entries.append(entry)

    def overlapping(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [fetch_offset, upper_bound_offset)."""
        start = bisect.bisect_left([e.last_offset for e in self._entries], fetch_offset)
        return [e for e in self._entries[start:] if e.first_offset < upper_bound_offset]

    def truncate_to(self, offset: int) -> None:
        """The log now ends at `offset`: markers at or past it are gone."""
        self._entries = [e for e in self._entries if e.last_offset < offset]

    def drop_below(self, log_start_offset: int) -> None:
        """The log now starts at `log_start_offset`: transactions wholly before it are gone."""
        self._entries = [e for e in self._entries if e.last_offset >= log_start_offset]

    def clear(self) -> None:
        self._entries.clear()
