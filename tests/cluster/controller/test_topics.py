"""CreateTopics and DeleteTopics as brokers forward them (every version clients send), and
the replica placement behind them."""

from __future__ import annotations

import datetime
import random
import uuid
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode

from cluster.controller.placement import assign_replicas
from cluster.metadata.records import PartitionRecord, RemoveTopicRecord, TopicRecord
from cluster.protocol.versions import ApiKey
from tests.cluster.controller.driver import SESSION_TIMEOUT_MS, ControllerDriver, req


@pytest.fixture
def three(controller: ControllerDriver) -> ControllerDriver:
    controller.start_brokers([0, 1, 2])
    return controller


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6, 7])
def test_create_is_one_durable_batch_with_the_whole_isr(three: ControllerDriver, version: int) -> None:
    end = three.end_offset
    result = three.create_topic("orders", partitions=6, replication_factor=3, version=version)
    assert result.error_code == ErrorCode.none and result.name == "orders"
    if version >= 5:
        assert result.num_partitions == 6 and result.replication_factor == 3
    records = three.records(end)
    assert [type(r) for _, r in records] == [TopicRecord] + [PartitionRecord] * 6
    topic = three.controller.image.topic("orders")
    assert topic is not None
    if version >= 7:
        assert result.topic_id == topic.topic_id
    for index, partition in sorted(topic.partitions.items()):
        assert len(set(partition.replicas)) == 3
        assert partition.leader == partition.replicas[0] and partition.isr == partition.replicas
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)


def test_placement_spreads_leaders_and_followers(three: ControllerDriver) -> None:
    three.start_brokers([3, 4])
    three.create_topic("wide", partitions=20, replication_factor=3)
    topic = three.controller.image.topic("wide")
    leaders = Counter(p.leader for p in topic.partitions.values())
    replicas = Counter(b for p in topic.partitions.values() for b in p.replicas)
    assert leaders == {b: 4 for b in range(5)}  # round robin over the five brokers
    assert replicas == {b: 12 for b in range(5)}
    # Followers of one broker's leaderships do not all sit on the same brokers.
    followers_of_0 = {p.replicas[1:] for p in topic.partitions.values() if p.leader == 0}
    assert len(followers_of_0) > 1


def test_assign_replicas_properties() -> None:
    for seed in range(50):
        rng = random.Random(seed)
        brokers = sorted(rng.sample(range(20), rng.randint(1, 8)))
        rf = rng.randint(1, len(brokers))
        partitions = rng.randint(1, 40)
        assignment = assign_replicas(brokers, partitions, rf, random.Random(seed))
        assert len(assignment) == partitions
        for replicas in assignment:
            assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
        leaders = Counter(r[0] for r in assignment)
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1
        # Same seed, same placement.
        assert assign_replicas(brokers, partitions, rf, random.Random(seed)) == assignment
    with pytest.raises(ValueError, match="replication factor 4 is not within 1 and the 3 brokers"):
        assign_replicas([0, 1, 2], 1, 4, random.Random(0))


def test_replication_factor_beyond_usable_brokers(three: ControllerDriver) -> None:
    result = three.create_topic("t", partitions=1, replication_factor=4)
    assert result.error_code == ErrorCode.invalid_replication_factor
    assert "4" in result.error_message and "3" in result.error_message
    # A fenced broker does not count.
    three.keep_alive([0, 1], SESSION_TIMEOUT_MS + 500)
    result = three.create_topic("t", partitions=1, replication_factor=3)
    assert result.error_code == ErrorCode.invalid_replication_factor
    assert "replication factor 3" in result.error_message and "2 available brokers" in result.error_message
    assert three.controller.image.topic("t") is None
    assert three.create_topic("t", partitions=1, replication_factor=0).error_code == ErrorCode.invalid_replication_factor


def test_defaults_from_the_controller_config(make_controller) -> None:
    controller = make_controller(properties={"num.partitions": "4", "default.replication.factor": "2"})
    controller.start_brokers([0, 1, 2])
    assert controller.create_topic("d", partitions=-1, replication_factor=-1).error_code == ErrorCode.none
    topic = controller.controller.image.topic("d")
    assert topic.num_partitions == 4 and all(len(p.replicas) == 2 for p in topic.partitions.values())


def test_refusals(three: ControllerDriver) -> None:
    assert three.create_topic("ok", partitions=1, replication_factor=1).error_code == ErrorCode.none
    assert three.create_topic("ok", partitions=1, replication_factor=1).error_code == ErrorCode.topic_already_exists
    bad_name = three.create_topic("no/slash", partitions=1, replication_factor=1)
    assert bad_name.error_code == ErrorCode.invalid_topic_exception and "no/slash" in bad_name.error_message
    assert three.create_topic("zero", partitions=0, replication_factor=1).error_code == ErrorCode.invalid_partitions
    bad_config = three.create_topic("cfg", partitions=1, replication_factor=1, configs={"retention.ms": "soon"})
    assert bad_config.error_code == ErrorCode.invalid_config and "retention.ms" in bad_config.error_message
    for key, value in [("min.insync.replicas", "0"), ("unclean.leader.election.enable", "maybe")]:
        result = three.create_topic("cfg", partitions=1, replication_factor=1, configs={key: value})
        assert result.error_code == ErrorCode.invalid_config and key in result.error_message
    assert set(three.controller.image.topics_by_name) == {"ok"}


