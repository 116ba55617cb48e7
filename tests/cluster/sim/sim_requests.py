"""Client requests against a SimCluster (real frames through the virtual network)."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.protocol.codec import build, payload_class
from cluster.protocol.records import Record, build_batch, read_records
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCall, SimCluster
from cluster.storage.batch import split_batches


def req(api_key: int, version: int, name: str) -> type:
    return payload_class(api_key, version, name, EntityType.request)


@dataclass(frozen=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def create_topic(sim: SimCluster, broker: int, name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None = None) -> Any:
    topic_cls = req(ApiKey.CREATE_TOPICS, 5, "CreatableTopic")
    config_cls = req(ApiKey.CREATE_TOPICS, 5, "CreatableTopicConfig")
    topic = topic_cls(name=name, num_partitions=partitions, replication_factor=replication_factor, assignments=(),
                      configs=tuple(config_cls(name=k, value=v) for k, v in (configs or {}).items()))
    body = sim.call(broker, ApiKey.CREATE_TOPICS, 5, topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)
    return body.topics[0]


def partition_info(sim: SimCluster, broker: int, topic: str, partition: int = 0) -> PartitionInfo | None:
    """What `broker` reports in Metadata (None if it does not answer or know the partition)."""
    topic_cls = req(ApiKey.METADATA, 12, "MetadataRequestTopic")
    pending = sim.send(broker, ApiKey.METADATA, 12, request_timeout_ms=2000, topics=(build(topic_cls, name=topic, topic_id=uuid.UUID(int=0)),),
                       allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    sim.run_until(lambda: pending.done, 5000, step_ms=1, what="a Metadata answer")
    if not pending.result or not pending.result.ok:
        return None
    for t in pending.body.topics:
        if t.name == topic:
            for p in t.partitions:
                if p.partition_index == partition:
                    return PartitionInfo(p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))
    return None


def send_produce(sim: SimCluster, broker: int, topic: str, partition: int, values: list[bytes], acks: int = -1,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, timeout_ms: int = 5000) -> SimCall:
    data_cls = req(ApiKey.PRODUCE, 9, "PartitionProduceData")
    topic_cls = req(ApiKey.PRODUCE, 9, "TopicProduceData")
    batch = build_batch([Record(None, v) for v in values], base_offset=0, timestamp_ms=sim.clock.wall_ms(),
                        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)
    return sim.send(broker, ApiKey.PRODUCE, 9, request_timeout_ms=timeout_ms + 5000, transactional_id=None, acks=acks,
                    timeout=datetime.timedelta(milliseconds=timeout_ms),
                    topic_data=(topic_cls(name=topic, partition_data=(data_cls(index=partition, records=batch),)),))


def produce_result(call: SimCall) -> tuple[ErrorCode, int]:
    """(error, base offset) of a single-partition produce; connection errors raise."""
    p = call.body.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def read_all(sim: SimCluster, broker: int, topic: str, partition: int = 0, leader_epoch: int = -1) -> list[tuple[int, bytes]]:
    """(offset, value) of every record `broker` serves to a consumer, from offset 0."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    part_cls = req(ApiKey.FETCH, 12, "FetchPartition")
    topic_cls = req(ApiKey.FETCH, 12, "FetchTopic")
    while True:
        fetch_partition = build(part_cls, partition=partition, current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=-1,
                                log_start_offset=-1, partition_max_bytes=1 << 20)
        body = sim.call(broker, ApiKey.FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 24,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=(build(topic_cls, topic=topic, partitions=(fetch_partition,)),), forgotten_topics_data=(), rack_id="")
        answer = body.responses[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            raise AssertionError(f"fetch from broker {broker} at {offset}: {answer.error_code.name}")
        records = answer.records or b""
        if not records:
            return out
        for _, batch in split_batches(records):
            for record in read_records(bytes(batch)):
                if record.offset >= offset:
                    out.append((record.offset, record.value or b""))
        offset = out[-1][0] + 1 if out else offset
