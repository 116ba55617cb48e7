"""TxnOffsetCommit on one broker core: the offsets are pending until the transaction's
marker reaches the group's offsets partition (Broker.on_txn_marker, which the log side calls
when it appends a marker), visible on commit and dropped on abort; KIP-447's member and
generation checks; a coordinator reloading the partition rebuilds the pending offsets from
the transactional batches and applies the control batches it finds."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from cluster.broker.offsets_log import partition_for_group
from cluster.broker.partition import TopicPartition
from cluster.broker.topics import OFFSETS_TOPIC
from cluster.protocol.records import Record, build_batch
from cluster.storage.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL
from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import create_topic
from tests.cluster.broker.test_groups import fetch_offset, join, sync
from tests.cluster.txn.txn_requests import TXN_PROPERTIES, txn_offset_commit

GROUP = "g"
PID, EPOCH = 4000, 3


def offsets_tp(driver: CoreDriver) -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, partition_for_group(GROUP, 3))


def driver_with_group(**extra: str) -> CoreDriver:
    # These commits belong to no coordinator transaction (the markers are written by hand), so
    # KIP-890's verification is off; test_txn_offset_verification.py covers it.
    driver = CoreDriver({**TXN_PROPERTIES, "transaction.partition.verification.enable": "false", **extra})
    assert create_topic(driver, "t", 1).topics[0].error_code is ErrorCode.none
    driver.await_coordinator(GROUP)
    return driver


def append_marker(driver: CoreDriver, tp: TopicPartition, producer_id: int, producer_epoch: int, committed: bool) -> None:
    """What WriteTxnMarkers appends (Kafka's control batch: key = version 0, type 0 abort /
    1 commit), then the hook the log side calls for it."""
    record = Record(struct.pack(">hh", 0, 1 if committed else 0), struct.pack(">hi", 0, 0))
    done: list[ErrorCode] = []
    driver.broker.replicas.append_internal(
        tp, lambda base, epoch: build_batch([record], base_offset=base, timestamp_ms=driver.clock.wall_ms(), partition_leader_epoch=epoch,
                                            attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL, producer_id=producer_id, producer_epoch=producer_epoch),
        driver.clock.wall_ms(), done.append)
    driver.run_until(lambda: bool(done), 5_000, "the marker committed")
    assert done == [ErrorCode.none]
    driver.broker.on_txn_marker(tp, producer_id, producer_epoch, committed)


def test_offsets_become_visible_on_the_commit_marker_and_are_dropped_on_abort() -> None:
    driver = driver_with_group()
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 42}) == {("t", 0): ErrorCode.none}
    assert fetch_offset(driver, group=GROUP) == -1  # pending
    assert driver.broker.txn_offsets.is_pending(GROUP, "t", 0)
    append_marker(driver, offsets_tp(driver), PID, EPOCH, committed=True)
    assert fetch_offset(driver, group=GROUP) == 42
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 50}) == {("t", 0): ErrorCode.none}
    append_marker(driver, offsets_tp(driver), PID, EPOCH, committed=False)
    assert fetch_offset(driver, group=GROUP) == 42
    assert not driver.broker.txn_offsets.is_pending(GROUP, "t", 0)


def test_a_reloaded_coordinator_rebuilds_pending_offsets_and_applies_the_markers_in_its_log() -> None:
    driver = driver_with_group()
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 7}) == {("t", 0): ErrorCode.none}
    append_marker(driver, offsets_tp(driver), PID, EPOCH, committed=True)
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 9}) == {("t", 0): ErrorCode.none}
    append_marker(driver, offsets_tp(driver), PID, EPOCH, committed=False)
    assert txn_offset_commit(driver, "tx2", PID + 1, 0, GROUP, {("t", 0): 11}) == {("t", 0): ErrorCode.none}
    driver.restart()
    driver.await_coordinator(GROUP)
    assert fetch_offset(driver, group=GROUP) == 7  # 9 aborted, 11 still pending
    assert driver.broker.txn_offsets.is_pending(GROUP, "t", 0)
    append_marker(driver, offsets_tp(driver), PID + 1, 0, committed=True)
    assert fetch_offset(driver, group=GROUP) == 11


def test_kip447_member_and_generation_checks() -> None:
    driver = driver_with_group()
    joined = join(driver, group=GROUP).body
    assert joined.error_code is ErrorCode.none
    member, generation = joined.member_id, joined.generation_id
    assert sync(driver, member, generation, {member: b""}, group=GROUP).body.error_code is ErrorCode.none
    commit = lambda **kw: txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 5}, **kw)[("t", 0)]  # noqa: E731
    assert commit(generation_id=generation, member_id=member) is ErrorCode.none
    assert commit(generation_id=generation + 1, member_id=member) is ErrorCode.illegal_generation
    assert commit(generation_id=generation, member_id="someone-else") is ErrorCode.unknown_member_id
    assert commit() is ErrorCode.none  # no member or generation given: not checked (producers before KIP-447)
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("nope", 0): 5}) == {("nope", 0): ErrorCode.unknown_topic_or_partition}


def test_without_the_kip447_checks_a_stale_member_commits() -> None:
    # transaction.offset.commit.skip.generation.check (unsafe): the checks above are skipped,
    # for a group the coordinator knows and one it does not.
    driver = driver_with_group(**{"transaction.offset.commit.skip.generation.check": "true"})
    joined = join(driver, group=GROUP).body
    member, generation = joined.member_id, joined.generation_id
    assert sync(driver, member, generation, {member: b""}, group=GROUP).body.error_code is ErrorCode.none
    stale = txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 5}, generation_id=generation + 1, member_id="gone")
    assert stale == {("t", 0): ErrorCode.none}
    unknown = txn_offset_commit(driver, "tx", PID, EPOCH, "no-such-group", {("t", 0): 5}, generation_id=7, member_id="gone")
    assert unknown == {("t", 0): ErrorCode.none}


def test_a_zombie_commit_under_an_older_epoch_is_refused() -> None:
    driver = driver_with_group()
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 5}) == {("t", 0): ErrorCode.none}
    # The new instance's coordinator aborted the old transaction under the next epoch.
    append_marker(driver, offsets_tp(driver), PID, EPOCH + 1, committed=False)
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 6}) == {("t", 0): ErrorCode.producer_fenced}
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 6}, version=2) == {("t", 0): ErrorCode.invalid_producer_epoch}
    assert txn_offset_commit(driver, "tx", PID, EPOCH + 1, GROUP, {("t", 0): 8}) == {("t", 0): ErrorCode.none}
    append_marker(driver, offsets_tp(driver), PID, EPOCH + 1, committed=True)
    assert fetch_offset(driver, group=GROUP) == 8
    driver.restart()
    driver.await_coordinator(GROUP)
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 6}) == {("t", 0): ErrorCode.producer_fenced}  # rebuilt by the replay


def test_offset_fetch_with_require_stable_waits_for_the_marker() -> None:
    from cluster.protocol.versions import ApiKey

    driver = driver_with_group()
    assert txn_offset_commit(driver, "tx", PID, EPOCH, GROUP, {("t", 0): 3}) == {("t", 0): ErrorCode.none}

    def fetch(version: int, require_stable: bool) -> tuple[ErrorCode, int]:
        if version >= 8:
            group_cls = driver.request_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestGroup")
            topics_cls = driver.request_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestTopics")
            body = driver.call(ApiKey.OFFSET_FETCH, version, require_stable=require_stable, groups=(
                group_cls(group_id=GROUP, member_id=None, member_epoch=-1, topics=(topics_cls(name="t", partition_indexes=(0,)),)),))
            p = body.groups[0].topics[0].partitions[0]
        else:
            topic_cls = driver.request_class(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestTopic")
            body = driver.call(ApiKey.OFFSET_FETCH, version, group_id=GROUP, require_stable=require_stable,
                               topics=(topic_cls(name="t", partition_indexes=(0,)),))
            p = body.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    for version in (7, 9):
        assert fetch(version, require_stable=True) == (ErrorCode.unstable_offset_commit, -1)
        assert fetch(version, require_stable=False) == (ErrorCode.none, -1)
    append_marker(driver, offsets_tp(driver), PID, EPOCH, committed=True)
    assert fetch(9, require_stable=True) == (ErrorCode.none, 3)
