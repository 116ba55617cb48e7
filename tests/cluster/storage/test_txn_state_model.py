"""Property: whatever sequence of transactional appends, markers, rolls, flushes, truncations,
log start moves, clean reopens, crashes (with or without torn tails) and damaged `.txnindex`
or snapshot files a log goes through, the transaction state it keeps (read from its files and
replayed from its newest good snapshot) answers read_committed fetches as the oracle does:
session 8's rebuild of everything from the log alone."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.storage.disk import MemoryDisk
from cluster.storage.log import PartitionLog
from cluster.storage.producer_snapshot import SnapshotFiles
from tests.cluster.storage import txn_oracle
from tests.cluster.storage.txn_log_driver import Writer, open_log, table

DIR = "/data/t-0"
PRODUCERS = st.integers(1, 4)
# A burst of appends: (kind, producer id, transactional or committed).
APPENDS = st.lists(st.tuples(st.sampled_from(["data", "data", "marker", "plain"]), PRODUCERS, st.booleans()), min_size=1, max_size=8)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), APPENDS),
        st.tuples(st.just("append"), APPENDS),
        st.tuples(st.just("append"), APPENDS),
        st.tuples(st.just("roll")),
        st.tuples(st.just("flush")),
        st.tuples(st.just("truncate"), st.integers(0, 10**6)),
        st.tuples(st.just("delete_records"), st.integers(0, 10**6)),
        st.tuples(st.just("reopen")),
        # (seed, torn tails, flush first): a crash right after a flush keeps the whole log
        # but loses what was written unsynced beside it (pending index entries).
        st.tuples(st.just("crash"), st.integers(0, 2**32), st.booleans(), st.booleans()),
        st.tuples(st.just("crash"), st.integers(0, 2**32), st.booleans(), st.just(True)),
        st.tuples(st.just("tear_txnindex"), st.integers(0, 10**6)),
        st.tuples(st.just("corrupt_snapshot"), st.integers(0, 10**6)),
    ),
    min_size=10,
    max_size=40,
)


class Model:
    def __init__(self) -> None:
        self.disk = MemoryDisk()
        self.log = open_log(self.disk, DIR)
        self.writer = Writer(self.log)
        self.damaged = False  # a file was damaged since the last open

    def reopen(self, *, crash: bool, seed: int = 0, torn: bool = False) -> PartitionLog:
        if crash:
            self.disk.crash(torn_writes=random.Random(seed) if torn else None)
        else:
            self.log.close()
        self.log = open_log(self.disk, DIR)
        self.writer.log = self.log
        self.damaged = False
        return self.log

    def pick(self, n: int) -> int:
        """An offset in [log start, log end] chosen by n."""
        span = self.log.log_end_offset - self.log.log_start_offset
        return self.log.log_start_offset + n % (span + 1)

    def apply(self, op: tuple) -> None:
        kind, *args = op
        log = self.log
        if kind == "append":
            for what, producer_id, flag in args[0]:
                if what == "data":
                    self.writer.data(producer_id, transactional=flag or producer_id > 1)
                elif what == "marker":
                    self.writer.marker(producer_id, committed=flag)
                else:
                    self.writer.plain()
        elif kind == "roll":
            log.roll(now_ms=0)
        elif kind == "flush":
            log.flush()
        elif kind == "truncate":
            log.truncate_to(log.batch_boundary_at_or_below(self.pick(args[0])))
        elif kind == "delete_records":
            offset = self.pick(args[0])
            # Only where no transaction spans the new log start (see txn_oracle's docstring).
            if all(not first < offset <= end for first, end in txn_oracle.transaction_spans(log)):
                log.delete_records_before(offset)
        elif kind == "reopen":
            damaged = self.damaged
            reopened = self.reopen(crash=False)
            if not damaged:
                assert reopened.recovery.state_batches == 0, reopened.recovery
        elif kind == "crash":
            if args[2]:
                log.flush()
            self.reopen(crash=True, seed=args[0], torn=args[1])
        elif kind == "tear_txnindex":
            segment = log._segments[args[0] % log.segment_count]  # noqa: SLF001
            if self.disk.exists(segment.txn_index_path) and self.disk.file_size(segment.txn_index_path) >= 32:
                data = self.disk.read_all(segment.txn_index_path)
                self.disk.write_atomic(segment.txn_index_path, data[: len(data) - 1 - args[0] % 31])
                self.damaged = True
        elif kind == "corrupt_snapshot":
            snapshots = SnapshotFiles(self.disk, DIR)
            offsets = snapshots.offsets()
            if offsets:
                path = snapshots.path(offsets[args[0] % len(offsets)])
                data = bytearray(self.disk.read_all(path))
                data[args[0] % len(data)] ^= 1 << (args[0] % 8)
                self.disk.write_atomic(path, bytes(data))
                self.damaged = True
        else:
            raise AssertionError(f"unknown op {op}")

    def check(self) -> None:
        log = self.log
        oracle = txn_oracle.rebuild(log)
        assert txn_oracle.key(log.aborted_txns()) == txn_oracle.key(oracle.aborted)
        start, end = log.log_start_offset, log.log_end_offset
        for fetch in sorted({start, end, *range(start, end, max(1, (end - start) // 8))}):
            for upper in {fetch + 1, fetch + 5, (fetch + end) // 2 + 1, end}:
                got = txn_oracle.key(log.aborted_transactions(fetch, upper))
                assert got == txn_oracle.key(oracle.overlapping(fetch, upper)), (fetch, upper)
        state = table(log)
        assert state.last_stable_offset(end) == oracle.table.last_stable_offset(end)
        if start == 0:
            # Nothing below the log start was ever dropped: the whole producer state agrees.
            assert state.snapshot() == oracle.table.snapshot()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_the_kept_state_answers_as_the_oracle(ops: list[tuple]) -> None:
    model = Model()
    for op in ops:
        model.apply(op)
        if op[0] != "append":  # appends are checked by whatever follows them
            model.check()
    model.reopen(crash=False)
    model.check()
