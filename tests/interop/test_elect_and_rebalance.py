"""ElectLeaders through confluent-kafka and kafka-python on one and three brokers (a new
topic's partitions are already led by their preferred replica: ELECTION_NOT_NEEDED, and an
unclean election of a led partition is not needed either), and a confluent-kafka group
rebalancing as members join and leave."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

TIMEOUT_S = 15
ELECTION_NOT_NEEDED = 84


def _create(cluster, topic: str, partitions: int) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, min(3, len(cluster.brokers)))], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    return admin


def test_confluent_elect_leaders_of_led_partitions_is_election_not_needed(interop_cluster, names) -> None:
    topic = f"{names}-t"
    admin = _create(interop_cluster, topic, 2)
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        try:
            outcome = admin.elect_leaders(election, [TopicPartition(topic, 0), TopicPartition(topic, 1)]).result(TIMEOUT_S)
            codes = sorted(e.code() for e in outcome.values() if e is not None)
        except KafkaException as error:
            codes = [error.args[0].code()] * 2
        assert codes == [ELECTION_NOT_NEEDED] * 2, (election, codes)


def test_kafka_python_elect_leaders(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic, 1)
    client = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        response = client.elect_leaders(0, {topic: [0]}, timeout_ms=TIMEOUT_S * 1000, raise_errors=False)
    finally:
        client.close()
    (result,) = response.replica_election_results
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, ELECTION_NOT_NEEDED)]


def _assigned(consumer: Consumer, until, what: str) -> set[int]:
    deadline = time.monotonic() + 30
    while True:
        consumer.poll(0.2)
        partitions = {tp.partition for tp in consumer.assignment()}
        if until(partitions):
            return partitions
        assert time.monotonic() < deadline, f"{what}: assigned {sorted(partitions)}"


def test_confluent_group_rebalances_as_members_join_and_leave(interop_cluster, names) -> None:
    topic, group = f"{names}-t", f"{names}-g"
    _create(interop_cluster, topic, 4)
    config = {"bootstrap.servers": interop_cluster.bootstrap_servers, "group.id": group, "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500}
    first, second = Consumer(config), Consumer(config)
    second_open = True
    try:
        first.subscribe([topic])
        assert _assigned(first, lambda p: len(p) == 4, "the only member gets every partition") == {0, 1, 2, 3}
        second.subscribe([topic])
        deadline = time.monotonic() + 30
        while True:
            first.poll(0.1)
            second.poll(0.1)
            mine = {tp.partition for tp in first.assignment()}
            theirs = {tp.partition for tp in second.assignment()}
            if len(mine) == 2 and len(theirs) == 2:
                break
            assert time.monotonic() < deadline, f"no even split: {sorted(mine)} / {sorted(theirs)}"
        assert mine | theirs == {0, 1, 2, 3} and not mine & theirs
        second.close()  # LeaveGroup: the group rebalances at once, not after the session timeout
        second_open = False
        assert _assigned(first, lambda p: len(p) == 4, "the remaining member takes every partition back") == {0, 1, 2, 3}
    finally:
        first.close()
        if second_open:
            second.close()
