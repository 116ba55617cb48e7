"""The answer of a controller that is not the active one (it follows, an election is under
way, or it lost leadership before the request's records were committed): Kafka's
NOT_CONTROLLER, on every item the request names, so a broker relaying a forwarded admin
request, and the broker's own lifecycle requests, see it and move to the active controller.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

NO_THROTTLE = datetime.timedelta(0)
MESSAGE = "this controller is not the active controller"


def not_controller_body(request: Request) -> Any:
    """The response body to `request` refusing it with NOT_CONTROLLER."""
    key, version, body = request.api_key, request.api_version, request.body
    error = ErrorCode.not_controller
    cls = response_class(key, version)
    if key == ApiKey.BROKER_REGISTRATION:
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, broker_epoch=-1)
    if key == ApiKey.BROKER_HEARTBEAT:
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, is_caught_up=False, is_fenced=True, should_shut_down=False)
    if key == ApiKey.ALLOCATE_PRODUCER_IDS:
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, producer_id_start=-1, producer_id_len=0)
    if key == ApiKey.ALTER_PARTITION:
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, topics=())
    if key == ApiKey.CREATE_TOPICS:
        result = payload_class(key, version, "CreatableTopicResult")
        return build(cls, throttle_time=NO_THROTTLE, topics=tuple(
            build(result, name=t.name, topic_id=uuid.UUID(int=0), error_code=error, error_message=MESSAGE,
                  topic_config_error_code=ErrorCode.none, num_partitions=-1, replication_factor=-1, configs=None)
            for t in body.topics))
    if key == ApiKey.DELETE_TOPICS:
        result = payload_class(key, version, "DeletableTopicResult")
        named = [(t.name, t.topic_id) for t in body.topics] if version >= 6 else [(n, uuid.UUID(int=0)) for n in body.topic_names]
        return build(cls, throttle_time=NO_THROTTLE, responses=tuple(
            build(result, name=name, topic_id=topic_id or uuid.UUID(int=0), error_code=error, error_message=MESSAGE)
            for name, topic_id in named))
    if key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        result = payload_class(key, version, "AlterConfigsResourceResponse")
        return build(cls, throttle_time=NO_THROTTLE, responses=tuple(
            build(result, error_code=error, error_message=MESSAGE, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in body.resources))
    if key == ApiKey.CREATE_PARTITIONS:
        result = payload_class(key, version, "CreatePartitionsTopicResult")
        return build(cls, throttle_time=NO_THROTTLE, results=tuple(
            build(result, name=t.name, error_code=error, error_message=MESSAGE) for t in body.topics))
    if key == ApiKey.ELECT_LEADERS:
        topic_cls = payload_class(key, version, "ReplicaElectionResult")
        partition_cls = payload_class(key, version, "PartitionResult")
        wanted = [] if body.topic_partitions is None else [(t.topic, t.partitions) for t in body.topic_partitions]
        return build(cls, throttle_time=NO_THROTTLE, error_code=error, replica_election_results=tuple(
            build(topic_cls, topic=name, partition_result=tuple(
                build(partition_cls, partition_id=int(i), error_code=error, error_message=MESSAGE) for i in indices))
            for name, indices in wanted))
    raise ValueError(f"API key {key} has no NOT_CONTROLLER answer here")

