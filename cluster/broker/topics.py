"""Topic names and ids: Kafka's naming rules, the internal topics, and topic id generation.
Which topics exist, with which partitions, is the controller's metadata (cluster.metadata)."""

from __future__ import annotations

import re
import uuid

from cluster.broker.env import Rng
from cluster.metadata.image import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC  # noqa: F401 - re-exported

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class InvalidTopicError(ValueError):
    """A topic name Kafka would refuse (INVALID_TOPIC_EXCEPTION)."""


def check_topic_name(name: str | None) -> str:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-]")
    return name


def new_topic_id(rng: Rng) -> uuid.UUID:
    # Kafka never hands out the zero UUID or the sentinel ids; 122 random bits make them moot.
    return uuid.UUID(int=rng.getrandbits(128), version=4)
