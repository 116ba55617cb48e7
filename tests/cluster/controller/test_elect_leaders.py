"""ElectLeaders through confluent-kafka on a real 3-broker cluster: after its preferred leader
restarts, a partition is led by another replica; a preferred election gives leadership back
(and a second one is ELECTION_NOT_NEEDED)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka import ElectionType

TIMEOUT_S = 20


def _state(admin: AdminClient, topic: str):
    partition = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions[0]
    return partition.leader, list(partition.replicas), sorted(partition.isrs)


def _until(check, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_preferred_election_returns_leadership_to_the_first_replica(make_cluster) -> None:
    cluster = make_cluster(brokers=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("led", 1, 3)], operation_timeout=TIMEOUT_S)["led"].result(TIMEOUT_S)
    leader, replicas, _ = _state(admin, "led")
    preferred = replicas[0]
    assert leader == preferred
    cluster.stop(preferred)  # controlled shutdown: another replica takes over
    cluster.start(preferred)
    _until(lambda: _state(admin, "led")[2] == sorted(replicas) and _state(admin, "led")[0] != preferred, "the preferred replica is back in the ISR, not leading")

    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("led", 0)]).result(TIMEOUT_S)
    _until(lambda: _state(admin, "led")[0] == preferred, "the preferred replica leads again")

    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("led", 0)])
    try:
        outcome = results.result(TIMEOUT_S)
        errors = [e for e in outcome.values() if e is not None]
    except KafkaException as error:
        errors = [error.args[0]]
    assert [e.code() for e in errors] == [84], errors  # ELECTION_NOT_NEEDED


def test_unclean_election_gives_a_leaderless_partition_a_replica_outside_the_isr(make_cluster) -> None:
    cluster = make_cluster(brokers=2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("stranded", 1, 2)], operation_timeout=TIMEOUT_S)["stranded"].result(TIMEOUT_S)
    leader, replicas, _ = _state(admin, "stranded")
    other = next(b for b in replicas if b != leader)
    cluster.stop(other)  # the ISR shrinks to [leader]
    cluster.stop(leader)  # leaderless: the only ISR member is down
    cluster.start(other)
    survivor = AdminClient({"bootstrap.servers": next(b.address for b in cluster.brokers if b.broker_id == other)})
    _until(lambda: _state(survivor, "stranded")[0] == -1, "no leader: the live replica is outside the ISR and unclean election is off")

    survivor.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("stranded", 0)]).result(TIMEOUT_S)
    _until(lambda: _state(survivor, "stranded")[0] == other, "the replica outside the ISR leads after an unclean election")
