"""`transaction.partition.verification.enable=false` (unsafe; Kafka's own setting, true since
3.6): a transactional Produce is appended without asking the coordinator whether its
partition is in the producer's ongoing transaction. KIP-890 part 1 added the check for the
hanging transactions of KAFKA-14402: a produce delayed past the end of its transaction opens
a new one on the partition that no coordinator knows, which holds the last stable offset
back, or, once the producer's next transaction writes there, is committed by that
transaction's marker: "a message from a previous (aborted) transaction become[s] part of the
next transaction" (KIP-890's motivation).

A client cannot be made to delay a request, so the producer speaks the raw protocol
(cluster/protocol/client.py) to a real broker, as librdkafka would: transaction 1 sends 1
(acknowledged) and 2, whose Produce is held back (the client's request timed out); the
producer aborts and bumps its epoch (KIP-360, what librdkafka does after a timed-out
produce); the held Produce of 2 then arrives; transaction 2 sends 3 and commits; a
confluent-kafka read_committed reader polls the partition. With verification on the late
Produce is refused and the reader sees 3; with it off, 2 opens a transaction that
transaction 2's commit marker commits, the reader sees 2, whose transaction aborted, and the
checkers report G1a (aborted read)."""

from __future__ import annotations

import datetime
import time
from typing import Any, Callable

from confluent_kafka import IsolationLevel
from kio.index import EntityType
from kio.schema.errors import ErrorCode

from checkers.claims import NO_ABORTED_READS
from cluster.protocol.client import WireClient
from cluster.protocol.codec import payload_class
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import ATTR_TRANSACTIONAL
from tests.cluster.kafka_helpers import create_topic
from tests.cluster.txn.unsafe_clients import Reader, stable_end
from tests.cluster.txn.unsafe_history import (SCENARIO_BROKER_CONFIG, Recorder, anomaly_names, check_histories, describe,
                                              poll_value, queue_txn_inputs)

SWITCH = "transaction.partition.verification.enable"
SEED = 1402
TOPIC, KEY = "queue", 0
TXN_ID = "late-writer"
WRITER, READER = 0, 1
RETRY_S = 30.0
# Answers a client retries (the coordinator loading, or finishing the previous transaction).
RETRIABLE = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
             ErrorCode.concurrent_transactions}


def retried(call: Callable[[], Any], error_of: Callable[[Any], ErrorCode], what: str) -> Any:
    deadline = time.monotonic() + RETRY_S
    while True:
        body = call()
        error = error_of(body)
        if error not in RETRIABLE:
            assert error is ErrorCode.none, f"{what}: {error.name}"
            return body
        assert time.monotonic() < deadline, f"{what}: still {error.name} after {RETRY_S} s"
        time.sleep(0.1)