def test_names_colliding_or_repeated(three: ControllerDriver) -> None:
    assert three.create_topic("a.b", partitions=1, replication_factor=1).error_code == ErrorCode.none
    collision = three.create_topic("a_b", partitions=1, replication_factor=1)
    assert collision.error_code == ErrorCode.invalid_topic_exception and "a.b" in collision.error_message
    topic = req(ApiKey.CREATE_TOPICS, 5, "CreatableTopic")
    body = three.request(ApiKey.CREATE_TOPICS, 5, timeout=datetime.timedelta(seconds=5), validate_only=False,
                         topics=tuple(topic(name=n, num_partitions=1, replication_factor=1, assignments=(), configs=()) for n in ("x", "y", "x")))
    assert [(t.name, t.error_code) for t in body.topics] == [("x", ErrorCode.invalid_request), ("y", ErrorCode.none), ("x", ErrorCode.invalid_request)]
    assert three.controller.image.topic("x") is None and three.controller.image.topic("y") is not None


def test_explicit_assignment(three: ControllerDriver) -> None:
    result = three.create_topic("manual", assignments={0: [2, 0], 1: [1, 2]})
    assert result.error_code == ErrorCode.none
    assert three.partition("manual", 0).replicas == (2, 0) and three.partition("manual", 0).leader == 2
    assert three.partition("manual", 1).replicas == (1, 2)
    for assignments in [{0: [0, 0]}, {0: [0, 9]}, {1: [0]}, {0: [0, 1], 1: [2]}]:
        assert three.create_topic("bad", assignments=assignments).error_code == ErrorCode.invalid_replica_assignment, assignments


def test_explicit_assignment_naming_a_fenced_broker(three: ControllerDriver) -> None:
    three.keep_alive([0, 1], SESSION_TIMEOUT_MS + 500)
    assert three.create_topic("m", assignments={0: [2, 1]}).error_code == ErrorCode.none
    state = three.partition("m")
    assert state.replicas == (2, 1) and state.leader == 1 and state.isr == (1,)


def test_validate_only_writes_nothing(three: ControllerDriver) -> None:
    end = three.end_offset
    result = three.create_topic("dry", partitions=3, replication_factor=2, validate_only=True)
    assert result.error_code == ErrorCode.none and result.num_partitions == 3
    assert three.end_offset == end and three.controller.image.topic("dry") is None
    refused = three.create_topic("dry", partitions=3, replication_factor=5, validate_only=True)
    assert refused.error_code == ErrorCode.invalid_replication_factor


@pytest.mark.parametrize("version", [1, 4, 5, 6])
def test_delete_by_name(three: ControllerDriver, version: int) -> None:
    three.create_topic("doomed", partitions=2, replication_factor=2)
    end = three.end_offset
    [result] = three.delete_topics(["doomed"], version=version)
    assert result.error_code == ErrorCode.none
    [(_, record)] = three.records(end)
    assert isinstance(record, RemoveTopicRecord)
    assert three.controller.image.topic("doomed") is None
    [again] = three.delete_topics(["doomed"], version=version)
    assert again.error_code == ErrorCode.unknown_topic_or_partition


def test_delete_by_topic_id(three: ControllerDriver) -> None:
    three.create_topic("by-id", partitions=1, replication_factor=1)
    topic_id = three.controller.image.topic("by-id").topic_id
    [result] = three.delete_topics(topic_ids=[topic_id])
    assert result.error_code == ErrorCode.none and result.name == "by-id" and result.topic_id == topic_id
    [unknown] = three.delete_topics(topic_ids=[uuid.uuid4()])
    assert unknown.error_code == ErrorCode.unknown_topic_id


def test_internal_topics_are_not_deleted(three: ControllerDriver) -> None:
    three.create_topic("__consumer_offsets", partitions=1, replication_factor=1)
    [result] = three.delete_topics(["__consumer_offsets"])
    assert result.error_code == ErrorCode.topic_deletion_disabled
    assert three.controller.image.topic("__consumer_offsets") is not None


def test_topic_id_and_placement_follow_the_seed(make_controller) -> None:
    placements = []
    for _ in range(2):
        controller = make_controller(seed=42)
        controller.start_brokers([0, 1, 2, 3])
        controller.create_topic("s", partitions=8, replication_factor=2)
        topic = controller.controller.image.topic("s")
        placements.append((topic.topic_id, [p.replicas for _, p in sorted(topic.partitions.items())]))
    assert placements[0] == placements[1]
