"""Topic administration on the wire: Metadata (with auto-creation), CreateTopics and
DeleteTopics, for every offered version."""

from __future__ import annotations

import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.broker.topics import OFFSETS_TOPIC, InvalidTopicError, check_topic_name
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey
from cluster.storage.config import LogConfig

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

NO_THROTTLE = datetime.timedelta(0)
# Kafka's sentinel for "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_ZERO_UUID = uuid.UUID(int=0)
# Kafka sets no limit, but each partition costs files and memory; one bad CreateTopics
# (a fuzzed 2^31 count) must not exhaust the machine.
MAX_PARTITIONS_PER_TOPIC = 10_000


def handle_metadata(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    body = request.body
    cls = response_class(ApiKey.METADATA, version)
    broker_cls = payload_class(ApiKey.METADATA, version, "MetadataResponseBroker")
    topic_cls = payload_class(ApiKey.METADATA, version, "MetadataResponseTopic")
    partition_cls = payload_class(ApiKey.METADATA, version, "MetadataResponsePartition")
    allow_auto_create = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable

    requested: list[tuple[str | None, Any]]
    if body.topics is None or (version == 0 and not body.topics):
        requested = [(info.name, None) for info in broker.topics.all()]
    else:
        requested = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]

    topics = []
    for name, topic_id in requested:
        info = broker.topics.by_name(name) if name is not None else None
        if name is None:
            # A topic named by id alone (Metadata v12+ makes names nullable). Before v12 a
            # null name cannot even be encoded in the answer, so it is a bad request.
            info = broker.topics.by_id(topic_id) if topic_id is not None and version >= 12 else None
            if info is None:
                error = ErrorCode.unknown_topic_id if version >= 12 and topic_id is not None else ErrorCode.invalid_request
                topics.append(build(topic_cls, error_code=error, name=None if version >= 12 else "",
                                    topic_id=topic_id if topic_id is not None else _ZERO_UUID, is_internal=False,
                                    partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
        if info is None:
            error = ErrorCode.unknown_topic_or_partition
            try:
                check_topic_name(name)
                if allow_auto_create and name != OFFSETS_TOPIC:
                    info = broker.create_topic(name, broker.config.num_partitions, {})
                    error = ErrorCode.none
            except InvalidTopicError:
                error = ErrorCode.invalid_topic_exception
            if info is None:
                topics.append(build(topic_cls, error_code=error, name=name, topic_id=_ZERO_UUID, is_internal=False,
                                    partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                continue
        partitions = tuple(
            build(
                partition_cls,
                error_code=ErrorCode.none,
                partition_index=index,
                leader_id=broker.config.broker_id,
                leader_epoch=epoch,
                replica_nodes=(broker.config.broker_id,),
                isr_nodes=(broker.config.broker_id,),
                offline_replicas=(),
            )
            for index, epoch in enumerate(info.leader_epochs)
        )
        topics.append(build(topic_cls, error_code=ErrorCode.none, name=info.name, topic_id=info.topic_id, is_internal=info.is_internal,
                            partitions=partitions, topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    response = build(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=(build(broker_cls, node_id=broker.config.broker_id, host=broker.config.host, port=broker.config.port, rack=None),),
        cluster_id=broker.config.cluster_id,
        controller_id=broker.config.broker_id,
        topics=tuple(topics),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=ErrorCode.none,
    )
    reply(broker.respond(request, response))


def handle_create_topics(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    result_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicResult")
    results = []
    for topic in request.body.topics:
        error, message, partitions = _validate_new_topic(broker, topic)
        if error is ErrorCode.none and not request.body.validate_only:
            broker.create_topic(topic.name, partitions, {c.name: c.value for c in topic.configs if c.value is not None})
        results.append(build(result_cls, name=topic.name, error_code=error, error_message=message,
                             topic_config_error_code=ErrorCode.none, num_partitions=partitions if error is ErrorCode.none else -1,
                             replication_factor=1 if error is ErrorCode.none else -1, configs=None))
    reply(broker.respond(request, build(response_class(ApiKey.CREATE_TOPICS, version), throttle_time=NO_THROTTLE, topics=tuple(results))))


def _validate_new_topic(broker: Broker, topic: Any) -> tuple[ErrorCode, str | None, int]:
    try:
        check_topic_name(topic.name)
    except InvalidTopicError as error:
        return ErrorCode.invalid_topic_exception, str(error), -1
    if broker.topics.by_name(topic.name) is not None:
        return ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists", -1
    if topic.assignments:
        brokers = {b for a in topic.assignments for b in a.broker_ids}
        if brokers != {broker.config.broker_id}:
            return ErrorCode.invalid_replica_assignment, f"replica assignment names brokers {sorted(brokers)}; only {broker.config.broker_id} exists", -1
        partitions = len(topic.assignments)
    else:
        partitions = broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    if partitions < 1:
        return ErrorCode.invalid_partitions, f"number of partitions must be >= 1, got {partitions}", -1
    if partitions > MAX_PARTITIONS_PER_TOPIC:
        return ErrorCode.invalid_partitions, f"{partitions} partitions exceed this broker's limit of {MAX_PARTITIONS_PER_TOPIC} per topic", -1
    replication = broker.config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
    if replication != 1 and not topic.assignments:
        return ErrorCode.invalid_replication_factor, f"replication factor {replication} exceeds the 1 available broker", -1
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    try:
        LogConfig.from_properties({**broker.config.properties, **configs})
    except ValueError as error:
        return ErrorCode.invalid_config, str(error), -1
    return ErrorCode.none, None, partitions


def handle_delete_topics(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    result_cls = payload_class(ApiKey.DELETE_TOPICS, version, "DeletableTopicResult")
    results = []
    for name in request.body.topic_names:
        info = broker.topics.by_name(name)
        if info is None:
            error = ErrorCode.unknown_topic_or_partition
        elif info.is_internal:
            error = ErrorCode.topic_deletion_disabled
        else:
            broker.delete_topic(info)
            error = ErrorCode.none
        results.append(build(result_cls, name=name, error_code=error))
    reply(broker.respond(request, build(response_class(ApiKey.DELETE_TOPICS, version), throttle_time=NO_THROTTLE, responses=tuple(results))))
