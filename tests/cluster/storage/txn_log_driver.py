"""Writing transactional batches and markers straight to a PartitionLog that keeps a producer
state (what a broker partition's log is), for the storage tests of the transaction files."""

from __future__ import annotations

from cluster.broker.producer_state import ProducerStateTable
from cluster.protocol.records import Record, build_batch, build_control_batch
from cluster.storage.batch import ATTR_TRANSACTIONAL
from cluster.storage.config import LogConfig
from cluster.storage.disk import Disk
from cluster.storage.log import PartitionLog

# A few batches per segment, an index entry every other batch.
TINY = LogConfig(segment_bytes=400, index_interval_bytes=100, retention_ms=None)


def open_log(disk: Disk, directory: str, config: LogConfig = TINY) -> PartitionLog:
    return PartitionLog.open(disk, directory, config, now_ms=0, state=ProducerStateTable())


def table(log: PartitionLog) -> ProducerStateTable:
    assert isinstance(log.state, ProducerStateTable)
    return log.state


class Writer:
    """Appends at the log end, keeping each producer's next sequence."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self._sequences: dict[int, int] = {}

    def data(self, producer_id: int, *, transactional: bool = True, records: int = 1) -> int:
        sequence = self._sequences.get(producer_id, 0)
        self._sequences[producer_id] = sequence + records
        batch = build_batch([Record(b"k", b"v%d" % i) for i in range(records)], base_offset=self.log.log_end_offset, timestamp_ms=0,
                            attributes=ATTR_TRANSACTIONAL if transactional else 0, producer_id=producer_id, producer_epoch=0,
                            base_sequence=sequence)
        return self.log.append(batch, now_ms=0).base_offset

    def plain(self) -> int:
        batch = build_batch([Record(None, b"plain")], base_offset=self.log.log_end_offset, timestamp_ms=0)
        return self.log.append(batch, now_ms=0).base_offset

    def marker(self, producer_id: int, *, committed: bool) -> int:
        batch = build_control_batch(committed=committed, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                    base_offset=self.log.log_end_offset, timestamp_ms=0)
        return self.log.append(batch, now_ms=0).base_offset
