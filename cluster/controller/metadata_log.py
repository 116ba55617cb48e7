"""The controller's durable metadata log: record batches of encoded metadata records in a
PartitionLog, fsynced on every append, because a decision must survive the controller's
crash before any broker acts on it. Offsets are record offsets (one per record), which is
what broker epochs and `current_metadata_offset` count."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from cluster.metadata.records import MetadataRecord, decode_record, encode_record
from cluster.protocol.records import Record, build_batch, read_records
from cluster.storage.batch import parse_header
from cluster.storage.config import LogConfig
from cluster.storage.disk import Disk
from cluster.storage.log import PartitionLog

log = logging.getLogger(__name__)
LOG_DIR_NAME = "__cluster_metadata-0"
# The controller's own leader epoch on its log: one voter, never re-elected.
CONTROLLER_EPOCH = 0


class MetadataLog:
    def __init__(self, disk: Disk, data_dir: str, now_ms: int) -> None:
        disk.makedirs(data_dir)
        self.log = PartitionLog.open(disk, f"{data_dir}/{LOG_DIR_NAME}", LogConfig(), now_ms=now_ms)
        report = self.log.recovery
        if report.truncated_bytes:
            # Only the batch being written when the controller died can be torn, and no one
            # acted on it (it was not yet durable); anything more is a damaged disk.
            log.warning("metadata log recovery cut %d bytes: %s", report.truncated_bytes, report.reason)

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, records: list[MetadataRecord], now_ms: int) -> int:
        """Append one atomic batch and fsync it; the offset of its first record."""
        base = self.log.log_end_offset
        batch = build_batch([Record(None, encode_record(r)) for r in records], base_offset=base, timestamp_ms=now_ms,
                            partition_leader_epoch=CONTROLLER_EPOCH)
        self.log.append(batch, now_ms=now_ms)
        self.log.flush()
        return base

    def replay(self) -> Iterator[tuple[int, MetadataRecord]]:
        """(offset, record) of every record, in order; a bad record raises naming its offset."""
        position = self.log.log_start_offset
        while position < self.log.log_end_offset:
            batches = self.log.read(position, 1 << 20)
            if not batches:
                break
            for batch in batches:
                for record in read_records(bytes(batch)):
                    yield record.offset, decode_record(record.value, f"at offset {record.offset} of {self.log.directory}")
                position = parse_header(batch).next_offset

    def read(self, offset: int, max_bytes: int) -> list[bytes | memoryview]:
        return self.log.read(offset, max_bytes)

    def close(self) -> None:
        self.log.close()
