"""Fencing an ongoing transaction as Kafka does (TransactionCoordinator, TransactionMetadata):
PrepareEpochFence is the pending state while the fencing abort is written, never a record; the
record is PrepareAbort under the bumped epoch with no last epoch. And what Kafka answers, for
the EndTxn versions served here (0-3, transaction version 1), to the producer whose transaction
the timeout aborted: fenced, whether it commits, aborts or bumps its epoch (KIP-360)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.broker.txn.metadata import NO_PRODUCER_EPOCH, IllegalTransition, TxnMetadata, TxnState
from tests.cluster.txn.test_coordinator_core import TXN_ID, driver_with_topic, state_log
from tests.cluster.txn.test_markers_core import MarkerLeader, begin, state_of
from tests.cluster.txn.txn_requests import add_partitions, end_txn, init_txn_producer


def test_prepare_epoch_fence_is_entered_from_ongoing_only_and_leads_to_prepare_abort_only() -> None:
    ongoing = TxnMetadata("t", 7, 3, 60_000, TxnState.ONGOING)
    fence = ongoing.transition(TxnState.PREPARE_EPOCH_FENCE, 1, producer_epoch=4, last_producer_epoch=NO_PRODUCER_EPOCH)
    assert fence.transition(TxnState.PREPARE_ABORT, 2).state is TxnState.PREPARE_ABORT
    for state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT, TxnState.EMPTY, TxnState.ONGOING):
        with pytest.raises(IllegalTransition):
            fence.transition(state, 2)
    for before in (TxnState.EMPTY, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        with pytest.raises(IllegalTransition):
            TxnMetadata("t", 7, 3, 60_000, before).transition(TxnState.PREPARE_EPOCH_FENCE, 1)
    assert TxnState.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"


def test_a_new_producer_instance_fences_with_a_prepare_abort_record_under_the_bumped_epoch() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    pid, epoch = begin(driver)
    assert init_txn_producer(driver, TXN_ID).error_code is ErrorCode.concurrent_transactions
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_ABORT, 5_000, "the fencing abort completed")
    marker = leader.requests[-1].markers[0]
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result) == (pid, epoch + 1, False)
    # The client's retry gets the epoch after the fence's.
    again = init_txn_producer(driver, TXN_ID)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.none, pid, epoch + 2)
    assert state_log(driver, TXN_ID) == [(TxnState.EMPTY, pid, 0), (TxnState.ONGOING, pid, 0), (TxnState.PREPARE_ABORT, pid, 1),
                                         (TxnState.COMPLETE_ABORT, pid, 1), (TxnState.EMPTY, pid, 2)]
    records = driver.broker.txn.coordinator.txns
    assert records[TXN_ID].last_producer_epoch == NO_PRODUCER_EPOCH and not records[TXN_ID].failed_epoch_fence


def test_the_producer_whose_transaction_timed_out_is_fenced_whatever_it_sends_next() -> None:
    driver = driver_with_topic(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    MarkerLeader(driver)
    init = init_txn_producer(driver, TXN_ID, timeout_ms=1000)
    pid = init.producer_id
    begin_epoch = init.producer_epoch
    assert add_partitions(driver, TXN_ID, pid, begin_epoch, {"events": [0]}) == {("events", 0): ErrorCode.none}
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_ABORT, 5_000, "the timed-out transaction aborted")
    txn = driver.broker.txn.coordinator.txns[TXN_ID]
    assert (txn.producer_epoch, txn.last_producer_epoch) == (begin_epoch + 1, NO_PRODUCER_EPOCH)
    # Transaction version 1 (EndTxn 0-3): the epoch must be the coordinator's, so a commit and
    # an abort alike are PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before KIP-588's v2).
    for committed in (True, False):
        assert end_txn(driver, TXN_ID, pid, begin_epoch, committed=committed) is ErrorCode.producer_fenced
        assert end_txn(driver, TXN_ID, pid, begin_epoch, committed=committed, version=1) is ErrorCode.invalid_producer_epoch
    # Its KIP-360 epoch bump is refused too: the fence left no last epoch to match.
    bump = init_txn_producer(driver, TXN_ID, producer_id=pid, producer_epoch=begin_epoch)
    assert bump.error_code is ErrorCode.producer_fenced
    assert init_txn_producer(driver, TXN_ID, producer_id=pid, producer_epoch=begin_epoch, version=3).error_code is ErrorCode.invalid_producer_epoch
    # The abort's own epoch gets the answer of a retried abort; nothing else changed.
    assert end_txn(driver, TXN_ID, pid, begin_epoch + 1, committed=False) is ErrorCode.none
    assert end_txn(driver, TXN_ID, pid, begin_epoch + 1, committed=True) is ErrorCode.invalid_txn_state
    assert [s for s, _, _ in state_log(driver, TXN_ID)][-2:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
    # A new instance of the producer starts over with the next epoch.
    fresh = init_txn_producer(driver, TXN_ID)
    assert (fresh.error_code, fresh.producer_epoch) == (ErrorCode.none, begin_epoch + 2)
