"""What the coordinator sends once a transaction is prepared: WriteTxnMarkers v1 to the
leader of each of its partitions, with the producer id and epoch, the result and the
coordinator epoch; CompleteCommit/CompleteAbort only once every partition has its marker;
resent after a retriable partition error (only for that partition), abandoned when the
partition says this coordinator is fenced, and resent by a restarted coordinator that loads
the prepared transaction.

The partition side of WriteTxnMarkers is the log side's (issue #14, helper T1); until it is
in the tree these tests answer the marker requests at the broker's address themselves, as
a partition leader would, and record them."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import ClientInfo, Endpoint, Reply, Response
from cluster.broker.topics import TRANSACTION_STATE_TOPIC
from cluster.broker.txn.metadata import TxnState
from cluster.broker.txn.state_log import partition_for_transactional_id
from cluster.protocol.codec import Request, build, encode_response, payload_class, response_class
from cluster.protocol.versions import ApiKey, VersionRange
from cluster.sim.network import SimNode
from tests.cluster.broker.core_driver import BROKER_ID, HOST, PORT, CoreDriver
from tests.cluster.txn.test_coordinator_core import TXN_ID, driver_with_topic, state_log
from tests.cluster.txn.txn_requests import add_partitions, await_txn_coordinator, end_txn, init_txn_producer


class MarkerLeader:
    """Answers WriteTxnMarkers at the broker's address: each partition's error from `errors`
    (consumed per request), none by default."""

    def __init__(self, driver: CoreDriver) -> None:
        self.requests: list[Any] = []
        self.errors: list[dict[int, ErrorCode]] = []
        self.answering = True
        driver.network.add_node(SimNode(Endpoint(BROKER_ID, HOST, PORT), self.handle, {ApiKey.WRITE_TXN_MARKERS: VersionRange(1, 1)}))

    def handle(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        if not self.answering:
            return  # a leader that never answers: the request times out
        self.requests.append(request.body)
        errors = self.errors.pop(0) if self.errors else {}
        version = request.api_version
        marker_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerResult")
        topic_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerTopicResult")
        part_cls = payload_class(ApiKey.WRITE_TXN_MARKERS, version, "WritableTxnMarkerPartitionResult")
        body = build(response_class(ApiKey.WRITE_TXN_MARKERS, version), markers=tuple(
            build(marker_cls, producer_id=m.producer_id, topics=tuple(
                build(topic_cls, name=t.name, partitions=tuple(build(part_cls, partition_index=p, error_code=errors.get(p, ErrorCode.none))
                                                               for p in t.partition_indexes)) for t in m.topics)) for m in request.body.markers))
        reply(Response([encode_response(request.api_key, version, request.correlation_id, body)]))

    def partitions(self, index: int) -> set[int]:
        return {p for m in self.requests[index].markers for t in m.topics for p in t.partition_indexes}


def begin(driver: CoreDriver) -> tuple[int, int]:
    init = init_txn_producer(driver, TXN_ID)
    assert add_partitions(driver, TXN_ID, init.producer_id, init.producer_epoch, {"events": [0, 1]}) == {
        ("events", 0): ErrorCode.none, ("events", 1): ErrorCode.none}
    return init.producer_id, init.producer_epoch


def state_of(driver: CoreDriver) -> TxnState:
    return driver.broker.txn.coordinator.txns[TXN_ID].state


def test_commit_sends_markers_to_every_partition_then_writes_complete_commit() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_COMMIT, 5_000, "the commit completed")
    marker = leader.requests[0].markers[0]
    state_partition = driver.broker.partition(TRANSACTION_STATE_TOPIC, partition_for_transactional_id(TXN_ID, 3))
    assert state_partition is not None
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == (
        pid, epoch, True, state_partition.leader_epoch)
    assert leader.partitions(0) == {0, 1} and len(leader.requests) == 1
    assert [s for s, _, _ in state_log(driver, TXN_ID)][-2:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert driver.broker.txn.coordinator.txns[TXN_ID].partitions == frozenset()
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none  # a retried EndTxn
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [1]}) == {("events", 1): ErrorCode.none}  # the next transaction
    assert end_txn(driver, TXN_ID, pid, epoch, committed=False) is ErrorCode.none
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_ABORT, 5_000, "the abort completed")
    assert leader.requests[-1].markers[0].transaction_result is False and leader.partitions(len(leader.requests) - 1) == {1}


def test_a_retriable_partition_error_resends_that_partitions_marker_only() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    leader.errors = [{1: ErrorCode.not_leader_or_follower}]
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_COMMIT, 5_000, "the commit completed")
    assert [leader.partitions(i) for i in range(len(leader.requests))] == [{0, 1}, {1}]


def test_a_fenced_coordinator_stops_sending_and_leaves_the_transaction_prepared() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    leader.errors = [{0: ErrorCode.transaction_coordinator_fenced}]
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    driver.scheduler.advance(2_000)
    assert state_of(driver) is TxnState.PREPARE_COMMIT and len(leader.requests) == 1


def test_a_restarted_coordinator_resends_the_markers_of_a_prepared_transaction() -> None:
    driver = driver_with_topic()
    leader = MarkerLeader(driver)
    leader.answering = False  # the markers never arrive before the coordinator goes down
    pid, epoch = begin(driver)
    assert end_txn(driver, TXN_ID, pid, epoch, committed=False) is ErrorCode.none
    driver.scheduler.advance(500)
    assert state_of(driver) is TxnState.PREPARE_ABORT
    assert leader.requests == []
    leader.answering = True  # from now on; the old coordinator's unanswered request dies with it
    driver.restart()
    await_txn_coordinator(driver, TXN_ID)
    driver.run_until(lambda: state_of(driver) is TxnState.COMPLETE_ABORT, 10_000, "the resumed abort completed")
    marker = leader.requests[-1].markers[0]
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result) == (pid, epoch, False)
    # (Its coordinator epoch is the leader epoch it loaded the partition in: the restarted
    # broker leads again in the epoch its metadata log ends with before the controller
    # fences and re-elects it.)
    assert [s for s, _, _ in state_log(driver, TXN_ID)][-2:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
