"""DescribeProducers (v0): the idempotent producers a hosted replica knows for each requested
partition, from its producer state (any replica answers, as in Kafka, where the admin client
may name the broker to ask)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker



def handle_describe_producers(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    topic_cls = payload_class(ApiKey.DESCRIBE_PRODUCERS, version, "TopicResponse")
    partition_cls = payload_class(ApiKey.DESCRIBE_PRODUCERS, version, "PartitionResponse")
    state_cls = payload_class(ApiKey.DESCRIBE_PRODUCERS, version, "ProducerState")
    topics = []
    for topic in request.body.topics:
        info = broker.topics.by_name(topic.name)
        partitions = []
        for index in topic.partition_indexes:
            partition = broker.partition(topic.name, index)
            if partition is None:
                # As Kafka's getPartitionOrError: a partition of the cluster that another broker hosts.
                known = info is not None and index in info.partitions
                error = ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition
                partitions.append(build(partition_cls, partition_index=index, error_code=error,
                                        error_message=f"{topic.name}-{index} is not hosted by broker {broker.config.broker_id}", active_producers=()))
                continue
            producers = tuple(
                build(state_cls, producer_id=producer_id, producer_epoch=entry.producer_epoch, last_sequence=entry.last_sequence,
                      last_timestamp=entry.last_timestamp_ms, coordinator_epoch=entry.coordinator_epoch, current_txn_start_offset=entry.current_txn_first_offset)
                for producer_id, entry in partition.producers.entries()
            )
            partitions.append(build(partition_cls, partition_index=index, error_code=ErrorCode.none, error_message=None, active_producers=producers))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    reply(broker.respond(request, build(response_class(ApiKey.DESCRIBE_PRODUCERS, version), throttle_time=datetime.timedelta(0), topics=tuple(topics))))
