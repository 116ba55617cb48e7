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

The copies are recorded as the eos workload's history (workloads/eos.py: a copy op per copy
transaction, ok = committed, each output value `v << 20 | copy id`; a verifier poll reads both
topics to their end) and judged by its exactly-once checks (checkers/eos.py): the input
record is in the output twice, eos-duplicate, when the zombie's copy commits too."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from checkers.claims import EXACTLY_ONCE
from checkers.eos import COPY_ID_BITS  # an output value is the input value << COPY_ID_BITS | copy id
from tests.cluster.kafka_helpers import create_topic
from tests.cluster.txn.unsafe_clients import CALL_TIMEOUT_S, Reader, send, txn_producer
from tests.cluster.txn.unsafe_history import (SCENARIO_BROKER_CONFIG, Recorder, anomaly_names, check_histories, describe,
                                              eos_inputs, poll_value)

SWITCH = "transaction.offset.commit.skip.generation.check"
SEED = 1403
INPUT, OUTPUT = "copy-in", "copy-out"
IN_KEY, OUT_KEY = 0, 1  # the eos workload's keys: input partition 0, then output partition 0
GROUP = "copiers"
SOURCE, COPIER_A, COPIER_B, VERIFIER = 0, 1, 2, 3


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


def copy(producer: Producer, value: int, copy_id: int) -> tuple[int, int]:
    """Begin the copy transaction and produce the output record (what a copier does before
    it sends its offsets): the output's (offset, value)."""
    producer.begin_transaction()
    out = value << COPY_ID_BITS | copy_id
    return send(producer, OUTPUT, 0, out), out


def copied(polled: tuple[int, int], output: tuple[int, int]) -> list[list[object]]:
    """A copy op's value: the input record it consumed and the output record it produced."""
    return [poll_value({IN_KEY: [polled]}), ["send", OUT_KEY, list(output)]]


def scenario(make_cluster, switch_value: str) -> tuple[Recorder, list[int]]:
    """The history, and the output values a read_committed reader finds."""
    cluster = make_cluster(brokers=1, seed=SEED, config={**SCENARIO_BROKER_CONFIG, SWITCH: switch_value})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, INPUT, 1)
    create_topic(bootstrap, OUTPUT, 1)
    h = Recorder()
    source = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    written = h.invoke(SOURCE, "send", [["send", IN_KEY, 1]])
    h.complete(written, "ok", [["send", IN_KEY, [send(source, INPUT, 0, 1), 1]]])
    source.flush(CALL_TIMEOUT_S)

    producer_a, producer_b = txn_producer(bootstrap, "copier-a"), txn_producer(bootstrap, "copier-b")
    consumer_a, polled_a = copier_consumer(bootstrap)
    zombie = h.invoke(COPIER_A, "copy", None)
    output_a = copy(producer_a, polled_a[1], copy_id=1)
    metadata_a = consumer_a.consumer_group_metadata()
    consumer_a.close()  # A loses its partition while inside its transaction

    consumer_b, polled_b = copier_consumer(bootstrap)
    try:
        live = h.invoke(COPIER_B, "copy", None)
        output_b = copy(producer_b, polled_b[1], copy_id=2)
        producer_b.send_offsets_to_transaction([KafkaTopicPartition(INPUT, 0, polled_b[0] + 1)],
                                               consumer_b.consumer_group_metadata(), CALL_TIMEOUT_S)
        producer_b.commit_transaction(CALL_TIMEOUT_S)
        h.complete(live, "ok", copied(polled_b, output_b))
    finally:
        consumer_b.close()

    try:  # the zombie wakes up and finishes its copy with its old group metadata
        producer_a.send_offsets_to_transaction([KafkaTopicPartition(INPUT, 0, polled_a[0] + 1)], metadata_a, CALL_TIMEOUT_S)
        producer_a.commit_transaction(CALL_TIMEOUT_S)
        h.complete(zombie, "ok", copied(polled_a, output_a))
    except KafkaException as exc:
        try:
            producer_a.abort_transaction(CALL_TIMEOUT_S)
        except KafkaException:
            pass  # a fatal error: the coordinator aborts it (never asked to commit), still a definite fail
        h.complete(zombie, "fail", copied(polled_a, output_a), error=["send-offsets", str(exc.args[0])])

    # The verifier reads both topics to their end with read_committed.
    verify = h.invoke(VERIFIER, "poll", [["poll"]])
    readers = {IN_KEY: Reader(bootstrap, INPUT, 0), OUT_KEY: Reader(bootstrap, OUTPUT, 0)}
    try:
        read = {key: reader.poll_to_stable_end() for key, reader in readers.items()}
    finally:
        for reader in readers.values():
            reader.close()
    h.complete(verify, "ok", [poll_value(read)])
    return h, [v >> COPY_ID_BITS for _, v in read[OUT_KEY]]


def test_without_kip447_checks_a_zombie_copier_commits_a_second_copy(make_cluster, spark, tmp_path) -> None:
    safe_history, safe_output = scenario(make_cluster, "false")
    unsafe_history, unsafe_output = scenario(make_cluster, "true")
    assert (safe_output, unsafe_output) == ([1], [1, 1])  # the input values the output copies
    safe, unsafe = {SWITCH: "false"}, {SWITCH: "true"}
    assert eos_inputs(unsafe).bug_switches == (SWITCH,) and eos_inputs(safe).bug_switches == ()
    results = check_histories({"safe": (safe_history, eos_inputs(safe)), "unsafe": (unsafe_history, eos_inputs(unsafe))},
                              tmp_path, spark)
    assert results["safe"].valid is True and not results["safe"].anomalies, describe(results["safe"])
    flagged = results["unsafe"]
    assert flagged.valid is False and "eos-duplicate" in anomaly_names(flagged, allowed=False), describe(flagged)
    duplicate = next(a for a in flagged.anomalies if a.name == "eos-duplicate")
    assert duplicate.violates == [EXACTLY_ONCE]
    assert duplicate.witnesses[0].detail["value"] == 1 and duplicate.witnesses[0].detail["count"] == 2
