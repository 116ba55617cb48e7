"""Transactions end to end on real broker processes with unmodified clients: confluent-kafka's
transactional producer (init, begin, produce, send_offsets_to_transaction, commit, abort)
and read_committed consumer on three brokers; a second producer with the same
transactional.id fences the first; a coordinator SIGKILLed after EndTxn was answered but
before the markers were written has its transaction finished by the next coordinator; a
transaction left open past its timeout is aborted; kafka-python's transactional producer."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from cluster.broker.txn.state_log import partition_for_transactional_id
from tests.cluster.kafka_helpers import create_topic, wait_for

STATE_PARTITIONS = 5
TXN_CONFIG = {
    "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def txn_producer(bootstrap: str, transactional_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **extra})


def read_committed(bootstrap: str, topic: str, partitions: int, group: str | None = None) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"reader-{uuid.uuid4()}", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
    return c


def drain_values(c: Consumer, idle_s: float = 3.0, limit_s: float = 30.0) -> list[str]:
    """Every value until nothing arrives for `idle_s`."""
    values: list[str] = []
    deadline = time.monotonic() + limit_s
    last = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last < idle_s:
        for msg in c.consume(num_messages=500, timeout=0.2):
            if msg.error():
                continue
            values.append(msg.value().decode())
            last = time.monotonic()
    return values


def coordinator_of(bootstrap: str, transactional_id: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics("__transaction_state", timeout=10)
    topic = metadata.topics["__transaction_state"]
    return topic.partitions[partition_for_transactional_id(transactional_id, len(topic.partitions))].leader


def test_committed_transactions_and_their_offsets_are_seen_and_aborted_ones_are_not(make_cluster) -> None:
    cluster = make_cluster(brokers=3, config=TXN_CONFIG)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "in", 1, replication_factor=3)
    create_topic(bootstrap, "out", 3, replication_factor=3, config={"min.insync.replicas": "2"})
    producer = txn_producer(bootstrap, "copier")
    producer.init_transactions(30)
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "copiers", "enable.auto.commit": False})
    try:
        for round_number, commit in enumerate([True, False, True, False, True]):
            producer.begin_transaction()
            for n in range(10):
                producer.produce("out", key=str(n), value=f"{round_number}:{n}")
            offsets = [KafkaTopicPartition("in", 0, 100 + round_number)]
            producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            committed = group.committed([KafkaTopicPartition("in", 0)], timeout=10)[0].offset
            assert committed == 100 + (round_number if commit else round_number - 1)
        reader = read_committed(bootstrap, "out", 3)
        try:
            values = drain_values(reader)
        finally:
            reader.close()
        assert sorted(values) == sorted(f"{r}:{n}" for r in (0, 2, 4) for n in range(10))
    finally:
        group.close()


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(make_cluster) -> None:
    cluster = make_cluster(brokers=3, config=TXN_CONFIG)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "out", 1, replication_factor=3)
    first = txn_producer(bootstrap, "single")
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("out", value="zombie")
    first.flush(30)
    second = txn_producer(bootstrap, "single")
    second.init_transactions(60)  # aborts the first's open transaction, then bumps the epoch
    second.begin_transaction()
    second.produce("out", value="live")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    assert raised.value.args[0].fatal(), raised.value
    reader = read_committed(bootstrap, "out", 1)
    try:
        assert drain_values(reader) == ["live"]
    finally:
        reader.close()


def test_the_next_coordinator_finishes_a_commit_whose_markers_the_killed_one_never_wrote(make_cluster) -> None:
    # A paused follower leaves the ISRs quickly, so the coordinator's PrepareCommit commits on
    # the other two replicas while the paused broker still leads the data partition (its
    # session, 9 s, outlasts the test's window).
    cluster = make_cluster(brokers=3, config={**TXN_CONFIG, "replica.lag.time.max.ms": "1500"})
    bootstrap = cluster.bootstrap_servers
    transactional_id = "survivor"
    producer = txn_producer(bootstrap, transactional_id)
    producer.init_transactions(30)
    coordinator = coordinator_of(bootstrap, transactional_id)
    # Leaders go round robin over the three brokers: write to a partition led elsewhere, so
    # pausing its leader holds the marker back while the coordinator answers EndTxn.
    create_topic(bootstrap, "out", 3, replication_factor=3)
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics("out", timeout=10)
    partition, data_leader = next((p, m.leader) for p, m in sorted(metadata.topics["out"].partitions.items()) if m.leader != coordinator)
    producer.begin_transaction()
    for n in range(20):
        producer.produce("out", value=str(n), partition=partition)
    producer.flush(30)
    cluster.pause(data_leader)
    outcome: list[object] = []

    def commit() -> None:
        try:
            producer.commit_transaction(30)
            outcome.append("committed")
        except KafkaException as error:
            outcome.append(error)

    committing = threading.Thread(target=commit)
    committing.start()
    try:
        # EndTxn is answered once PrepareCommit is replicated; the marker for the paused
        # leader cannot have been written then.
        committing.join(8)
        assert outcome == ["committed"], f"EndTxn not answered while the data leader was paused: {outcome}"
        cluster.kill(coordinator)
    finally:
        cluster.resume(data_leader)
        committing.join(60)
    reader = read_committed(bootstrap, "out", 3)
    seen: list[str] = []

    def all_committed() -> bool:
        seen.extend(drain_values(reader, idle_s=1.0))
        return len(seen) >= 20

    try:
        wait_for(all_committed, 60, "the committed records")
    finally:
        reader.close()
    assert sorted(seen, key=int) == [str(n) for n in range(20)]


def test_a_transaction_left_open_past_its_timeout_is_aborted(make_cluster) -> None:
    cluster = make_cluster(brokers=3, config=TXN_CONFIG)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "out", 1, replication_factor=3)
    producer = txn_producer(bootstrap, "slow", **{"transaction.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("out", value="never")
    producer.flush(30)
    time.sleep(4)  # past the timeout and a cleanup interval
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    after = txn_producer(bootstrap, "after")
    after.init_transactions(30)
    after.begin_transaction()
    after.produce("out", value="later")
    after.commit_transaction(30)
    reader = read_committed(bootstrap, "out", 1)
    try:
        assert drain_values(reader) == ["later"]  # the LSO moved past the aborted transaction
    finally:
        reader.close()


def test_kafka_python_transactional_producer(make_cluster) -> None:
    from kafka import KafkaProducer

    cluster = make_cluster(brokers=3, config=TXN_CONFIG)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "out", 2, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp", enable_idempotence=True)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"kept")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("out", b"dropped")
        producer.abort_transaction()
    finally:
        producer.close(10)
    reader = read_committed(bootstrap, "out", 2)
    try:
        assert drain_values(reader) == ["kept"]
    finally:
        reader.close()


def test_kafka_python_admin_lists_and_describes_transactions(make_cluster) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin._transactions import TransactionState

    cluster = make_cluster(brokers=3, config=TXN_CONFIG)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "out", 2, replication_factor=3)
    done = txn_producer(bootstrap, "done")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("out", value="x", partition=0)
    done.commit_transaction(30)
    open_ = txn_producer(bootstrap, "open")
    open_.init_transactions(30)
    open_.begin_transaction()
    open_.produce("out", value="y", partition=1)
    open_.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = {t.transactional_id: t.state for listings in admin.list_transactions().values() for t in listings}
        assert listed == {"done": TransactionState.COMPLETE_COMMIT, "open": TransactionState.ONGOING}
        described = admin.describe_transactions(["done", "open"])
        assert described["open"].state is TransactionState.ONGOING and {(tp.topic, tp.partition) for tp in described["open"].topic_partitions} == {
            ("out", 1)}
        assert described["open"].transaction_start_time_ms > 0
        assert described["done"].state is TransactionState.COMPLETE_COMMIT and described["done"].transaction_start_time_ms == -1
        assert described["done"].coordinator_id == coordinator_of(bootstrap, "done")
        ongoing = admin.list_transactions(state_filters=["Ongoing"])
        assert [t.transactional_id for listings in ongoing.values() for t in listings] == ["open"]
    finally:
        admin.close()
        open_.abort_transaction(30)


def test_aiokafka_transactional_producer(make_cluster) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    cluster = make_cluster(brokers=3, config=TXN_CONFIG)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "out", 2, replication_factor=3)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("out", b"kept")
            await producer.begin_transaction()
            await producer.send_and_wait("out", b"dropped")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    reader = read_committed(bootstrap, "out", 2)
    try:
        assert drain_values(reader) == ["kept"]
    finally:
        reader.close()
