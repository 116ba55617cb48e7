"""CreatePartitions on the wire: decided by the controller (forwarded as the client sent it),
answered once this broker's image shows the new partitions, so a client that adds partitions
and then asks for metadata finds them (or REQUEST_TIMED_OUT at the request's timeout)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cluster.broker.env import Reply
from cluster.protocol.codec import Request, build, payload_class, response_class
from cluster.protocol.versions import ApiKey

if TYPE_CHECKING:
    from cluster.broker.broker import Broker

NO_THROTTLE = datetime.timedelta(0)


def forward_to_controller(broker: Broker, request: Request, failed: Callable[[ErrorCode, str | None], None],
                          on_answer: Callable[[Any], None]) -> None:
    """Forward a client's admin request to the controller as the client sent it; the
    controller's answer goes to `on_answer`. A broker that has not reached the controller, or
    a lost or timed-out request, fails the whole request with the error a client retries on."""

    def done(result: Any) -> None:
        if not result.ok:
            failed(ErrorCode.request_timed_out if "timed out" in (result.error or "") else ErrorCode.not_controller, result.error)
        else:
            on_answer(result.body)

    if not broker.controller_client.registered:
        failed(ErrorCode.not_controller, "this broker has not reached the controller yet")
        return
    broker.controller_client.forward(request.api_key, request.api_version, request.body, done)


def handle_create_partitions(broker: Broker, request: Request, reply: Reply) -> None:
    version = request.api_version
    timeout = request.body.timeout
    timeout_ms = timeout.total_seconds() * 1000 if hasattr(timeout, "total_seconds") else float(timeout)
    wanted = {t.name: int(t.count) for t in request.body.topics}
    answered = [False]

    def finish(body: Any) -> None:
        if not answered[0]:
            answered[0] = True
            reply(broker.respond(request, body))

    def all_failed(error: ErrorCode, message: str | None) -> None:
        result_cls = payload_class(ApiKey.CREATE_PARTITIONS, version, "CreatePartitionsTopicResult")
        results = tuple(result_cls(name=t.name, error_code=error, error_message=message) for t in request.body.topics)
        finish(build(response_class(ApiKey.CREATE_PARTITIONS, version), throttle_time=NO_THROTTLE, results=results))

    def shown(name: str) -> bool:
        image = broker.topics.by_name(name)
        return image is not None and image.num_partitions >= wanted[name]

    def answered_by_controller(body: Any) -> None:
        added = [r.name for r in body.results if r.error_code == ErrorCode.none]
        if request.body.validate_only or not added or timeout_ms <= 0:
            finish(body)
            return

        def visible() -> bool:
            if answered[0] or all(shown(name) for name in added):
                finish(body)
                return True
            return False

        def timed_out() -> None:
            late = tuple(dataclasses.replace(r, error_code=ErrorCode.request_timed_out, error_message="timed out waiting for the metadata")
                         if r.name in added and not shown(r.name) else r for r in body.results)
            finish(dataclasses.replace(body, results=late))

        broker.when_metadata(visible)
        broker.scheduler.call_later(timeout_ms, timed_out)

    forward_to_controller(broker, request, all_failed, answered_by_controller)


def handle_elect_leaders(broker: Broker, request: Request, reply: Reply) -> None:
    """ElectLeaders is decided by the controller; answered once committed (brokers take the
    new leaders from their metadata fetch, which the commit wakes)."""
    version = request.api_version

    def failed(error: ErrorCode, message: str | None) -> None:
        body = build(response_class(ApiKey.ELECT_LEADERS, version), throttle_time=NO_THROTTLE, error_code=error, replica_election_results=())
        reply(broker.respond(request, body))

    forward_to_controller(broker, request, failed, lambda body: reply(broker.respond(request, body)))
