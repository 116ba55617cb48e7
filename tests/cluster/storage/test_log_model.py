"""Hypothesis state machine: PartitionLog against a plain list of batches, under random
appends, reads, truncations, flushes, crashes, restarts and retention. Run on a MemoryDisk
(crashes with and without torn writes) and on real files with OsDisk's lose-unflushed mode
(a crash there is the death of the process: OsDisk.abandon)."""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import shutil
import tempfile
from pathlib import Path

from cluster.storage.disk import Disk, MemoryDisk, OsDisk
from cluster.storage.epochs import replay_assignments
from cluster.storage.log import LogConfig, OffsetOutOfRangeError, PartitionLog
from tests.cluster.storage.batches import make_batch

DIRECTORY = "/kafka/topic-3"


@dataclass(frozen=True)
class ModelBatch:
    base_offset: int
    next_offset: int
    epoch: int
    data: bytes


class LogModel(RuleBasedStateMachine):
    @initialize(
        segment_bytes=st.integers(200, 3_000),
        index_interval_bytes=st.integers(0, 500),
        flush_interval_messages=st.none() | st.integers(1, 30),
        retention_bytes=st.none() | st.integers(0, 4_000),
        retention_ms=st.none() | st.integers(0, 2_000),
    )
    def start(self, segment_bytes, index_interval_bytes, flush_interval_messages, retention_bytes, retention_ms):
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            flush_interval_messages=flush_interval_messages,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
        )
        self.disk = self.make_disk()
        self.now_ms = 0
        self.log = PartitionLog.open(self.disk, self.directory, self.config, now_ms=self.now_ms)
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.empty_end = 0  # the log end offset when there are no batches
        self.flushed_at_least = 0
        self.epochs: list[tuple[int, int]] = []
        self.epoch = 0

    # ---- the disk ---------------------------------------------------------------------

    directory = DIRECTORY

    def make_disk(self) -> Disk:
        self.memory_disk = MemoryDisk()
        return self.memory_disk

    def power_loss(self, torn) -> None:
        self.memory_disk.crash(torn_writes=torn)

    # ---- model helpers ----------------------------------------------------------------

    @property
    def end(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.empty_end

    def visible(self) -> list[ModelBatch]:
        return [b for b in self.batches if b.next_offset > self.log_start]

    def boundaries(self) -> list[int]:
        return [b.base_offset for b in self.batches if b.base_offset >= self.log_start] + [self.end]

    def model_truncate_epochs_from_start(self) -> None:
        covering = [i for i, (_, start) in enumerate(self.epochs) if start <= self.log_start]
        if covering:
            i = covering[-1]
            self.epochs = [(self.epochs[i][0], max(self.epochs[i][1], self.log_start))] + self.epochs[i + 1 :]

    # ---- rules ------------------------------------------------------------------------

    @rule(
        records=st.integers(1, 5),
        body_size=st.integers(0, 300),
        epoch_change=st.sampled_from([0, 0, 0, 1, -1]),
        advance_ms=st.integers(0, 500),
    )
    def append(self, records, body_size, epoch_change, advance_ms):
        # Mostly the same epoch, sometimes a newer one, sometimes an older one (a follower
        # copying a leader whose log went another way).
        self.now_ms += advance_ms
        self.epoch = max(0, self.epoch + epoch_change)
        batch = make_batch(self.end, records, body_size=body_size, epoch=self.epoch, base_timestamp_ms=self.now_ms)
        header = self.log.append(batch, now_ms=self.now_ms)
        assert header.base_offset == self.end
        if not self.epochs or self.epoch != self.epochs[-1][0]:
            # Kafka's assign: entries at least as new, or starting here or later, go.
            self.epochs = [e for e in self.epochs if e[0] < self.epoch and e[1] < self.end] + [(self.epoch, self.end)]
        self.batches.append(ModelBatch(self.end, self.end + records, self.epoch, batch))

    @rule(data=st.data())
    def read(self, data):
        fetch = data.draw(st.integers(self.log_start, self.end), label="fetch_offset")
        max_bytes = data.draw(st.integers(0, 2_500), label="max_bytes")
        max_offset = data.draw(st.none() | st.integers(fetch, self.end + 3), label="max_offset")
        bound = self.end if max_offset is None else min(max_offset, self.end)
        expected, total = [], 0
        for b in self.batches:
            if b.next_offset <= fetch:
                continue
            if b.base_offset >= bound or (expected and total + len(b.data) > max_bytes):
                break
            expected.append(b.data)
            total += len(b.data)
        if fetch >= bound:
            expected = []
        assert [bytes(x) for x in self.log.read(fetch, max_bytes, max_offset=max_offset)] == expected

    @rule(data=st.data())
    def read_out_of_range(self, data):
        offset = data.draw(st.integers(self.end + 1, self.end + 100) | st.integers(-5, self.log_start - 1), label="offset")
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(offset, 100)

    @rule()
    def flush(self):
        self.log.flush()
        self.flushed_at_least = self.end

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.sampled_from(self.boundaries()), label="truncate_to")
        self.log.truncate_to(offset)
        if offset == self.end:
            return  # nothing to cut, and the epoch cache is left alone (as in Kafka)
        self.batches = [b for b in self.batches if b.base_offset < offset]
        if not self.batches:
            self.empty_end = offset
        self.flushed_at_least = min(self.flushed_at_least, offset)
        self.epochs = [e for e in self.epochs if e[1] < offset]

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.log_start, self.end), label="delete_records_before")
        self.log.delete_records_before(offset)
        self.log_start = max(self.log_start, offset)
        self.model_truncate_epochs_from_start()

    @rule(advance_ms=st.integers(0, 3_000), bound_by_hwm=st.booleans())
    def retention(self, advance_ms, bound_by_hwm):
        self.now_ms += advance_ms
        hwm = self.end if not bound_by_hwm else self.log.recovery_point
        before = self.log.log_start_offset
        bases = self.log.segment_base_offsets
        deleted = self.log.apply_retention(now_ms=self.now_ms, max_offset=hwm)
        after = self.log.log_start_offset
        assert after >= before
        if after != before:
            # Whole segments went: the new start is where a surviving segment begins.
            assert after in bases and after <= bases[-1] and after <= hwm
            assert deleted >= 1
        self.log_start = after
        self.model_truncate_epochs_from_start()
        assert self.log.segment_base_offsets[0] <= self.log_start

    @rule(gap=st.integers(0, 50))
    def truncate_fully(self, gap):
        offset = self.end + gap
        self.log.truncate_fully_and_start_at(offset, now_ms=self.now_ms)
        self.batches = []
        self.empty_end = self.log_start = self.flushed_at_least = offset
        self.epochs = []

    @rule(torn=st.none() | st.randoms(use_true_random=False))
    def crash_and_reopen(self, torn):
        self.check_crash(torn)

    def check_crash(self, torn) -> None:
        durable = self.log.recovery_point
        assert durable >= self.flushed_at_least
        self.power_loss(torn)
        self.log = PartitionLog.open(self.disk, self.directory, self.config, now_ms=self.now_ms)
        report = self.log.recovery
        if torn is None:
            # Exactly the fsynced prefix survives, cut cleanly at a batch boundary.
            assert report.reason is None and report.truncated_bytes == 0, report
            first = self.batches[0].base_offset if self.batches else self.empty_end
            recovered_end = max([b.next_offset for b in self.batches if b.next_offset <= durable], default=first)
        else:
            # A torn tail may keep some unsynced batches whole; the torn one is cut.
            assert (report.reason is None) == (report.truncated_bytes == 0), report
            recovered_end = None
        restarted_empty = any("restarted empty" in note for note in report.rebuilt)
        if restarted_empty:
            assert recovered_end is None or recovered_end < self.log_start
            self.batches, self.empty_end, self.epochs = [], self.log_start, []
        else:
            if recovered_end is None:
                recovered_end = self.log.log_end_offset
                assert recovered_end >= durable
            assert recovered_end >= self.log_start
            survivors = [b for b in self.batches if b.next_offset <= recovered_end]
            if not survivors and self.batches:
                self.empty_end = self.batches[0].base_offset
            self.batches = survivors
            assert self.end == recovered_end
        self.after_reopen()

    def after_reopen(self) -> None:
        # Recovery drops epoch entries that start at or past the recovered end, as Kafka's
        # truncateFromEnd(logEndOffset) does; if the cache then disagrees with the last
        # batch (a crash undid an older epoch's rewrite of its tail), it is rebuilt from the
        # batches; then it is trimmed to the log start.
        self.epochs = [e for e in self.epochs if e[1] < self.end]
        visible = self.visible()
        if visible:
            last = visible[-1]
            at = max(last.base_offset, self.log_start)
            cached = next((e for e, start in reversed(self.epochs) if start <= at), -1)
            if cached != last.epoch:
                changes = []
                for batch in visible:
                    if not changes or batch.epoch != changes[-1][0]:
                        changes.append((batch.epoch, batch.base_offset))
                self.epochs = replay_assignments(changes)
        self.model_truncate_epochs_from_start()
        self.flushed_at_least = self.end

    @rule()
    def restart_without_power_loss(self):
        # The old process is gone but the OS kept its writes: nothing is lost.
        self.log = PartitionLog.open(self.disk, self.directory, self.config, now_ms=self.now_ms)
        assert self.log.recovery.reason is None
        self.after_reopen()

    @rule()
    def clean_restart(self):
        self.log.close()
        self.log = PartitionLog.open(self.disk, self.directory, self.config, now_ms=self.now_ms)
        assert self.log.recovery.reason is None and self.log.recovery.truncated_bytes == 0
        assert self.log.recovery_point == self.end
        self.after_reopen()

    # ---- invariants -------------------------------------------------------------------

    @invariant()
    def matches_the_model(self):
        if not hasattr(self, "log"):
            return
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start, self.end)
        assert self.flushed_at_least <= log.recovery_point <= self.end
        assert log.epochs.entries() == self.epochs
        visible = self.visible()
        assert [bytes(b) for b in log.read(self.log_start, 10**9)] == [b.data for b in visible]
        assert [h.base_offset for h in log.batch_headers()] == [b.base_offset for b in visible]
        assert log.size_bytes >= sum(len(b.data) for b in visible)


LogModel.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestLogModel = LogModel.TestCase


class OsDiskLogModel(LogModel):
    """The same model on real files; a crash kills the "process" that held unsynced bytes."""

    def make_disk(self) -> Disk:
        if not hasattr(self, "root"):
            self.root = tempfile.mkdtemp(prefix="logquake-storage-model-")
            self.directory = str(Path(self.root) / "topic-3")
        self.os_disk = OsDisk(lose_unflushed_on_crash=True)
        return self.os_disk

    def power_loss(self, torn) -> None:
        self.os_disk.abandon()
        self.disk = self.make_disk()

    @rule()
    def crash_and_reopen(self):
        self.check_crash(None)

    def teardown(self):
        if hasattr(self, "root"):
            self.os_disk.abandon()
            shutil.rmtree(self.root)


OsDiskLogModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestOsDiskLogModel = OsDiskLogModel.TestCase
