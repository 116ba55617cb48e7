"""Broker registration, heartbeats, session expiry and controlled shutdown, through real
request frames on the controller core with virtual time."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.metadata.records import NO_LEADER, BrokerRegistrationChangeRecord, PartitionRecord, RegisterBrokerRecord
from cluster.protocol.versions import ApiKey
from tests.cluster.controller.driver import SESSION_TIMEOUT_MS, ControllerDriver, req


def test_registration_epoch_is_the_offset_of_its_record(controller: ControllerDriver) -> None:
    first = controller.register(0)
    assert first.error_code == ErrorCode.none
    second = controller.register(1)
    assert second.error_code == ErrorCode.none
    records = dict(controller.records())
    assert isinstance(records[first.broker_epoch], RegisterBrokerRecord) and records[first.broker_epoch].broker_id == 0
    assert isinstance(records[second.broker_epoch], RegisterBrokerRecord) and records[second.broker_epoch].broker_id == 1
    assert second.broker_epoch > first.broker_epoch
    # A new registration starts fenced.
    assert controller.controller.image.brokers[0].fenced


def test_registration_retry_with_same_incarnation_gets_same_epoch(controller: ControllerDriver) -> None:
    incarnation = uuid.uuid4()
    first = controller.register(0, incarnation)
    end = controller.end_offset
    again = controller.register(0, incarnation)
    assert again.error_code == ErrorCode.none and again.broker_epoch == first.broker_epoch
    assert controller.end_offset == end  # nothing new written for a retry


def test_live_registration_with_another_incarnation_is_a_duplicate(controller: ControllerDriver) -> None:
    controller.start_brokers([0])
    other = controller.register(0, uuid.uuid4())
    assert other.error_code == ErrorCode.duplicate_broker_registration
    # Once the old session has expired (the broker was fenced) the new incarnation is accepted,
    # with a higher epoch.
    old_epoch = controller.epochs[0]
    controller.scheduler.advance(SESSION_TIMEOUT_MS + 200)
    assert controller.controller.image.brokers[0].fenced
    again = controller.register(0, uuid.uuid4())
    assert again.error_code == ErrorCode.none and again.broker_epoch > old_epoch


def test_registration_from_another_cluster_is_refused(controller: ControllerDriver) -> None:
    listener = req(ApiKey.BROKER_REGISTRATION, 2, "Listener")
    body = controller.request(ApiKey.BROKER_REGISTRATION, 2, broker_id=0, cluster_id="someone-else", incarnation_id=uuid.uuid4(),
                              listeners=(listener(name="PLAINTEXT", host="127.0.0.10", port=9092, security_protocol=0),),
                              features=(), rack=None, is_migrating_zk_broker=False, log_dirs=())
    assert body.error_code == ErrorCode.inconsistent_cluster_id


def test_heartbeat_with_unknown_or_stale_epoch(controller: ControllerDriver) -> None:
    assert controller.heartbeat(5, epoch=0, offset=0).error_code == ErrorCode.stale_broker_epoch  # never registered
    controller.register(0)
    assert controller.heartbeat(0, epoch=controller.epochs[0] + 1).error_code == ErrorCode.stale_broker_epoch


def test_unfenced_once_caught_up_with_its_registration(controller: ControllerDriver) -> None:
    epoch = controller.register(0).broker_epoch
    behind = controller.heartbeat(0, offset=epoch - 1)
    assert behind.error_code == ErrorCode.none and behind.is_fenced and not behind.is_caught_up
    caught_up = controller.heartbeat(0, offset=epoch)
    assert caught_up.error_code == ErrorCode.none and caught_up.is_caught_up and not caught_up.is_fenced
    offset, record = controller.records()[-1]
    assert record == BrokerRegistrationChangeRecord(0, epoch, fenced=False)
    assert controller.controller.image.brokers[0].usable


def test_session_expiry_fences_and_elects_from_the_isr(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1, 2])
    controller.create_topic("t", partitions=1, replication_factor=3, assignments={0: [1, 2, 0]})
    before = controller.partition("t")
    assert before.leader == 1 and before.isr == (1, 2, 0)
    end = controller.end_offset
    controller.keep_alive([0, 2], SESSION_TIMEOUT_MS + 500)
    after = controller.partition("t")
    assert controller.controller.image.brokers[1].fenced
    assert after.leader == 2 and after.isr == (2, 0)
    assert after.leader_epoch == before.leader_epoch + 1 and after.partition_epoch == before.partition_epoch + 1
    # Fencing and the partition change are one batch: no broker sees one without the other.
    records = controller.records(end)
    assert [type(r) for _, r in records] == [BrokerRegistrationChangeRecord, PartitionRecord]


def _lone_isr_member_fenced(controller: ControllerDriver) -> Any:
    controller.start_brokers([0, 1, 2])
    controller.create_topic("t", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]})
    state = controller.partition("t")
    error, _ = controller.alter_partition(state, [0])  # only the leader is in sync
    assert error == ErrorCode.none
    controller.keep_alive([1, 2], SESSION_TIMEOUT_MS + 500)
    return controller.partition("t")


def test_without_elr_the_last_isr_member_is_kept_and_a_fenced_broker_is_never_elected(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = make_controller(properties={"eligible.leader.replicas.version": "0"})
    after = _lone_isr_member_fenced(controller)
    # Broker 0 is fenced: it cannot lead, but it stays the ISR (the only one with every
    # committed record), and no out-of-sync replica is elected without unclean election.
    assert after.leader == NO_LEADER and after.isr == (0,) and after.elr == ()
    assert not after.leader_recovering
    controller.keep_alive([1, 2], 2000)
    assert controller.partition("t").leader == NO_LEADER


def test_with_elr_the_last_isr_member_leaves_for_the_elr_and_a_fenced_broker_is_never_elected(controller: ControllerDriver) -> None:
    after = _lone_isr_member_fenced(controller)
    # KIP-966 (the default): the ISR empties, broker 0 is an eligible leader and the last
    # known leader; the out-of-sync replicas are still not elected.
    assert after.leader == NO_LEADER and after.isr == () and after.elr == (0,) and after.last_known_leader == 0
    controller.keep_alive([1, 2], 2000)
    assert controller.partition("t").leader == NO_LEADER


def test_unfencing_reelects_a_leaderless_partition_in_the_same_batch(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    controller.create_topic("t", partitions=1, replication_factor=2, assignments={0: [0, 1]})
    assert controller.alter_partition(controller.partition("t"), [0])[0] == ErrorCode.none
    controller.keep_alive([1], SESSION_TIMEOUT_MS + 500)
    leaderless = controller.partition("t")
    assert leaderless.leader == NO_LEADER
    # The same process comes back (same epoch): once caught up it is unfenced and leads again.
    end = controller.end_offset
    body = controller.heartbeat(0)
    assert body.error_code == ErrorCode.none and not body.is_fenced
    after = controller.partition("t")
    assert after.leader == 0 and after.isr == (0,) and after.leader_epoch == leaderless.leader_epoch + 1
    records = controller.records(end)
    assert [type(r) for _, r in records] == [BrokerRegistrationChangeRecord, PartitionRecord]
    assert {o for o, _ in records} == {end, end + 1}


def test_restarted_broker_reregisters_and_is_elected_when_unfenced(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    controller.create_topic("t", partitions=1, replication_factor=2, assignments={0: [0, 1]})
    assert controller.alter_partition(controller.partition("t"), [0])[0] == ErrorCode.none
    old_epoch = controller.epochs[0]
    controller.keep_alive([1], SESSION_TIMEOUT_MS + 500)
    assert controller.register(0, uuid.uuid4()).broker_epoch > old_epoch
    assert controller.partition("t").leader == NO_LEADER  # registered but fenced: not yet
    assert not controller.heartbeat(0).is_fenced
    assert controller.partition("t").leader == 0


def test_unclean_election_only_when_enabled(make_controller) -> None:
    for properties, topic_configs, unclean in [
        ({}, {}, False),
        ({"unclean.leader.election.enable": "true"}, {}, True),
        ({}, {"unclean.leader.election.enable": "true"}, True),
        ({"unclean.leader.election.enable": "true"}, {"unclean.leader.election.enable": "false"}, False),
    ]:
        controller = make_controller(properties=properties)
        controller.start_brokers([0, 1, 2])
        controller.create_topic("t", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]}, configs=topic_configs)
        state = controller.partition("t")
        assert controller.alter_partition(state, [0])[0] == ErrorCode.none
        controller.keep_alive([1, 2], SESSION_TIMEOUT_MS + 500)
        after = controller.partition("t")
        if unclean:
            assert after.leader == 1 and after.isr == (1,) and after.leader_recovering, (properties, topic_configs, after)
            assert after.leader_epoch == state.leader_epoch + 1
        else:
            # Eligible leader replicas (the default): the ISR empties into the ELR.
            assert after.leader == NO_LEADER and after.isr == () and after.elr == (0,) and not after.leader_recovering, (
                properties, topic_configs, after)


def test_recovering_leader_clears_the_flag_then_grows_the_isr(make_controller) -> None:
    controller = make_controller(properties={"unclean.leader.election.enable": "true"})
    controller.start_brokers([0, 1, 2])
    controller.create_topic("t", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]})
    assert controller.alter_partition(controller.partition("t"), [0])[0] == ErrorCode.none
    controller.keep_alive([1, 2], SESSION_TIMEOUT_MS + 500)
    state = controller.partition("t")
    assert state.leader == 1 and state.leader_recovering
    # Growing the ISR while recovering is refused (KIP-704).
    error, _ = controller.alter_partition(state, [1, 2], recovering=True)
    assert error == ErrorCode.invalid_request
    error, answer = controller.alter_partition(state, [1], recovering=False)
    assert error == ErrorCode.none and answer.leader_recovery_state == 0
    recovered = controller.partition("t")
    assert not recovered.leader_recovering and recovered.partition_epoch == state.partition_epoch + 1
    assert controller.alter_partition(recovered, [1, 2])[0] == ErrorCode.none
    assert controller.partition("t").isr == (1, 2)


def test_controlled_shutdown_moves_leadership_then_fences(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1, 2])
    controller.create_topic("a", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]})
    controller.create_topic("b", partitions=1, replication_factor=2, assignments={0: [1, 0]})
    before_a = controller.partition("a")
    body = controller.heartbeat(0, want_shut_down=True)
    assert body.error_code == ErrorCode.none and body.should_shut_down
    a, b = controller.partition("a"), controller.partition("b")
    assert a.leader == 1 and a.isr == (1, 2) and a.leader_epoch == before_a.leader_epoch + 1
    assert b.leader == 1 and b.isr == (1,)  # a follower in shutdown leaves the ISR too
    broker = controller.controller.image.brokers[0]
    assert broker.fenced and broker.in_controlled_shutdown
    # It can come back at once with a new incarnation, without waiting for its session.
    assert controller.register(0, uuid.uuid4()).error_code == ErrorCode.none


def test_controlled_shutdown_of_the_only_isr_member_leaves_the_partition_leaderless(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    controller.create_topic("t", partitions=1, replication_factor=2, assignments={0: [0, 1]})
    assert controller.alter_partition(controller.partition("t"), [0])[0] == ErrorCode.none
    body = controller.heartbeat(0, want_shut_down=True)
    assert body.should_shut_down
    state = controller.partition("t")
    # With eligible leader replicas (the default) the ISR empties and 0 is the eligible one.
    assert state.leader == NO_LEADER and state.isr == () and state.elr == (0,)


def test_controller_restart_gives_live_brokers_a_fresh_session(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    controller.create_topic("t", partitions=1, replication_factor=2, assignments={0: [0, 1]})
    controller.scheduler.advance(SESSION_TIMEOUT_MS - 500)  # nearly expired
    controller.restart()
    controller.scheduler.advance(SESSION_TIMEOUT_MS - 500)  # expired by the old clock, not the new session
    assert all(b.usable for b in controller.controller.image.brokers.values())
    controller.keep_alive([1], 1500)
    assert controller.controller.image.brokers[0].fenced and controller.partition("t").leader == 1


def test_a_fenced_last_isr_member_is_not_elected_when_another_replica_returns(make_controller) -> None:
    for unclean in (False, True):
        controller = make_controller(properties={"unclean.leader.election.enable": str(unclean).lower()})
        controller.start_brokers([0, 1, 2])
        controller.create_topic("t", partitions=1, replication_factor=2, assignments={0: [0, 1]})
        assert controller.alter_partition(controller.partition("t"), [0])[0] == ErrorCode.none
        # Broker 1 restarts while 0 leads alone; then 0 dies.
        controller.keep_alive([0, 2], SESSION_TIMEOUT_MS + 500)
        assert controller.register(1, uuid.uuid4()).error_code == ErrorCode.none
        controller.keep_alive([2], SESSION_TIMEOUT_MS + 500)
        state = controller.partition("t")
        # Eligible leader replicas (the default): the ISR empties, 0 is the eligible leader.
        assert controller.controller.image.brokers[0].fenced and state.isr == () and state.elr == (0,)
        # Broker 1 is unfenced: the leaderless partition is looked at again, and the fenced
        # ISR member 0 must not be chosen; only an unclean election may pick broker 1.
        assert not controller.heartbeat(1).is_fenced
        after = controller.partition("t")
        if unclean:
            assert after.leader == 1 and after.isr == (1,) and after.leader_recovering and after.elr == ()
        else:
            assert after.leader == NO_LEADER and after.isr == () and after.elr == (0,)


def test_a_fenced_broker_asking_to_shut_down_may_stop_at_once(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    controller.keep_alive([1], SESSION_TIMEOUT_MS + 500)
    assert controller.controller.image.brokers[0].fenced
    end = controller.end_offset
    body = controller.heartbeat(0, want_shut_down=True)
    assert body.error_code == ErrorCode.none and body.should_shut_down and body.is_fenced
    assert controller.end_offset == end  # nothing to move, nothing written
