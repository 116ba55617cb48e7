"""KIP-890 part 1 on one broker core: AddPartitionsToTxn v4 verify-only answers none only for
a partition in the producer's ongoing transaction, and the partition leader's verifier asks
the coordinator over the network (here the broker asks itself, as a single broker does) and
turns the answer into the Produce error."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint
from cluster.broker.partition import TopicPartition
from cluster.protocol.versions import ApiKey
from cluster.sim.network import SimNode
from tests.cluster.broker.core_driver import BROKER_ID, HOST, PORT, CoreDriver
from tests.cluster.txn.test_coordinator_core import TXN_ID, driver_with_topic
from tests.cluster.txn.txn_requests import TXN_VERSIONS, add_partitions, call, end_txn, init_txn_producer


def verify(driver: CoreDriver, producer_id: int, producer_epoch: int, partitions: list[int], transactional_id: str = TXN_ID) -> list[ErrorCode]:
    txn_cls = driver.request_class(ApiKey.ADD_PARTITIONS_TO_TXN, 4, "AddPartitionsToTxnTransaction")
    topic_cls = driver.request_class(ApiKey.ADD_PARTITIONS_TO_TXN, 4, "AddPartitionsToTxnTopic")
    body = call(driver, ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=(txn_cls(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=True,
        topics=(topic_cls(name="events", partitions=tuple(partitions)),)),))
    assert body.error_code is ErrorCode.none and [r.transactional_id for r in body.results_by_transaction] == [transactional_id]
    return [p.partition_error_code for t in body.results_by_transaction[0].topic_results for p in t.results_by_partition]


def test_verify_only_answers_none_only_for_partitions_of_the_ongoing_transaction() -> None:
    driver = driver_with_topic()
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    assert verify(driver, pid, epoch, [0]) == [ErrorCode.invalid_txn_state]  # no transaction yet
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0]}) == {("events", 0): ErrorCode.none}
    assert verify(driver, pid, epoch, [0, 1]) == [ErrorCode.none, ErrorCode.invalid_txn_state]
    assert verify(driver, pid, epoch + 1, [0]) == [ErrorCode.producer_fenced]
    assert verify(driver, pid + 1, epoch, [0]) == [ErrorCode.invalid_producer_id_mapping]
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    assert verify(driver, pid, epoch, [0]) == [ErrorCode.invalid_txn_state]  # ended: a late write must not reopen it
    assert driver.broker.txn.coordinator.txns[TXN_ID].partitions == {TopicPartition("events", 0)}  # verifying wrote nothing


def test_the_leaders_verifier_asks_the_coordinator_over_the_network() -> None:
    driver = driver_with_topic()
    # The broker's own address, served by the broker core, as the runtime serves it.
    driver.network.add_node(SimNode(Endpoint(BROKER_ID, HOST, PORT), driver.broker.handle, TXN_VERSIONS))
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    answers: list[ErrorCode] = []

    def ask(partition: int, producer_epoch: int = epoch, transactional_id: str = TXN_ID) -> ErrorCode:
        answers.clear()
        driver.broker.txn.verifier.verify(transactional_id, pid, producer_epoch, TopicPartition("events", partition), answers.append)
        driver.run_until(lambda: bool(answers), 5_000, "the verification answered")
        return answers[0]

    assert ask(0) is ErrorCode.invalid_txn_state
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0]}) == {("events", 0): ErrorCode.none}
    assert ask(0) is ErrorCode.none
    assert ask(1) is ErrorCode.invalid_txn_state
    assert ask(0, producer_epoch=epoch + 1) is ErrorCode.producer_fenced


def test_a_transactional_produce_opening_a_transaction_is_verified_first() -> None:
    from tests.cluster.broker.test_txn_log import txn_batch

    driver = driver_with_topic()
    driver.network.add_node(SimNode(Endpoint(BROKER_ID, HOST, PORT), driver.broker.handle, TXN_VERSIONS))
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch

    def send(values: list[bytes], sequence: int) -> ErrorCode:
        data_cls = driver.request_class(ApiKey.PRODUCE, 10, "PartitionProduceData")
        topic_cls = driver.request_class(ApiKey.PRODUCE, 10, "TopicProduceData")
        import datetime

        body = driver.call(ApiKey.PRODUCE, 10, transactional_id=TXN_ID, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
            topic_cls(name="events", partition_data=(data_cls(index=0, records=txn_batch(values, pid, epoch, sequence)),)),))
        return body.responses[0].partition_responses[0].error_code

    partition = driver.broker.partition("events", 0)
    assert partition is not None
    assert send([b"before-add"], 0) is ErrorCode.invalid_txn_state  # not added to a transaction
    assert partition.log_end_offset == 0
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0]}) == {("events", 0): ErrorCode.none}
    assert send([b"in-txn"], 0) is ErrorCode.none
    assert send([b"more"], 1) is ErrorCode.none  # the transaction is open here: no second verification
    assert end_txn(driver, TXN_ID, pid, epoch, committed=True) is ErrorCode.none
    coordinator = driver.broker.txn.coordinator
    driver.run_until(lambda: coordinator.txns[TXN_ID].state.name == "COMPLETE_COMMIT", 5_000, "the commit completed")
    end = partition.log_end_offset
    assert send([b"late"], 2) is ErrorCode.invalid_txn_state  # a late write must not open a hanging transaction
    assert partition.log_end_offset == end
