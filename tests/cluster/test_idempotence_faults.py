"""Idempotence under faults: the broker appends some Produce requests and then closes the
connection instead of answering (test.drop.produce.response.probability). librdkafka retries
them. Idempotent producers end with zero duplicates and nothing missing, in order;
non-idempotent ones show duplicates."""

from __future__ import annotations

from collections import Counter

from confluent_kafka import TopicPartition

from tests.cluster.kafka_helpers import Consumed, check_exactly, check_order_per_key, consumer, create_topic, drain, end_offsets, produce_numbered

MESSAGES = 20_000
PARTITIONS = 3
KEYS = 9
# Small batches so that many Produce requests are exposed to the fault.
SMALL_BATCHES = {"linger.ms": 1, "batch.num.messages": 200, "retry.backoff.ms": 10, "message.timeout.ms": 60_000}


def _read_everything(bootstrap: str, topic: str) -> Consumed:
    c = consumer(bootstrap, f"check-{topic}")
    try:
        total = sum(end_offsets(c, topic, PARTITIONS).values())
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = Consumed()
        drain(c, total, got, commit_every=10**9)
        assert len(got.records) == total
        return got
    finally:
        c.close()


def test_idempotent_producer_has_no_duplicates_when_responses_are_dropped(make_cluster) -> None:
    cluster = make_cluster(config={"test.drop.produce.response.probability": "0.05"}, seed=7)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "safe", PARTITIONS)
    errors = produce_numbered(bootstrap, "safe", MESSAGES, KEYS, {"acks": "all", "enable.idempotence": True, **SMALL_BATCHES})
    assert errors == []
    got = _read_everything(bootstrap, "safe")
    check_exactly(got.values(), range(MESSAGES), KEYS)
    check_order_per_key(got.records)
    with open(cluster.brokers[0].log_path) as log:
        assert "response dropped" in log.read(), "the fault should actually have fired"


def test_non_idempotent_producer_shows_duplicates_when_responses_are_dropped(make_cluster) -> None:
    cluster = make_cluster(config={"test.drop.produce.response.probability": "0.05"}, seed=7)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "unsafe", PARTITIONS)
    errors = produce_numbered(bootstrap, "unsafe", MESSAGES, KEYS, {"acks": "all", "enable.idempotence": False, **SMALL_BATCHES})
    assert errors == []
    got = _read_everything(bootstrap, "unsafe")
    counts = Counter(got.values())
    assert set(counts) == {f"k{n % KEYS}:{n}" for n in range(MESSAGES)}, "nothing is lost"
    duplicated = sum(c - 1 for c in counts.values())
    assert duplicated > 0, "retries of appended-but-unanswered requests must duplicate"
