"""`transaction.offset.commit.skip.generation.check=true` (unsafe): TxnOffsetCommit is
accepted without KIP-447's member id and generation checks (the checks of TxnOffsetCommit
v3+; before KIP-447 the request carried neither, and exactly-once copiers needed a producer
per input partition to fence zombies). A zombie copier, one whose consumer lost its
partitions while it was inside a transaction, then commits its output and the input offsets
of records the partition's new owner copies too: the input is copied twice downstream.

A consume-transform-produce copier as Kafka's exactly-once test runs it, with unmodified
confluent-kafka clients on a real broker: copier A's consumer (group "copiers") polls the
input record 1 and A copies it in a transaction; before A sends its offsets, its consumer
is gone from the group (closed here: the coordinator removes a member that stopped polling
the same way, only later); copier B's consumer joins, gets the partition, polls 1 (nothing
is committed yet) and copies it in a committed transaction with its offsets; then zombie A
sends its offsets with its old group metadata and commits. With the check A's
TxnOffsetCommit is refused and A aborts; without it A's copy commits as well.

The copies are recorded as the delivery workload's history (workloads/delivery.py): a copy
transaction is a `process` op of the group, ok when it committed. A transactional copier's
offsets commit with its output, so a committed copy is never repeated: the at-most-once
claim, which the checkers' duplicate-processing breaks when the zombie's copy commits too."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from checkers.claims import AT_MOST_ONCE
from tests.cluster.kafka_helpers import create_topic
from tests.cluster.txn.unsafe_clients import CALL_TIMEOUT_S, Reader, send, txn_producer
from tests.cluster.txn.unsafe_history import (SCENARIO_BROKER_CONFIG, Recorder, anomaly_names, check_histories, delivery_inputs,
                                              describe)

SWITCH = "transaction.offset.commit.skip.generation.check"
SEED = 1403
INPUT, OUTPUT, KEY = "copy-in", "copy-out", 0  # key 0: partition 0 of the input
GROUP = "copiers"
SOURCE, COPIER_A, COPIER_B = 0, 1, 2


def copier_consumer(bootstrap: str) -> tuple[Consumer, tuple[int, int]]:
    """A group member subscribed to the input, and the (offset, value) it polls first."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": f"copier-{uuid.uuid4()}"})
    consumer.subscribe([INPUT])
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert not msg.error(), msg.error()
        return consumer, (int(msg.offset()), int(msg.value().decode()))
    raise AssertionError(f"the copier's consumer got no record within {CALL_TIMEOUT_S} s")


def copy(producer: Producer, value: int) -> None:
    """Begin the copy transaction and produce the output record (what a copier does before
    it sends its offsets)."""
    producer.begin_transaction()
    send(producer, OUTPUT, KEY, value)


def scenario(make_cluster, switch_value: str) -> tuple[Recorder, list[int]]:
    """The history, and the output values a read_committed reader finds."""
    cluster = make_cluster(brokers=1, seed=SEED, config={**SCENARIO_BROKER_CONFIG, SWITCH: switch_value})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, INPUT, 1)
    create_topic(bootstrap, OUTPUT, 1)
    h = Recorder()
    source = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    written = h.invoke(SOURCE, "send", [["send", KEY, 1]])
    h.complete(written, "ok", [["send", KEY, [send(source, INPUT, KEY, 1), 1]]])
    source.flush(CALL_TIMEOUT_S)

    producer_a, producer_b = txn_producer(bootstrap, "copier-a"), txn_producer(bootstrap, "copier-b")
    consumer_a, (offset_a, value_a) = copier_consumer(bootstrap)
    zombie = h.invoke(COPIER_A, "process", None, group=GROUP)
    copy(producer_a, value_a)
    metadata_a = consumer_a.consumer_group_metadata()
    consumer_a.close()  # A loses its partition while inside its transaction

    consumer_b, (offset_b, value_b) = copier_consumer(bootstrap)
    try:
        live = h.invoke(COPIER_B, "process", None, group=GROUP)
        copy(producer_b, value_b)
        producer_b.send_offsets_to_transaction([KafkaTopicPartition(INPUT, KEY, offset_b + 1)],
                                               consumer_b.consumer_group_metadata(), CALL_TIMEOUT_S)
        producer_b.commit_transaction(CALL_TIMEOUT_S)
        h.complete(live, "ok", [["process", KEY, [offset_b, value_b]]], group=GROUP)
    finally:
        consumer_b.close()

    try:  # the zombie wakes up and finishes its copy with its old group metadata
        producer_a.send_offsets_to_transaction([KafkaTopicPartition(INPUT, KEY, offset_a + 1)], metadata_a, CALL_TIMEOUT_S)
        producer_a.commit_transaction(CALL_TIMEOUT_S)
        h.complete(zombie, "ok", [["process", KEY, [offset_a, value_a]]], group=GROUP)
    except KafkaException as exc:
        try:
            producer_a.abort_transaction(CALL_TIMEOUT_S)
        except KafkaException:
            pass  # a fatal error: the coordinator aborts it (never asked to commit), still a definite fail
        h.complete(zombie, "fail", [["process", KEY, [offset_a, value_a]]], error=["send-offsets", str(exc.args[0])], group=GROUP)

    reader = Reader(bootstrap, OUTPUT, KEY)
    try:
        output = [v for _, v in reader.poll_to_stable_end()]
    finally:
        reader.close()
    return h, output


def test_without_kip447_checks_a_zombie_copier_commits_a_second_copy(make_cluster, spark, tmp_path) -> None:
    safe_history, safe_output = scenario(make_cluster, "false")
    unsafe_history, unsafe_output = scenario(make_cluster, "true")
    assert (safe_output, unsafe_output) == ([1], [1, 1])
    safe, unsafe = {SWITCH: "false"}, {SWITCH: "true"}
    assert delivery_inputs(unsafe, "at-most-once").bug_switches == (SWITCH,)
    results = check_histories({"safe": (safe_history, delivery_inputs(safe, "at-most-once")),
                               "unsafe": (unsafe_history, delivery_inputs(unsafe, "at-most-once"))}, tmp_path, spark)
    assert results["safe"].valid is True and not results["safe"].anomalies, describe(results["safe"])
    flagged = results["unsafe"]
    assert flagged.valid is False and "duplicate-processing" in anomaly_names(flagged, allowed=False), describe(flagged)
    duplicate = next(a for a in flagged.anomalies if a.name == "duplicate-processing")
    assert duplicate.violates == [AT_MOST_ONCE]
    assert duplicate.witnesses[0].detail == {"group": GROUP, "key": KEY, "value": 1, "count": 2, "offsets": [0, 0]}
