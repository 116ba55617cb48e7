"""SIGKILL and restart.

Default mode (every write reaches the OS at once, as in Kafka): everything acknowledged and
every committed offset survives, and the same producer carries on.
Crash mode `log.crash.lose.unflushed=true`: exactly the data after the last fsync is gone,
the log stays consistent (contiguous offsets), and consumers and producers keep working.
"""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition

from tests.cluster.kafka_helpers import (
    Consumed,
    check_exactly,
    committed_offsets,
    consumer,
    create_topic,
    drain,
    end_offsets,
    produce_numbered,
)

KEYS = 12


def test_acknowledged_messages_and_commits_survive_sigkill(cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "ledger", 3)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    delivered: list[str] = []
    for n in range(20_000):
        producer.produce("ledger", key=f"k{n % KEYS}", value=f"k{n % KEYS}:{n}", on_delivery=lambda err, msg: delivered.append(msg.value().decode()) if err is None else None)
        producer.poll(0)
    assert producer.flush(30) == 0 and len(delivered) == 20_000

    c = consumer(bootstrap, "auditors")
    c.subscribe(["ledger"])
    drain(c, 20_000, Consumed())
    before = committed_offsets(c, "ledger", 3)
    c.close()
    assert sum(before.values()) == 20_000

    pid = cluster.brokers[0].pid
    cluster.kill(0)
    assert not cluster.is_alive(0)
    cluster.start(0)
    assert cluster.brokers[0].pid != pid

    # The producer that was connected during the crash carries on without duplicates.
    for n in range(20_000, 21_000):
        producer.produce("ledger", key=f"k{n % KEYS}", value=f"k{n % KEYS}:{n}", on_delivery=lambda err, msg: delivered.append(msg.value().decode()) if err is None else None)
    assert producer.flush(30) == 0 and len(delivered) == 21_000

    c = consumer(bootstrap, "auditors")
    try:
        assert committed_offsets(c, "ledger", 3) == before
        fresh = consumer(bootstrap, "late-auditors")
        fresh.subscribe(["ledger"])
        everything = Consumed()
        drain(fresh, 21_000, everything)
        fresh.close()
        check_exactly(everything.values(), range(21_000), KEYS)

        c.subscribe(["ledger"])
        rest = Consumed()
        drain(c, 1_000, rest)
        check_exactly(rest.values(), range(20_000, 21_000), KEYS)
    finally:
        c.close()


def _produce_and_flush(bootstrap: str, start: int, count: int) -> None:
    # One flush per call: every message of the call is appended before the next call starts.
    assert produce_numbered(bootstrap, "volatile", count, 1, {"acks": "all", "enable.idempotence": True}, start=start) == []


def test_crash_mode_loses_exactly_the_unflushed_tail(make_cluster) -> None:
    # __consumer_offsets is fsynced on every commit (broker level); the test topic only every
    # 1000 offsets (topic level), so its recovery point is known exactly.
    cluster = make_cluster(config={"log.crash.lose.unflushed": "true", "log.flush.interval.messages": "1"})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "volatile", 1, {"flush.messages": "1000"})
    for start in (0, 1000, 2000):
        _produce_and_flush(bootstrap, start, 1000)  # reaching 1000, 2000, 3000 triggers an fsync
    _produce_and_flush(bootstrap, 3000, 999)  # 999 more: below the threshold, never fsynced

    c = consumer(bootstrap, "readers")
    c.assign([TopicPartition("volatile", 0, 0)])
    seen = Consumed()
    drain(c, 3999, seen, commit_every=10**9)
    assert len(seen.records) == 3999
    c.commit(offsets=[TopicPartition("volatile", 0, 2500)], asynchronous=False)
    assert end_offsets(c, "volatile", 1) == {0: 3999}
    c.close()

    cluster.kill(0)
    cluster.start(0)

    c = consumer(bootstrap, "readers")
    try:
        assert end_offsets(c, "volatile", 1) == {0: 3000}, "exactly the unflushed tail is lost"
        assert committed_offsets(c, "volatile", 1) == {0: 2500}
        c.assign([TopicPartition("volatile", 0, 0)])
        survivors = Consumed()
        drain(c, 3000, survivors, commit_every=10**9)
        assert [o for _, o, _, _ in survivors.records] == list(range(3000)), "offsets are contiguous from 0"
        assert survivors.values() == [f"k0:{n}" for n in range(3000)]

        _produce_and_flush(bootstrap, 3999, 100)  # producers continue at the new log end
        more = Consumed()
        drain(c, 100, more, commit_every=10**9)
        assert [o for _, o, _, _ in more.records] == list(range(3000, 3100))
        assert more.values() == [f"k0:{n}" for n in range(3999, 4099)]
    finally:
        c.close()


def test_a_consumer_alive_across_the_crash_carries_on_without_gaps_or_repeats(cluster) -> None:
    """The restart bumps every leader epoch; librdkafka then validates its position with
    OffsetForLeaderEpoch (KIP-320). Correct epoch answers mean no reset, no re-read, no gap."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "stream", 2)
    assert produce_numbered(bootstrap, "stream", 5000, 4, {"acks": "all", "enable.idempotence": True}) == []
    c = consumer(bootstrap, "followers", {"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition("stream", p, 0) for p in range(2)])
        seen = Consumed()
        drain(c, 5000, seen, commit_every=10**9)
        cluster.kill(0)
        cluster.start(0)
        assert produce_numbered(bootstrap, "stream", 5000, 4, {"acks": "all", "enable.idempotence": True}, start=5000) == []
        drain(c, 10_000, seen, commit_every=10**9)
        check_exactly(seen.values(), range(10_000), 4)
        for p in range(2):
            offsets = [o for q, o, _, _ in seen.records if q == p]
            assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous from 0"
    finally:
        c.close()


def test_a_live_consumer_detects_the_lost_tail_through_leader_epochs(make_cluster) -> None:
    """After a power-loss crash the log ends below the consumer's position. The bumped epoch
    and a correct OffsetForLeaderEpoch answer (epoch 0 ended at the new log end) let
    librdkafka see the truncation and resume exactly there: new records are neither skipped
    nor preceded by a re-read of the surviving prefix."""
    cluster = make_cluster(config={"log.crash.lose.unflushed": "true"})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "volatile", 1, {"flush.messages": "1000"})
    _produce_and_flush(bootstrap, 0, 1000)  # fsynced
    _produce_and_flush(bootstrap, 1000, 500)  # lost in the crash
    c = consumer(bootstrap, "watchers")
    try:
        c.assign([TopicPartition("volatile", 0, 0)])
        seen = Consumed()
        drain(c, 1500, seen, commit_every=10**9)
        cluster.kill(0)
        cluster.start(0)
        _produce_and_flush(bootstrap, 2000, 100)  # written at offsets 1000..1099
        after = Consumed()
        drain(c, 100, after, commit_every=10**9, idle_timeout_s=10)
        assert [o for _, o, _, _ in after.records] == list(range(1000, 1100))
        assert after.values() == [f"k0:{n}" for n in range(2000, 2100)]
    finally:
        c.close()
