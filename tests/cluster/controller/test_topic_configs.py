"""An altered topic config is a controller decision in the metadata log that changes what
brokers do: min.insync.replicas raised above the ISR makes acks=all produce fail with
NOT_ENOUGH_REPLICAS, deleted again it succeeds; the change survives a restart of the
controller and of the broker (replayed from the durable metadata log)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cluster.launcher import CONTROLLER_NODE_ID

TOPIC = "guarded"
TIMEOUT_S = 20


def _produce_error(bootstrap: str) -> int | None:
    """The error code of one acks=all send (None: acknowledged); not retried, so a refusal
    shows as the broker's error rather than a delivery timeout."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 3000, "retries": 0})
    outcome: list[int | None] = []
    producer.produce(TOPIC, b"v", on_delivery=lambda err, msg: outcome.append(None if err is None else err.code()))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1
    return outcome[0]


def _set_min_isr(admin: AdminClient, value: str | None) -> None:
    operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[ConfigEntry("min.insync.replicas", value, incremental_operation=operation)])
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)


def _until(check, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_altered_min_insync_replicas_decides_acks_all_produce_and_survives_restarts(make_cluster) -> None:
    cluster = make_cluster(brokers=2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 1, 2)], operation_timeout=TIMEOUT_S)[TOPIC].result(TIMEOUT_S)
    leader = admin.list_topics(TOPIC, timeout=TIMEOUT_S).topics[TOPIC].partitions[0].leader
    follower = 1 - leader
    leader_only = next(b.address for b in cluster.brokers if b.broker_id == leader)
    admin = AdminClient({"bootstrap.servers": leader_only})
    cluster.stop(follower)  # controlled shutdown: the follower leaves the ISR, which is now [leader]
    assert _produce_error(leader_only) is None  # min.insync.replicas 1 (default)

    _set_min_isr(admin, "2")
    _until(lambda: _produce_error(leader_only) == KafkaError.NOT_ENOUGH_REPLICAS, "acks=all refused with an ISR of 1 < min.insync.replicas 2")

    cluster.stop(CONTROLLER_NODE_ID)
    cluster.start(CONTROLLER_NODE_ID)
    cluster.stop(leader)
    cluster.start(leader)
    assert _produce_error(leader_only) == KafkaError.NOT_ENOUGH_REPLICAS  # replayed from the metadata log

    _set_min_isr(AdminClient({"bootstrap.servers": leader_only}), None)
    _until(lambda: _produce_error(leader_only) is None, "acks=all accepted again once the topic's min.insync.replicas is deleted")


def test_altered_retention_ms_deletes_old_segments_of_a_running_log(make_cluster) -> None:
    cluster = make_cluster(config={"log.retention.check.interval.ms": "200"})
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Small segments, so most records sit in closed segments that retention may delete.
    admin.create_topics([NewTopic("aging", 1, 1, config={"segment.bytes": "1024"})], operation_timeout=TIMEOUT_S)["aging"].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(60):
        producer.produce("aging", b"x" * 100)
        producer.flush(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low = lambda: consumer.get_watermark_offsets(TopicPartition("aging", 0), timeout=TIMEOUT_S)[0]  # noqa: E731
        time.sleep(1)  # several retention passes under the default 7 days
        assert low() == 0
        resource = ConfigResource(ConfigResource.Type.TOPIC, "aging", incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
        _until(lambda: low() > 0, "retention.ms=1 deleted the closed segments")
    finally:
        consumer.close()
