"""confluent-kafka end to end: AdminClient creates a 6-partition topic, a producer sends
100,000 keyed messages, a group consumer with subscribe() and manual commits reads them all
back: per-key order, nothing lost, nothing duplicated, commits at the log end."""

from __future__ import annotations

import pytest

from tests.cluster.kafka_helpers import (
    Consumed,
    check_exactly,
    check_order_per_key,
    committed_offsets,
    consumer,
    create_topic,
    drain,
    end_offsets,
    produce_numbered,
)

MESSAGES = 100_000
PARTITIONS = 6
KEYS = 60

PRODUCER_SETTINGS = {
    "acks=all idempotent": {"acks": "all", "enable.idempotence": True},
    "acks=1": {"acks": "1"},
    "acks=0": {"acks": "0"},
}


@pytest.mark.parametrize("settings", PRODUCER_SETTINGS.values(), ids=PRODUCER_SETTINGS.keys())
def test_group_consumer_reads_back_every_message_in_order(cluster, settings) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "orders", PARTITIONS)
    errors = produce_numbered(bootstrap, "orders", MESSAGES, KEYS, settings)
    assert errors == []

    c = consumer(bootstrap, "readers")
    try:
        c.subscribe(["orders"])
        got = Consumed()
        drain(c, MESSAGES, got)
        check_exactly(got.values(), range(MESSAGES), KEYS)
        check_order_per_key(got.records)
        ends = end_offsets(c, "orders", PARTITIONS)
        assert sum(ends.values()) == MESSAGES
        assert committed_offsets(c, "orders", PARTITIONS) == {p: ends[p] for p in range(PARTITIONS) if ends[p] > 0} | {
            p: -1001 for p in range(PARTITIONS) if ends[p] == 0
        }
    finally:
        c.close()
