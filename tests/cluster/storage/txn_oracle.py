"""The test oracle for the transaction state a log keeps: session 8's in-memory design, kept
here as the reference now that the product reads `.txnindex` files and snapshots instead.

It rebuilds everything from the log alone: a fresh producer-state table replays every batch
header from the log start, and every abort marker's transaction goes to one list for the
whole partition; a lookup returns the entries whose marker is at or past the fetch offset and
whose first offset is below the bound. The product must answer read_committed fetches the
same way in every case, whatever it read from its files.

One known difference, where the old design was wrong: a transaction that began below the log
start (DeleteRecords or retention moved it into the transaction) was rebuilt as starting at
its marker, so a consumer reading from the log start would have kept the aborted records
before the marker. The product keeps the true first offset (its snapshots remember it).
Comparisons therefore move the log start only where no transaction spans it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from cluster.broker.producer_state import ProducerStateTable
from cluster.storage.log import PartitionLog
from cluster.storage.txn_index import AbortedTxn


@dataclass
class OracleState:
    table: ProducerStateTable
    aborted: list[AbortedTxn]  # in marker order

    def overlapping(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        start = bisect.bisect_left([e.last_offset for e in self.aborted], fetch_offset)
        return [e for e in self.aborted[start:] if e.first_offset < upper_bound_offset]


def rebuild(log: PartitionLog) -> OracleState:
    """The state replayed from the log start, as session 8's Partition.rebuild_producer_state."""
    table = ProducerStateTable()
    aborted = []
    for header in list(log.batch_headers(from_offset=log.log_start_offset)):
        control = log.read(header.base_offset, header.size_bytes)[0] if header.is_control else None
        entry = table.replay(header, control)
        if entry is not None:
            aborted.append(entry)
    return OracleState(table, aborted)


def key(entries: list[AbortedTxn]) -> list[tuple[int, int, int]]:
    """What a read_committed Fetch answer is made of (with the marker offset)."""
    return [(e.producer_id, e.first_offset, e.last_offset) for e in entries]


def transaction_spans(log: PartitionLog) -> list[tuple[int, int]]:
    """(first offset, marker offset or the log end) of every transaction in the log from its
    first segment, read from the batches."""
    first_of: dict[int, int] = {}
    spans = []
    for header in list(log.batch_headers(from_offset=0)):
        if not header.has_producer_id or not header.is_transactional:
            continue
        if header.is_control:
            spans.append((first_of.pop(header.producer_id, header.base_offset), header.base_offset))
        else:
            first_of.setdefault(header.producer_id, header.base_offset)
    spans.extend((first, log.log_end_offset) for first in first_of.values())
    return spans