class RawTxnProducer:
    """A transactional producer of one partition over the raw protocol: each step is the
    request librdkafka sends for it (versions as librdkafka 2.x negotiates)."""

    def __init__(self, client: WireClient) -> None:
        self.client = client
        retried(lambda: client.request(ApiKey.FIND_COORDINATOR, 3, key=TXN_ID, key_type=1), lambda b: b.error_code,
                "FindCoordinator")
        self.producer_id, self.epoch = -1, -1
        self.init()
        self.sequence = 0

    def init(self) -> None:
        """InitProducerId; with an id already, KIP-360's epoch bump (sequences restart)."""
        body = retried(lambda: self.client.request(
            ApiKey.INIT_PRODUCER_ID, 4, transactional_id=TXN_ID, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=self.producer_id, producer_epoch=self.epoch), lambda b: b.error_code, "InitProducerId")
        self.producer_id, self.epoch, self.sequence = int(body.producer_id), int(body.producer_epoch), 0

    def add_partition(self) -> None:
        topic_cls = payload_class(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic", EntityType.request)
        retried(lambda: self.client.request(
            ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=(topic_cls(name=TOPIC, partitions=(KEY,)),)),
            lambda b: b.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, "AddPartitionsToTxn")

    def batch(self, value: int) -> Callable[[], tuple[ErrorCode, int]]:
        """The Produce of `value` with the next sequence, built now and sent when called:
        (error, offset)."""
        batch = build_batch([Record(None, str(value).encode())], base_offset=0, timestamp_ms=int(time.time() * 1000),
                            attributes=ATTR_TRANSACTIONAL, producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=self.sequence)
        self.sequence += 1
        topic_cls = payload_class(ApiKey.PRODUCE, 9, "TopicProduceData", EntityType.request)
        partition_cls = payload_class(ApiKey.PRODUCE, 9, "PartitionProduceData", EntityType.request)

        def send() -> tuple[ErrorCode, int]:
            body = self.client.request(ApiKey.PRODUCE, 9, transactional_id=TXN_ID, acks=-1, timeout=datetime.timedelta(seconds=30),
                                       topic_data=(topic_cls(name=TOPIC, partition_data=(partition_cls(index=KEY, records=batch),)),))
            answer = body.responses[0].partition_responses[0]
            return answer.error_code, int(answer.base_offset)

        return send

    def send(self, value: int) -> int:
        error, offset = self.batch(value)()
        assert error is ErrorCode.none, f"produce {value}: {error.name}"
        return offset

    def end(self, committed: bool) -> None:
        retried(lambda: self.client.request(ApiKey.END_TXN, 3, transactional_id=TXN_ID, producer_id=self.producer_id,
                                            producer_epoch=self.epoch, committed=committed), lambda b: b.error_code, "EndTxn")


def scenario(make_cluster, switch_value: str) -> tuple[Recorder, ErrorCode, tuple[int, int]]:
    """The history, the broker's answer to the late Produce (which no client hears), and
    the partition's (last stable offset, high watermark) just after it."""
    cluster = make_cluster(brokers=1, seed=SEED, config={**SCENARIO_BROKER_CONFIG, SWITCH: switch_value})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1)
    broker = cluster.brokers[0]
    h = Recorder()
    with WireClient(broker.host, broker.port, timeout_s=40) as client:
        producer = RawTxnProducer(client)
        first_txn = h.invoke(WRITER, "send", [["send", KEY, 1], ["send", KEY, 2]])
        producer.add_partition()
        first = producer.send(1)
        late = producer.batch(2)  # sent, but held up on the way: the client's request times out
        producer.end(committed=False)
        producer.init()  # KIP-360: the abort after a timed-out produce bumps the epoch
        h.complete(first_txn, "fail", [["send", KEY, [first, 1]], ["send", KEY, 2]], error=["abort", "produce timed out"])
        late_error, _ = late()  # the held Produce of 2 arrives after its transaction ended
        ends = (stable_end(bootstrap, TOPIC, KEY), stable_end(bootstrap, TOPIC, KEY, IsolationLevel.READ_UNCOMMITTED))
        second_txn = h.invoke(WRITER, "send", [["send", KEY, 3]])
        producer.add_partition()
        third = producer.send(3)
        producer.end(committed=True)
        h.complete(second_txn, "ok", [["send", KEY, [third, 3]]])
    reader = Reader(bootstrap, TOPIC, KEY)
    try:
        h.op(READER, "assign", [KEY], "ok", [KEY])
        h.op(READER, "poll", [["poll"]], "ok", [poll_value({KEY: reader.poll_to_stable_end()})])
    finally:
        reader.close()
    return h, late_error, ends


def test_without_partition_verification_a_late_produce_joins_the_next_transaction(make_cluster, spark, tmp_path) -> None:
    safe_history, safe_late, safe_ends = scenario(make_cluster, "true")
    unsafe_history, unsafe_late, unsafe_ends = scenario(make_cluster, "false")
    # KIP-890: the coordinator says the partition is not in the (bumped) producer's transaction.
    assert safe_late is not ErrorCode.none and unsafe_late is ErrorCode.none
    # 1 at offset 0, the abort marker at 1; without verification 2 at offset 2 is a hanging
    # transaction: the LSO stays below the high watermark until the producer writes there again.
    assert (safe_ends, unsafe_ends) == ((2, 2), (2, 3))
    safe, unsafe = {SWITCH: "true"}, {SWITCH: "false"}
    assert queue_txn_inputs(unsafe).bug_switches == (SWITCH,) and queue_txn_inputs(safe).bug_switches == ()
    results = check_histories({"safe": (safe_history, queue_txn_inputs(safe)),
                               "unsafe": (unsafe_history, queue_txn_inputs(unsafe))}, tmp_path, spark)
    assert results["safe"].valid is True and not results["safe"].anomalies, describe(results["safe"])
    flagged = results["unsafe"]
    assert flagged.valid is False and "G1a" in anomaly_names(flagged, allowed=False), describe(flagged)
    g1a = next(a for a in flagged.anomalies if a.name == "G1a")
    assert g1a.violates == [NO_ABORTED_READS] and g1a.witnesses[0].detail == {"key": KEY, "value": 2}
