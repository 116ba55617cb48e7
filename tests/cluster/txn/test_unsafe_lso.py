"""`transaction.lso.ignore.open.transactions=true` (unsafe): the last stable offset is the
high watermark, so read_committed consumers read records of open transactions. KIP-98 made
the LSO the bound of read_committed fetches exactly to keep them out; the same bug (a
read_committed fetch bounded past the first open transaction) was fixed in Redpanda
(redpanda-data/redpanda#3036) and KoP (streamnative/kop#1856).

One script, run on a cluster with the switch off and one with it on, recorded as a queue
history and judged by the checker pipeline: a transactional producer sends 1 and waits for
its delivery; a read_committed reader polls everything it may read; the transaction aborts;
a second transaction commits 2 and the reader polls again. With the switch on the reader
returns 1, which an aborted transaction wrote: G1a (aborted read), the run is invalid. With
it off the first poll is empty and the run valid."""

from __future__ import annotations

from checkers.claims import NO_ABORTED_READS
from tests.cluster.kafka_helpers import create_topic
from tests.cluster.txn.unsafe_clients import Reader, send, txn_producer
from tests.cluster.txn.unsafe_history import (SCENARIO_BROKER_CONFIG, Recorder, anomaly_names, check_histories, describe,
                                              poll_value, queue_txn_inputs)

SWITCH = "transaction.lso.ignore.open.transactions"
SEED = 1401
TOPIC, KEY = "queue", 0  # key 0 is partition 0
WRITER, READER = 0, 1


def scenario(make_cluster, switch_value: str) -> Recorder:
    cluster = make_cluster(brokers=1, seed=SEED, config={**SCENARIO_BROKER_CONFIG, SWITCH: switch_value})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1)
    h = Recorder()
    producer = txn_producer(bootstrap, "lso-writer")
    reader = Reader(bootstrap, TOPIC, KEY)
    try:
        h.op(READER, "assign", [KEY], "ok", [KEY])
        aborted = h.invoke(WRITER, "send", [["send", KEY, 1]])
        producer.begin_transaction()
        first = send(producer, TOPIC, KEY, 1)
        # The transaction is open: 1 is appended and below the high watermark.
        h.op(READER, "poll", [["poll"]], "ok", [poll_value({KEY: reader.poll_to_stable_end()})])
        producer.abort_transaction(30)
        h.complete(aborted, "fail", [["send", KEY, [first, 1]]], error=["abort", "intentional"])
        committed = h.invoke(WRITER, "send", [["send", KEY, 2]])
        producer.begin_transaction()
        second = send(producer, TOPIC, KEY, 2)
        producer.commit_transaction(30)
        h.complete(committed, "ok", [["send", KEY, [second, 2]]])
        h.op(READER, "poll", [["poll"]], "ok", [poll_value({KEY: reader.poll_to_stable_end()})])
    finally:
        reader.close()
        producer.flush(5)
    return h


def test_lso_at_the_high_watermark_lets_read_committed_read_an_aborted_transaction(make_cluster, spark, tmp_path) -> None:
    safe, unsafe = {SWITCH: "false"}, {SWITCH: "true"}
    results = check_histories({"safe": (scenario(make_cluster, "false"), queue_txn_inputs(safe)),
                               "unsafe": (scenario(make_cluster, "true"), queue_txn_inputs(unsafe))}, tmp_path, spark)
    assert results["safe"].valid is True and not results["safe"].anomalies, describe(results["safe"])
    flagged = results["unsafe"]
    assert flagged.valid is False and "G1a" in anomaly_names(flagged, allowed=False), describe(flagged)
    g1a = next(a for a in flagged.anomalies if a.name == "G1a")
    assert g1a.violates == [NO_ABORTED_READS] and g1a.witnesses[0].detail == {"key": KEY, "value": 1}
    assert queue_txn_inputs(unsafe).bug_switches == (SWITCH,)
