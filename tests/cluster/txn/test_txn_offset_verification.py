"""KIP-890 part 1 for TxnOffsetCommit (Kafka's GroupCoordinator.handleTxnCommitOffsets): the
offsets batch that would open its producer's transaction on the group's __consumer_offsets
partition is verified with the transaction coordinator first and appended under the
verification guard. A commit of offsets for a transaction that does not hold the offsets
partition, or whose abort marker was written while the coordinator's answer was on its way,
is refused with INVALID_TXN_STATE and opens no transaction there (which would hold the
partition's last stable offset back, or be committed by a later transaction).

On one broker core, which is its own transaction and group coordinator; the verification's
answer is held on its way back as in test_verification_guard.py."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint
from cluster.broker.offsets_log import partition_for_group
from cluster.broker.partition import Partition
from cluster.broker.topics import OFFSETS_TOPIC
from cluster.protocol.versions import ApiKey
from cluster.sim.network import SimNode
from tests.cluster.broker.core_driver import BROKER_ID, HOST, PORT, CoreDriver, Pending
from tests.cluster.txn.test_coordinator_core import TXN_ID, driver_with_topic
from tests.cluster.txn.test_verification_guard import HeldVerifications
from tests.cluster.txn.txn_requests import TXN_VERSIONS, add_offsets, end_txn, init_txn_producer, txn_offset_commit

GROUP = "copier"


def group_driver(gated: bool = False, **extra: str) -> tuple[CoreDriver, Partition]:
    """A broker core coordinating TXN_ID and GROUP; its own address serves the verification
    and marker requests it sends itself at once, unless `gated` (the test then adds
    HeldVerifications)."""
    driver = driver_with_topic(**extra)
    if not gated:
        driver.network.add_node(SimNode(Endpoint(BROKER_ID, HOST, PORT), driver.broker.handle, TXN_VERSIONS))
    driver.await_coordinator(GROUP)
    offsets = driver.broker.topics.by_name(OFFSETS_TOPIC)
    assert offsets is not None
    partition = driver.broker.partition(OFFSETS_TOPIC, partition_for_group(GROUP, offsets.num_partitions))
    assert partition is not None
    return driver, partition


def send_txn_offset_commit(driver: CoreDriver, producer_id: int, producer_epoch: int, offset: int) -> Pending:
    """TxnOffsetCommit v3 of events-0, answered whenever the broker answers."""
    topic_cls = driver.request_class(ApiKey.TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestTopic")
    part_cls = driver.request_class(ApiKey.TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestPartition")
    return driver.send(ApiKey.TXN_OFFSET_COMMIT, 3, transactional_id=TXN_ID, group_id=GROUP, producer_id=producer_id,
                       producer_epoch=producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
                       topics=(topic_cls(name="events", partitions=(part_cls(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                                                                committed_metadata=""),)),))


def commit_error(pending: Pending) -> Any:
    return pending.body.topics[0].partitions[0].error_code


def test_add_offsets_then_txn_offset_commit_is_verified_and_appended() -> None:
    driver, partition = group_driver()
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    assert add_offsets(driver, TXN_ID, pid, epoch, GROUP) is ErrorCode.none
    end = partition.log_end_offset
    assert txn_offset_commit(driver, TXN_ID, pid, epoch, GROUP, {("events", 0): 5}) == {("events", 0): ErrorCode.none}
    assert partition.log_end_offset == end + 1 and partition.producers.has_ongoing_txn(pid)
    assert partition.producers.verification_guard(pid) is None  # the write used the guard up
    # A second commit continues the open transaction: no verification needed, appended.
    assert txn_offset_commit(driver, TXN_ID, pid, epoch, GROUP, {("events", 0): 6}) == {("events", 0): ErrorCode.none}
    assert partition.log_end_offset == end + 2
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    driver.run_until(lambda: not partition.producers.has_ongoing_txn(pid), 5_000, "the commit marker written")
    driver.run_until(lambda: partition.last_stable_offset == partition.log_end_offset, 5_000, "the offsets partition stable")


def test_a_commit_for_a_transaction_without_the_offsets_partition_is_refused() -> None:
    driver, partition = group_driver()
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    end = partition.log_end_offset
    # No AddOffsetsToTxn: the coordinator does not have the offsets partition in a transaction.
    assert txn_offset_commit(driver, TXN_ID, pid, epoch, GROUP, {("events", 0): 5}) == {("events", 0): ErrorCode.invalid_txn_state}
    assert partition.log_end_offset == end and not partition.producers.has_ongoing_txn(pid)
    assert partition.last_stable_offset == partition.high_watermark == end


def test_a_commit_verified_before_the_abort_but_answered_after_it_is_refused() -> None:
    driver, partition = group_driver(gated=True)
    gate = HeldVerifications(driver)
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    coordinator = driver.broker.txn.coordinator
    assert add_offsets(driver, TXN_ID, pid, epoch, GROUP) is ErrorCode.none

    late = send_txn_offset_commit(driver, pid, epoch, 5)
    driver.run_until(lambda: bool(gate.held), 5_000, "the coordinator answered the verification")
    assert not late.done
    # The producer times out and aborts (same epoch): the abort marker reaches the offsets
    # partition before the verification's answer reaches its leader.
    assert end_txn(driver, TXN_ID, pid, epoch, committed=False) is ErrorCode.none
    driver.run_until(lambda: coordinator.txns[TXN_ID].state.name == "COMPLETE_ABORT", 5_000, "the abort completed")
    end = partition.log_end_offset

    gate.release()  # none: the partition was in the transaction when asked
    driver.run_until(lambda: late.done, 5_000, "the late TxnOffsetCommit answered")
    assert commit_error(late) is ErrorCode.invalid_txn_state
    assert partition.log_end_offset == end and not partition.producers.has_ongoing_txn(pid)
    driver.run_until(lambda: partition.last_stable_offset == partition.high_watermark == end, 5_000, "no hanging transaction")

    # The next transaction's commit verifies under a new guard and is appended.
    assert add_offsets(driver, TXN_ID, pid, epoch, GROUP) is ErrorCode.none
    fresh = send_txn_offset_commit(driver, pid, epoch, 7)
    driver.run_until(lambda: bool(gate.held), 5_000, "the coordinator answered the verification")
    gate.release()
    driver.run_until(lambda: fresh.done, 5_000, "the TxnOffsetCommit answered")
    assert commit_error(fresh) is ErrorCode.none
    assert partition.log_end_offset == end + 1 and partition.producers.has_ongoing_txn(pid)


def test_without_verification_a_commit_opens_a_transaction_nobody_verified() -> None:
    # transaction.partition.verification.enable=false: the unsafe switch's behaviour, the
    # commit is appended although no coordinator transaction holds the offsets partition.
    driver, partition = group_driver(**{"transaction.partition.verification.enable": "false"})
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    end = partition.log_end_offset
    assert txn_offset_commit(driver, TXN_ID, pid, epoch, GROUP, {("events", 0): 5}) == {("events", 0): ErrorCode.none}
    assert partition.log_end_offset == end + 1 and partition.producers.has_ongoing_txn(pid)
    assert partition.producers.verification_guard(pid) is None
    assert partition.last_stable_offset == end  # hanging: held back by a transaction no one ends
