"""A group deleted by DeleteGroups stays deleted when its coordinator broker dies: the
deletion is a tombstone in __consumer_offsets, so the broker that takes the partition over
replays it, as Kafka's coordinator does. A group that was not deleted keeps its offsets on
the new coordinator, which shows the replay happened."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from kio.index import EntityType

from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.protocol.codec import build, payload_class
from cluster.protocol.versions import ApiKey
from tests.cluster.kafka_helpers import consumer, create_topic, group_coordinator, wait_for
from tests.cluster.replication_helpers import FAST_FAILOVER

TOPIC = "ledger"
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


def test_a_deleted_group_stays_deleted_after_its_coordinator_dies(make_cluster) -> None:
    cluster = make_cluster(brokers=3, config={**FAST_FAILOVER, "default.replication.factor": "3", "min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 3, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted, kept = "deleted-group", "kept-group"
    for group in (deleted, kept):
        c = consumer(bootstrap, group)
        try:
            c.commit(offsets=[TopicPartition(TOPIC, p, 100 + p) for p in range(3)], asynchronous=False)
        finally:
            c.close()
    admin.delete_consumer_groups([deleted], request_timeout=10)[deleted].result(timeout=15)

    def coordinator(group: str) -> int | None:
        return group_coordinator(cluster, group)

    # wait_for needs a truthy value: broker ids are wrapped (broker 0 is falsy).
    (before,) = wait_for(lambda: (b := coordinator(deleted)) is not None and b >= 0 and (b,), 30, "the group's coordinator")
    cluster.kill(before)
    wait_for(lambda: (b := coordinator(deleted)) is not None and b >= 0 and b != before and (b,), 60, "a new coordinator")

    # What the new coordinator answers, asked directly (OffsetFetch v8), then through a fresh
    # AdminClient: librdkafka's admin client that saw the old coordinator die may abort on an
    # internal assertion (rd_kafka_enq_once_del_source_return, librdkafka 2.x) or time out on
    # its own coordinator cache, which says nothing about the broker.
    group_cls = payload_class(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestGroup", EntityType.request)
    topics_cls = payload_class(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestTopics", EntityType.request)

    def fetched(group: str) -> list[tuple[int, int]] | None:
        node = coordinator(group)
        broker = next((b for b in cluster.brokers if b.broker_id == node), None)
        if broker is None:
            return None
        try:
            with WireClient(broker.host, broker.port, timeout_s=5) as client:
                answer = client.request(ApiKey.OFFSET_FETCH, 8, require_stable=False,
                                        groups=(build(group_cls, group_id=group, topics=(topics_cls(name=TOPIC, partition_indexes=(0, 1, 2)),)),))
        except (OSError, ProtocolClientError):
            return None
        (result,) = answer.groups
        if result.error_code.value != 0:
            return None
        return sorted((p.partition_index, p.committed_offset) for t in result.topics for p in t.partitions)

    assert wait_for(lambda: fetched(kept), 60, "the kept group's offsets from the new coordinator") == [(0, 100), (1, 101), (2, 102)]
    assert wait_for(lambda: fetched(deleted), 60, "the deleted group's offsets from the new coordinator") == [(0, -1), (1, -1), (2, -1)]

    fresh = AdminClient({"bootstrap.servers": bootstrap})

    def offsets(group: str) -> list[tuple[int, int]] | None:
        try:
            result = fresh.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p) for p in range(3)])],
                                                       request_timeout=5)[group].result(timeout=10)
        except Exception:  # noqa: BLE001 - the new coordinator may still be loading
            return None
        return sorted((tp.partition, tp.offset) for tp in result.topic_partitions)

    assert wait_for(lambda: offsets(deleted), 60, "the deleted group's offsets through a new AdminClient") == [(0, NO_OFFSET), (1, NO_OFFSET), (2, NO_OFFSET)]
    listed = {g.group_id for g in fresh.list_consumer_groups(request_timeout=10).result(timeout=15).valid}
    assert deleted not in listed and kept in listed
