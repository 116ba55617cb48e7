"""Topic administration on the wire, answered from the broker's metadata image: Metadata
(with auto-creation), and CreateTopics and DeleteTopics, which only the controller decides:
they are forwarded to it, and answered once this broker's own image shows the outcome (so a
client that creates a topic and then asks for its metadata finds it)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply, Response
from cluster.broker.topics import INTERNAL_TOPICS, InvalidTopicError, check_topic_name
from cluster.protocol.codec import Request, build, encode_response_body, frame_response, payload_class, request_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

log = logging.getLogger(__name__)
NO_THROTTLE = datetime.timedelta(0)
# Kafka's sentinel for "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_ZERO_UUID = uuid.UUID(int=0)


class MetadataAnswers:
    """One broker's encoded Metadata answers, reused while its metadata image is unchanged.

    While partitions have no leader, clients ask for metadata as soon as an answer arrives
    (aiokafka's fetcher and sender do): with the controllers' links slowed, one 13-s simulated run
    answered 15,383 Metadata requests, and building and encoding them was most of its time.
    An answer depends on the image, the request's version, topics and auto-creation flag and on
    whether the broker is registered, and is kept under those until the image changes (a record
    applied moves `next_offset`; a replaced image is another object). An answer naming a missing
    topic is never kept: asking for one starts its auto-creation, and a later answer differs."""

    MAX_ENTRIES = 256  # distinct requests between two image changes; clients ask a handful

    def __init__(self) -> None:
        self._image: object = None
        self._next_offset = -1
        self._bodies: dict[tuple[Any, ...], bytes] = {}

    def _current(self, image: Any) -> dict[tuple[Any, ...], bytes]:
        if self._image is not image or self._next_offset != image.next_offset:
            self._image, self._next_offset = image, image.next_offset
            self._bodies.clear()
        return self._bodies

    def get(self, image: Any, key: tuple[Any, ...]) -> bytes | None:
        return self._current(image).get(key)

    def put(self, image: Any, key: tuple[Any, ...], encoded_body: bytes) -> None:
        bodies = self._current(image)
        if len(bodies) >= self.MAX_ENTRIES:
            bodies.pop(next(iter(bodies)))
        bodies[key] = encoded_body


def handle_metadata(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    body = request.body
    image = broker.controller_client.image
    allow_auto_create = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
    key = (version, allow_auto_create, broker.controller_client.registered,
           None if body.topics is None else tuple((t.name, getattr(t, "topic_id", None)) for t in body.topics))
    encoded = broker.metadata_answers.get(image, key)
    if encoded is None:
        response, complete = _metadata_answer(broker, request, image, allow_auto_create)
        encoded = encode_response_body(ApiKey.METADATA, version, response)
        if complete:
            broker.metadata_answers.put(image, key, encoded)
    reply(Response([frame_response(ApiKey.METADATA, version, request.correlation_id, encoded)]))


def _metadata_answer(broker: Broker, request: Request, image: Any, allow_auto_create: bool) -> tuple[Any, bool]:
    """The Metadata answer from `image`, and whether every topic asked for was there (an
    answer that can be reused until the image changes)."""
    version = request.api_version
    body = request.body
    complete = True
    cls = response_class(ApiKey.METADATA, version)
    broker_cls = payload_class(ApiKey.METADATA, version, "MetadataResponseBroker")
    topic_cls = payload_class(ApiKey.METADATA, version, "MetadataResponseTopic")
    partition_cls = payload_class(ApiKey.METADATA, version, "MetadataResponsePartition")

    requested: list[tuple[str | None, Any]]
    if body.topics is None or (version == 0 and not body.topics):
        requested = [(info.name, None) for info in broker.topics.all()]
    else:
        requested = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]

    topics = []
    for name, topic_id in requested:
        info = broker.topics.by_name(name) if name is not None else None
        if info is None:
            complete = False
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
                if allow_auto_create and name not in INTERNAL_TOPICS and broker.controller_client.registered:
                    # The last attempt's refusal (say RF above the live brokers) is reported
                    # once; the next request tries again.
                    failed = broker.auto_create_failures.pop(name, None)
                    if failed is not None:
                        error = failed
                    else:
                        _auto_create(broker, name)
                        error = ErrorCode.leader_not_available  # retriable: the client asks again
            except InvalidTopicError:
                error = ErrorCode.invalid_topic_exception
            topics.append(build(topic_cls, error_code=error, name=name, topic_id=_ZERO_UUID, is_internal=False,
                                partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        partitions = []
        for index, state in sorted(info.partitions.items()):
            offline = tuple(b for b in state.replicas if b not in image.brokers or image.brokers[b].fenced)
            partitions.append(build(
                partition_cls,
                error_code=ErrorCode.none if state.has_leader else ErrorCode.leader_not_available,
                partition_index=index,
                leader_id=state.leader,
                leader_epoch=state.leader_epoch,
                replica_nodes=state.replicas,
                isr_nodes=state.isr,
                offline_replicas=offline,
            ))
        topics.append(build(topic_cls, error_code=ErrorCode.none, name=info.name, topic_id=info.topic_id, is_internal=info.is_internal,
                            partitions=tuple(partitions), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    listed = [(b.broker_id, b.host, b.port) for b in image.usable_brokers()]
    if broker.controller_client.registered and all(node != broker.config.broker_id for node, _, _ in listed):
        # Once registered, list ourselves even before the controller unfences us: the client
        # reached us and may bootstrap from our answer.
        listed.append((broker.config.broker_id, broker.config.advertised_host, broker.config.advertised_port))
    broker_entries = [build(broker_cls, node_id=node, host=host, port=port, rack=None) for node, host, port in sorted(listed)]
    response = build(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=tuple(broker_entries),
        cluster_id=broker.config.cluster_id,
        # As a KRaft broker does, name a broker as the "controller" clients send admin
        # requests to: itself; it forwards them to the real controller.
        controller_id=broker.config.broker_id,
        topics=tuple(topics),
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        error_code=ErrorCode.none,
    )
    return response, complete


def _auto_create(broker: Broker, name: str) -> None:
    """Ask the controller for `name` with num.partitions and default.replication.factor (not
    capped to the live brokers: too few brokers is an error the client sees)."""
    if name in broker.auto_creating:
        return
    broker.auto_creating.add(name)
    version = 5
    topic_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopic", EntityType.request)
    body = build(request_class(ApiKey.CREATE_TOPICS, version), topics=(topic_cls(name=name, num_partitions=broker.config.num_partitions,
                 replication_factor=broker.config.default_replication_factor, assignments=(), configs=()),),
                 timeout=datetime.timedelta(seconds=10), validate_only=False)

    def done(result: Any) -> None:
        broker.auto_creating.discard(name)
        if not result.ok:
            log.info("auto-creating topic %s: the controller did not answer (%s); a later Metadata request retries", name, result.error)
            return
        answer = result.body.topics[0]
        if answer.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.warning("auto-creating topic %s refused by the controller: %s (%s)", name, answer.error_code.name, answer.error_message)
            broker.auto_create_failures[name] = answer.error_code

    broker.controller_client.create_topics(body, version, done)


def handle_create_topics(broker: Broker, request: Request, reply: Reply) -> None:
    _forward(broker, request, reply, broker.controller_client.create_topics, _created_names)


def _created_names(body: Any) -> list[tuple[str, bool]]:
    """(topic name, created) per result of a CreateTopics answer."""
    return [(t.name, t.error_code == ErrorCode.none) for t in body.topics]


def _deleted_names(body: Any) -> list[tuple[str, bool]]:
    return [(t.name, t.error_code == ErrorCode.none) for t in body.responses]


def _forward(broker: Broker, request: Request, reply: Reply, send: Any, outcome: Any) -> None:
    """Send the client's request to the controller, and answer the client with the
    controller's answer once our image reflects it (or the request's timeout passes)."""
    version = request.api_version
    timeout_ms = request.body.timeout.total_seconds() * 1000 if hasattr(request.body.timeout, "total_seconds") else float(request.body.timeout)
    creating = request.api_key == ApiKey.CREATE_TOPICS
    validate_only = getattr(request.body, "validate_only", False)
    answered = [False]

    def finish(response: Response) -> None:
        if not answered[0]:
            answered[0] = True
            reply(response)

    def done(result: Any) -> None:
        if not result.ok:
            finish(_all_failed(broker, request, ErrorCode.request_timed_out if "timed out" in (result.error or "") else ErrorCode.not_controller,
                               result.error))
            return
        response = broker.respond(request, result.body)
        changed = [name for name, ok in outcome(result.body) if ok]
        if validate_only or not changed:
            finish(response)
            return

        def visible() -> bool:
            if answered[0]:
                return True
            present = [broker.topics.by_name(name) is not None for name in changed]
            if all(present) if creating else not any(present):
                finish(response)
                return True
            return False

        if timeout_ms <= 0:
            finish(response)  # the client asked not to wait
            return
        broker.when_metadata(visible)
        broker.scheduler.call_later(timeout_ms, lambda: finish(_timed_out(broker, request, result.body, set(changed))))

    if not broker.controller_client.registered:
        finish(_all_failed(broker, request, ErrorCode.not_controller, "this broker has not reached the controller yet"))
        return
    send(request.body, version, done)


def _timed_out(broker: Broker, request: Request, body: Any, pending: set[str]) -> Response:
    """The controller's answer with REQUEST_TIMED_OUT for the topics this broker's image does
    not show yet (the change is decided, but this broker cannot serve it yet)."""
    creating = request.api_key == ApiKey.CREATE_TOPICS
    results = body.topics if creating else body.responses

    def visible(name: str) -> bool:
        present = broker.topics.by_name(name) is not None
        return present if creating else not present

    changed = tuple(dataclasses.replace(r, error_code=ErrorCode.request_timed_out, **({"error_message": "timed out waiting for the metadata"}
                                                                                      if hasattr(r, "error_message") else {}))
                    if r.name in pending and not visible(r.name) else r for r in results)
    return broker.respond(request, dataclasses.replace(body, **({"topics": changed} if creating else {"responses": changed})))


def _all_failed(broker: Broker, request: Request, error: ErrorCode, message: str | None) -> Response:
    version = request.api_version
    if request.api_key == ApiKey.CREATE_TOPICS:
        result_cls = payload_class(ApiKey.CREATE_TOPICS, version, "CreatableTopicResult")
        results = tuple(build(result_cls, name=t.name, error_code=error, error_message=message, topic_config_error_code=ErrorCode.none,
                              num_partitions=-1, replication_factor=-1, configs=None) for t in request.body.topics)
        return broker.respond(request, build(response_class(ApiKey.CREATE_TOPICS, version), throttle_time=NO_THROTTLE, topics=results))
    result_cls = payload_class(ApiKey.DELETE_TOPICS, version, "DeletableTopicResult")
    results = tuple(build(result_cls, name=name, error_code=error) for name in request.body.topic_names)
    return broker.respond(request, build(response_class(ApiKey.DELETE_TOPICS, version), throttle_time=NO_THROTTLE, responses=results))


def handle_delete_topics(broker: Broker, request: Request, reply: Reply) -> None:
    _forward(broker, request, reply, broker.controller_client.delete_topics, _deleted_names)
