"""KIP-890 part 1's verification guard (Kafka's VerificationGuard): a transactional batch that
would open its producer's transaction on a partition is appended only under the guard its
verification started with, and any transactional write of the producer there (its first data
batch, or a marker) drops the guard. So a verification answered while the transaction was
ongoing, but arriving after its abort marker was written, cannot open a transaction the
coordinator has already ended (what the verification hunt found: G1a on the safe cluster,
tests/harness/test_sim_txn_switches.py).

First the producer-state rules on their own, then the race on one broker core: the
coordinator's answer is held on its way back (as a lost and retransmitted message holds it),
the transaction is aborted meanwhile, and the answer then arrives."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Endpoint, Response
from cluster.broker.producer_state import ProducerStateTable
from cluster.protocol.records import Record, build_batch, build_control_batch
from cluster.protocol.versions import ApiKey
from cluster.sim.network import SimNode
from cluster.storage.batch import ATTR_TRANSACTIONAL, parse_header
from tests.cluster.broker.core_driver import BROKER_ID, HOST, PORT, CoreDriver, Pending
from tests.cluster.txn.test_coordinator_core import TXN_ID, driver_with_topic
from tests.cluster.txn.txn_requests import TXN_VERSIONS, add_partitions, end_txn, init_txn_producer

PRODUCER_ID = 7
EPOCH = 0
TIMESTAMP_MS = 1_700_000_000_000


def data_batch(base_offset: int, sequence: int, epoch: int = EPOCH) -> bytes:
    return build_batch([Record(b"k", b"v")], base_offset=base_offset, timestamp_ms=TIMESTAMP_MS, attributes=ATTR_TRANSACTIONAL,
                       producer_id=PRODUCER_ID, producer_epoch=epoch, base_sequence=sequence)


def marker(base_offset: int, committed: bool, epoch: int = EPOCH) -> bytes:
    return build_control_batch(committed=committed, producer_id=PRODUCER_ID, producer_epoch=epoch, coordinator_epoch=0,
                               base_offset=base_offset, timestamp_ms=TIMESTAMP_MS)


def write(table: ProducerStateTable, batch: bytes) -> None:
    """What the log does with an appended (or replicated) batch."""
    header = parse_header(batch)
    table.replay(header, batch if header.is_control else None)


def test_an_append_presents_the_current_guard_and_a_marker_or_write_drops_it() -> None:
    table = ProducerStateTable()
    opening = parse_header(data_batch(0, 0))
    assert table.verification_guard(PRODUCER_ID) is None
    assert table.check_verified(opening, None) is not None  # never verified: refused

    old = table.start_verification(PRODUCER_ID)
    assert table.start_verification(PRODUCER_ID) is old  # a second verification before any write shares it
    assert table.check_verified(opening, old) is None  # the current guard: accepted

    # The abort marker lands before the verified append: the guard is gone, the append refused.
    write(table, marker(0, committed=False))
    refused = table.check_verified(opening, old)
    assert refused is not None and refused.error is ErrorCode.invalid_txn_state, refused
    assert "guard" in refused.message and not table.has_ongoing_txn(PRODUCER_ID)

    # The next transaction's verification starts a new guard; the stale one stays refused
    # (the ABA case: same producer and epoch, a different transaction).
    new = table.start_verification(PRODUCER_ID)
    assert new is not old and new != old
    assert table.check_verified(opening, old) is not None
    assert table.check_verified(opening, new) is None

    # Its first write drops the guard too; the open transaction carries the next batches.
    write(table, data_batch(1, 0))
    assert table.verification_guard(PRODUCER_ID) is None and table.has_ongoing_txn(PRODUCER_ID)
    assert table.check_verified(parse_header(data_batch(2, 1)), None) is None

    # A non-transactional or control batch is not the guard's business.
    plain = parse_header(build_batch([Record(b"k", b"v")], base_offset=0, timestamp_ms=TIMESTAMP_MS, producer_id=8, producer_epoch=0,
                                     base_sequence=0))
    assert table.check_verified(plain, None) is None


def test_a_replayed_marker_drops_the_guard_and_a_rebuilt_table_has_none() -> None:
    # A follower replays the leader's marker through the same table: a guard it held from
    # when it led is dropped as well.
    follower = ProducerStateTable()
    guard = follower.start_verification(PRODUCER_ID)
    follower.replay(parse_header(marker(0, committed=True)), marker(0, committed=True))
    assert follower.verification_guard(PRODUCER_ID) is None
    assert follower.check_verified(parse_header(data_batch(1, 0)), guard) is not None
    # Guards are in memory only: a restored table starts without any.
    other = follower.start_verification(PRODUCER_ID + 1)
    restored = ProducerStateTable()
    restored.restore(follower.snapshot())
    assert restored.verification_guard(PRODUCER_ID + 1) is None
    follower.clear()
    assert follower.verification_guard(PRODUCER_ID + 1) is None and other is not None


class HeldVerifications:
    """The broker's own address (a single broker is its own coordinator), serving every
    request at once but holding the answers to verify-only AddPartitionsToTxn v4 until
    `release`: the coordinator decides when asked, the leader learns it later."""

    def __init__(self, driver: CoreDriver) -> None:
        self.driver = driver
        self.held: list[tuple[Any, Response]] = []
        driver.network.add_node(SimNode(Endpoint(BROKER_ID, HOST, PORT), self._handle, TXN_VERSIONS))

    def _handle(self, request: Any, client: Any, reply: Any) -> None:
        if request.api_key == ApiKey.ADD_PARTITIONS_TO_TXN and request.api_version == 4:
            self.driver.broker.handle(request, client, lambda response: self.held.append((reply, response)))
        else:
            self.driver.broker.handle(request, client, reply)

    def release(self) -> None:
        held, self.held = self.held, []
        for reply, response in held:
            reply(response)


def send_produce(driver: CoreDriver, records: bytes) -> Pending:
    data_cls = driver.request_class(ApiKey.PRODUCE, 10, "PartitionProduceData")
    topic_cls = driver.request_class(ApiKey.PRODUCE, 10, "TopicProduceData")
    return driver.send(ApiKey.PRODUCE, 10, transactional_id=TXN_ID, acks=-1, timeout=datetime.timedelta(seconds=30),
                       topic_data=(topic_cls(name="events", partition_data=(data_cls(index=0, records=records),)),))


def produce_error(pending: Pending) -> ErrorCode:
    return pending.body.responses[0].partition_responses[0].error_code


def txn_records(producer_id: int, epoch: int, sequence: int, value: bytes) -> bytes:
    return build_batch([Record(b"k", value)], base_offset=0, timestamp_ms=TIMESTAMP_MS, attributes=ATTR_TRANSACTIONAL,
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def test_a_verification_answered_after_the_abort_marker_is_refused_and_a_new_one_accepted() -> None:
    driver = driver_with_topic()
    gate = HeldVerifications(driver)
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    partition = driver.broker.partition("events", 0)
    assert partition is not None
    coordinator = driver.broker.txn.coordinator

    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0]}) == {("events", 0): ErrorCode.none}
    late = send_produce(driver, txn_records(pid, epoch, 0, b"aborted"))
    driver.run_until(lambda: bool(gate.held), 5_000, "the coordinator answered the verification")
    assert not late.done
    # The producer gives up on the send and aborts; the coordinator writes the abort marker.
    assert end_txn(driver, TXN_ID, pid, epoch, committed=False) is ErrorCode.none
    driver.run_until(lambda: coordinator.txns[TXN_ID].state.name == "COMPLETE_ABORT", 5_000, "the abort completed")
    end = partition.log_end_offset
    assert end == 1  # the marker only

    gate.release()  # the answer (none: the partition was in the transaction) arrives now
    driver.run_until(lambda: late.done, 5_000, "the late Produce answered")
    assert produce_error(late) is ErrorCode.invalid_txn_state
    assert partition.log_end_offset == end and not partition.producers.has_ongoing_txn(pid)
    assert partition.last_stable_offset == partition.high_watermark == end  # no hanging transaction

    # The next transaction verifies under a new guard and is appended.
    assert add_partitions(driver, TXN_ID, pid, epoch, {"events": [0]}) == {("events", 0): ErrorCode.none}
    fresh = send_produce(driver, txn_records(pid, epoch, 0, b"committed"))
    driver.run_until(lambda: bool(gate.held), 5_000, "the coordinator answered the verification")
    gate.release()
    driver.run_until(lambda: fresh.done, 5_000, "the Produce answered")
    assert produce_error(fresh) is ErrorCode.none
    assert partition.log_end_offset == end + 1 and partition.producers.has_ongoing_txn(pid)


def test_without_verification_the_switch_leaves_no_guard_to_check() -> None:
    # transaction.partition.verification.enable=false: no verification, no guard; the batch
    # is appended whatever ended before it (the unsafe switch's documented behaviour).
    driver = driver_with_topic(**{"transaction.partition.verification.enable": "false"})
    init = init_txn_producer(driver, TXN_ID)
    pid, epoch = init.producer_id, init.producer_epoch
    partition = driver.broker.partition("events", 0)
    assert partition is not None
    pending = send_produce(driver, txn_records(pid, epoch, 0, b"unverified"))
    driver.run_until(lambda: pending.done, 5_000, "the Produce answered")
    assert produce_error(pending) is ErrorCode.none
    assert partition.producers.verification_guard(pid) is None and partition.producers.has_ongoing_txn(pid)
