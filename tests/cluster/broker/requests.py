"""Request builders for the core tests (kio entities of the versions librdkafka uses)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from cluster.protocol.codec import build
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver, Pending


def batch(values: list[bytes], producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, timestamp_ms: int = 1_700_000_000_000) -> bytes:
    return build_batch(
        [Record(b"key", v) for v in values],
        base_offset=0,
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def create_topic(driver: CoreDriver, name: str, partitions: int, configs: dict[str, str] | None = None, version: int = 5) -> Any:
    topic_cls = driver.request_class(ApiKey.CREATE_TOPICS, version, "CreatableTopic")
    config_cls = driver.request_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicConfig")
    topic = topic_cls(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                      configs=tuple(config_cls(name=k, value=v) for k, v in (configs or {}).items()))
    return driver.call(ApiKey.CREATE_TOPICS, version, topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False)


def metadata(driver: CoreDriver, topics: list[str] | None, version: int = 12, auto_create: bool = True) -> Any:
    topic_cls = driver.request_class(ApiKey.METADATA, version, "MetadataRequestTopic")
    wanted = None if topics is None else tuple(build(topic_cls, name=t, topic_id=uuid.UUID(int=0)) for t in topics)
    return driver.call(ApiKey.METADATA, version, topics=wanted, allow_auto_topic_creation=auto_create,
                       include_topic_authorized_operations=False, include_cluster_authorized_operations=False)


def topic_id(driver: CoreDriver, name: str) -> uuid.UUID:
    return driver.broker.topics.by_name(name).topic_id  # type: ignore[union-attr]


def send_produce(driver: CoreDriver, topic: str, partition: int, records: bytes | None, acks: int = -1, version: int = 10) -> Pending:
    data_cls = driver.request_class(ApiKey.PRODUCE, version, "PartitionProduceData")
    topic_cls = driver.request_class(ApiKey.PRODUCE, version, "TopicProduceData")
    return driver.send(ApiKey.PRODUCE, version, transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                       topic_data=(topic_cls(name=topic, partition_data=(data_cls(index=partition, records=records),)),))


def produce(driver: CoreDriver, topic: str, partition: int, records: bytes | None, acks: int = -1, version: int = 10) -> Any:
    """The single partition result of a Produce."""
    body = send_produce(driver, topic, partition, records, acks, version).body
    return body.responses[0].partition_responses[0]


def send_fetch(
    driver: CoreDriver,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    current_leader_epoch: int = -1,
    version: int = 16,
    by_id: uuid.UUID | None = None,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
) -> Pending:
    part_cls = driver.request_class(ApiKey.FETCH, version, "FetchPartition")
    topic_cls = driver.request_class(ApiKey.FETCH, version, "FetchTopic")
    fetch_partition = part_cls(partition=partition, current_leader_epoch=current_leader_epoch, fetch_offset=offset, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=partition_max_bytes)
    the_id = by_id if by_id is not None else (topic_id(driver, topic) if driver.broker.topics.by_name(topic) else uuid.UUID(int=0))
    fetch_topic = build(topic_cls, topic=topic, topic_id=the_id, partitions=(fetch_partition,))
    return driver.send(ApiKey.FETCH, version, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                       max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1, topics=(fetch_topic,),
                       forgotten_topics_data=(), rack_id="", cluster_id=None, replica_state=driver.request_class(ApiKey.FETCH, 16, "ReplicaState")())


def list_offset(driver: CoreDriver, topic: str, partition: int, timestamp: int, version: int = 7) -> Any:
    part_cls = driver.request_class(ApiKey.LIST_OFFSETS, version, "ListOffsetsPartition")
    topic_cls = driver.request_class(ApiKey.LIST_OFFSETS, version, "ListOffsetsTopic")
    body = driver.call(ApiKey.LIST_OFFSETS, version, replica_id=-1, isolation_level=0,
                       topics=(topic_cls(name=topic, partitions=(part_cls(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp),)),))
    return body.topics[0].partitions[0]


def offset_for_leader_epoch(driver: CoreDriver, topic: str, partition: int, epoch: int, current_leader_epoch: int = -1, version: int = 4) -> Any:
    part_cls = driver.request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderPartition")
    topic_cls = driver.request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, "OffsetForLeaderTopic")
    body = driver.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1,
                       topics=(topic_cls(topic=topic, partitions=(part_cls(partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=epoch),)),))
    return body.topics[0].partitions[0]


def init_producer_id(driver: CoreDriver, producer_id: int = -1, producer_epoch: int = -1, version: int = 4) -> Any:
    return driver.call(ApiKey.INIT_PRODUCER_ID, version, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                       producer_id=producer_id, producer_epoch=producer_epoch)
