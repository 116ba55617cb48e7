"""AlterPartition: every refusal of KIP-497/KIP-903 and the accepted change, v2 and v3."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata.records import PartitionRecord
from cluster.protocol.codec import build
from cluster.protocol.versions import ApiKey
from tests.cluster.controller.driver import SESSION_TIMEOUT_MS, ControllerDriver, req


@pytest.fixture
def three(controller: ControllerDriver) -> ControllerDriver:
    """Brokers 0-2 live; topic t with replicas [0, 1, 2], leader 0, ISR shrunk to [0, 1]."""
    controller.start_brokers([0, 1, 2])
    controller.create_topic("t", partitions=2, replication_factor=3, assignments={0: [0, 1, 2], 1: [1, 2, 0]})
    assert controller.alter_partition(controller.partition("t"), [0, 1])[0] == ErrorCode.none
    return controller


def test_shrink_and_expand_bump_only_the_partition_epoch(three: ControllerDriver) -> None:
    state = three.partition("t")
    assert state.isr == (0, 1) and state.partition_epoch == 1 and state.leader_epoch == 0
    end = three.end_offset
    error, answer = three.alter_partition(state, [0, 1, 2])
    assert error == ErrorCode.none
    assert (answer.leader_id, answer.leader_epoch, tuple(answer.isr), answer.partition_epoch) == (0, 0, (0, 1, 2), 2)
    after = three.partition("t")
    assert after.isr == (0, 1, 2) and after.leader_epoch == 0 and after.partition_epoch == 2
    [(offset, record)] = three.records(end)
    assert offset == end and isinstance(record, PartitionRecord) and record.isr == (0, 1, 2)


@pytest.mark.parametrize("version", [2, 3])
def test_retry_of_an_accepted_change_answers_the_current_state(three: ControllerDriver, version: int) -> None:
    state = three.partition("t")
    error, answer = three.alter_partition(state, [0, 1, 2], version=version)
    assert error == ErrorCode.none
    end = three.end_offset
    # The leader did not see the answer and retries with its old epochs: refused as stale,
    # so it learns the new state from the metadata log instead.
    assert three.alter_partition(state, [0, 1, 2], version=version)[0] == ErrorCode.invalid_update_version
    # Proposing exactly the current state writes nothing and answers it.
    error, answer = three.alter_partition(three.partition("t"), [0, 1, 2], version=version)
    assert error == ErrorCode.none and answer.partition_epoch == 2 and three.end_offset == end


def test_stale_broker_epoch(three: ControllerDriver) -> None:
    error, _ = three.alter_partition(three.partition("t"), [0], broker_epoch=three.epochs[0] - 1)
    assert error == ErrorCode.stale_broker_epoch


def test_unknown_partition(three: ControllerDriver) -> None:
    unknown_topic = replace(three.partition("t"), topic_id=uuid.uuid4())
    assert three.alter_partition(unknown_topic, [0])[0] == ErrorCode.unknown_topic_or_partition
    unknown_index = replace(three.partition("t"), partition=7)
    assert three.alter_partition(unknown_index, [0])[0] == ErrorCode.unknown_topic_or_partition


def test_sender_not_leader(three: ControllerDriver) -> None:
    assert three.alter_partition(three.partition("t"), [1, 0], sender=1)[0] == ErrorCode.not_leader_or_follower


def test_leader_epoch_mismatch(three: ControllerDriver) -> None:
    state = three.partition("t")
    assert three.alter_partition(state, [0], leader_epoch=state.leader_epoch - 1)[0] == ErrorCode.fenced_leader_epoch
    assert three.alter_partition(state, [0], leader_epoch=state.leader_epoch + 1)[0] == ErrorCode.fenced_leader_epoch


def test_partition_epoch_mismatch(three: ControllerDriver) -> None:
    state = three.partition("t")
    assert three.alter_partition(state, [0], partition_epoch=state.partition_epoch - 1)[0] == ErrorCode.invalid_update_version


def test_isr_without_the_leader_or_with_repeats_is_invalid(three: ControllerDriver) -> None:
    state = three.partition("t")
    assert three.alter_partition(state, [1])[0] == ErrorCode.invalid_request
    assert three.alter_partition(state, [0, 1, 1])[0] == ErrorCode.invalid_request


def test_ineligible_additions(three: ControllerDriver) -> None:
    state = three.partition("t")
    # Not a replica of the partition.
    three.start_brokers([3])
    assert three.alter_partition(state, [0, 1, 3])[0] == ErrorCode.ineligible_replica
    # v3: a broker epoch that is not the replica's current one (KIP-903: it restarted).
    assert three.alter_partition(state, [0, 1, (2, three.epochs[2] - 1)])[0] == ErrorCode.ineligible_replica
    # Shutting down.
    assert three.heartbeat(2, want_shut_down=True).should_shut_down
    assert three.alter_partition(three.partition("t"), [0, 1, 2])[0] == ErrorCode.ineligible_replica


def test_fenced_replica_may_not_join(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1, 2])
    controller.create_topic("t", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]})
    assert controller.alter_partition(controller.partition("t"), [0, 1])[0] == ErrorCode.none
    controller.keep_alive([0, 1], SESSION_TIMEOUT_MS + 500)
    assert controller.controller.image.brokers[2].fenced
    for version in (2, 3):
        assert controller.alter_partition(controller.partition("t"), [0, 1, 2], version=version)[0] == ErrorCode.ineligible_replica


def test_only_the_controller_marks_a_leader_recovering(three: ControllerDriver) -> None:
    assert three.alter_partition(three.partition("t"), [0, 1], recovering=True)[0] == ErrorCode.invalid_request


def test_one_request_many_partitions_one_batch(three: ControllerDriver) -> None:
    p0, p1 = three.partition("t", 0), three.partition("t", 1)
    data = req(ApiKey.ALTER_PARTITION, 3, "PartitionData")
    member = req(ApiKey.ALTER_PARTITION, 3, "BrokerState")
    topic = req(ApiKey.ALTER_PARTITION, 3, "TopicData")

    def proposal(state, isr):
        return build(data, partition_index=state.partition, leader_epoch=state.leader_epoch, leader_recovery_state=0,
                     partition_epoch=state.partition_epoch,
                     new_isr_with_epochs=tuple(member(broker_id=b, broker_epoch=three.epochs[b]) for b in isr))

    # Broker 1 leads partition 1 but not partition 0: one is refused, the other accepted.
    end = three.end_offset
    body = three.request(ApiKey.ALTER_PARTITION, 3, broker_id=1, broker_epoch=three.epochs[1],
                         topics=(topic(topic_id=p0.topic_id, partitions=(proposal(p0, [1]), proposal(p1, [1, 2]))),))
    errors = [p.error_code for p in body.topics[0].partitions]
    assert errors == [ErrorCode.not_leader_or_follower, ErrorCode.none]
    assert three.partition("t", 1).isr == (1, 2)
    assert len(three.records(end)) == 1
