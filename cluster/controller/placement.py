"""Where a new topic's replicas go, and which topic configs the controller accepts.

Placement is Kafka's rack-less scheme: partition i's first replica is broker
(start + i) mod n, so leaders go round robin from a random start; the followers sit at a
random shift from it, the shift growing by one every n partitions, so that the followers
of one broker's leaderships spread over the others instead of all landing on its neighbour.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.broker.env import Rng
from cluster.config import _bool, _int
from cluster.storage.config import LogConfig


def assign_replicas(broker_ids: list[int], partitions: int, replication_factor: int, rng: Rng) -> list[tuple[int, ...]]:
    """Replica lists (first = preferred leader) for `partitions` partitions over
    `broker_ids` (sorted, usable brokers); needs 1 <= replication_factor <= len(broker_ids)."""
    n = len(broker_ids)
    if not 1 <= replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} is not within 1 and the {n} brokers")
    start = rng.getrandbits(32) % n
    shift = rng.getrandbits(32) % n
    assignment: list[tuple[int, ...]] = []
    for index in range(partitions):
        if index > 0 and index % n == 0:
            shift += 1
        first = (start + index) % n
        replicas = [broker_ids[first]]
        for follower in range(replication_factor - 1):
            # 1 + (...) % (n - 1) lies in [1, n - 1]: never the first replica, and distinct
            # for distinct followers since replication_factor - 1 <= n - 1.
            replicas.append(broker_ids[(first + 1 + (shift + follower) % (n - 1)) % n])
        assignment.append(tuple(replicas))
    return assignment


def check_topic_configs(configs: Mapping[str, str]) -> str | None:
    """What is wrong with a topic's configs (brokers open its logs with them, so a bad value
    must be refused before it reaches the metadata log), or None."""
    try:
        LogConfig.from_properties(configs)
        _int(configs, "min.insync.replicas", 1, 1)
        _bool(configs, "unclean.leader.election.enable", False)
    except ValueError as error:
        return str(error)
    return None
