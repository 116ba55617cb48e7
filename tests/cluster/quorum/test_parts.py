"""The quorum's pure parts: the election and commitment rules, the replicated log's epoch
lookups and truncation, the durable election state, the settings, and the checks."""

from __future__ import annotations

import random

import pytest

from cluster.quorum.checks import NodeView, check_quorum
from cluster.quorum.config import QuorumConfig, QuorumConfigError
from cluster.quorum.elections import log_is_up_to_date, majority_end_offset, next_high_watermark, randomized_timeout_ms
from cluster.quorum.log import ReplicatedLog
from cluster.quorum.quorum_state_store import CorruptQuorumStateError, ElectionState, QuorumStateStore
from cluster.quorum.snapshot import SnapshotId
from cluster.storage.disk import MemoryDisk


def test_log_freshness_compares_the_last_epoch_first() -> None:
    assert log_is_up_to_date(3, 5, 2, 100)
    assert not log_is_up_to_date(2, 100, 3, 5)
    assert log_is_up_to_date(3, 5, 3, 5)
    assert not log_is_up_to_date(3, 4, 3, 5)


def test_the_high_watermark_needs_a_record_of_the_current_epoch_unless_switched() -> None:
    assert majority_end_offset([10, 7, 3], 3) == 7
    assert majority_end_offset([10, 7, 3, 1, 0], 5) == 3
    # epoch started at offset 7: a majority holding up to 7 holds nothing of this epoch
    assert next_high_watermark(5, 7, 7, count_previous_epochs=False) == 5
    assert next_high_watermark(5, 8, 7, count_previous_epochs=False) == 8
    assert next_high_watermark(5, 7, 7, count_previous_epochs=True) == 7
    assert next_high_watermark(9, 8, 7, count_previous_epochs=False) == 9  # never backwards


def test_election_timeouts_are_randomized_between_one_and_two_timeouts() -> None:
    rng = random.Random(1)
    draws = [randomized_timeout_ms(1000, rng) for _ in range(200)]
    assert all(1000 <= d < 2000 for d in draws) and max(draws) - min(draws) > 500


def test_the_log_finds_where_an_epoch_ends_and_truncates_at_batch_boundaries() -> None:
    disk = MemoryDisk()
    log = ReplicatedLog(disk, "/q", 0)
    assert (log.last_epoch, log.end_offset) == (-1, 0)
    log.append_leader_change(1, 7, 0)          # 0
    log.append_records([b"a", b"b"], 1, 0)     # 1-2
    log.append_leader_change(3, 8, 0)          # 3
    log.append_records([b"c"], 3, 0)           # 4
    assert log.epoch_entries() == [(1, 0), (3, 3)]
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (1, 3)   # a hole: epoch 1 ends where 3 began
    assert log.end_offset_for_epoch(3) == (3, 5)
    assert log.end_offset_for_epoch(9) == (3, 5)
    assert log.end_offset_for_epoch(0) == (-1, 0)
    assert log.truncate_to(2) == 1                  # inside the batch at 1: cut the whole batch
    assert (log.last_epoch, log.end_offset) == (1, 1)
    log.close()
    reopened = ReplicatedLog(disk, "/q", 0)          # fsynced: a power loss keeps it
    disk.crash()
    assert reopened.end_offset == 1


def test_a_snapshot_moves_the_log_start_and_stands_in_for_the_records_below_it() -> None:
    disk = MemoryDisk()
    log = ReplicatedLog(disk, "/q", 0)
    log.append_leader_change(2, 1, 0)
    log.append_records([b"a"], 2, 0)
    log.append_records([b"b"], 2, 0)
    log.take_snapshot(SnapshotId(3, 2), b"image")
    assert (log.start_offset, log.end_offset, log.last_epoch) == (3, 3, 2)
    assert log.end_offset_for_epoch(2) == (2, 3)
    log.close()
    reopened = ReplicatedLog(disk, "/q", 0)
    assert (reopened.start_offset, reopened.snapshots.latest_id, reopened.snapshots.read(SnapshotId(3, 2))) == (3, SnapshotId(3, 2), b"image")


def test_the_election_state_is_durable_and_a_damaged_file_is_named() -> None:
    disk = MemoryDisk()
    store = QuorumStateStore(disk, "/q")
    assert store.read() == ElectionState(0, None, None)
    store.write(ElectionState(4, 2, None))
    disk.crash()
    assert QuorumStateStore(disk, "/q").read() == ElectionState(4, 2, None)
    disk.write_atomic("/q/quorum-state", b"{not json")
    with pytest.raises(CorruptQuorumStateError, match="quorum-state"):
        store.read()


def test_bad_settings_name_the_key() -> None:
    assert QuorumConfig.from_properties({}) == QuorumConfig()
    with pytest.raises(QuorumConfigError, match="controller.quorum.fetch.timeout.ms"):
        QuorumConfig.from_properties({"controller.quorum.fetch.timeout.ms": "soon"})
    with pytest.raises(QuorumConfigError, match="controller.quorum.vote.skip.log.check"):
        QuorumConfig.from_properties({"controller.quorum.vote.skip.log.check": "maybe"})


def view(node_id: int, log: list[tuple[int, int, str]], hwm: int = 0, **kwargs: object) -> NodeView:
    return NodeView(node_id, log, 0, hwm, **kwargs)  # type: ignore[arg-type]


def test_the_checks_accept_a_clean_run_and_flag_each_violation() -> None:
    good = [(0, 1, "lc1"), (1, 1, "a"), (2, 1, "b")]
    clean = [view(1, good, 3, transitions=[(1, "leader", 1)]), view(2, good, 3, transitions=[(1, "follower", 1)]),
             view(3, good[:2], 2)]
    assert check_quorum(clean, acknowledged=[(1, "a"), (2, "b")]) == []

    def kinds(nodes: list[NodeView], **kwargs: object) -> set[str]:
        return {v.kind for v in check_quorum(nodes, **kwargs)}  # type: ignore[arg-type]

    assert kinds([view(1, [], transitions=[(2, "leader", 1)]), view(2, [], transitions=[(2, "leader", 2)])]) == {"two-leaders-in-epoch"}
    assert kinds([view(1, [], transitions=[(3, "follower", 2), (2, "unattached", None)])]) == {"epoch-went-back"}
    assert kinds([view(1, [(0, 1, "x")]), view(2, [(0, 1, "y")])]) == {"epoch-two-histories"}
    # node 1 committed a at offset 1; at the end only it holds a there
    lost = [view(1, good, 3), view(2, [(0, 1, "lc1"), (1, 2, "z")], 0), view(3, [(0, 1, "lc1"), (1, 2, "z")], 0)]
    assert kinds(lost, acknowledged=[(1, "a")]) == {"committed-lost", "acknowledged-lost"}
    disagree = [view(1, good, 3), view(2, [(0, 1, "lc1"), (1, 2, "z")], 2), view(3, good, 0)]
    assert "committed-disagree" in kinds(disagree)
    # records below a node's log start count as held (its snapshot has them)
    snapshotted = [NodeView(1, [], 3, 3, committed=[(1, 1, "a")]), NodeView(2, [], 3, 3), view(3, [])]
    assert check_quorum(snapshotted) == []
    with pytest.raises(ValueError, match="distinct"):
        check_quorum([view(1, []), view(1, [])])
