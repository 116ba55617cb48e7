"""Eligible leader replicas (KIP-966) in the controller core: what fencing, an unclean
shutdown and the ISR's return to min.insync.replicas do to a partition's ISR, ELR and last
known leader, and who is elected. The data-loss scenario they prevent runs on the simulator
in tests/cluster/sim/test_last_replica_standing.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from cluster.metadata.image import PartitionState
from cluster.metadata.records import NO_LEADER
from cluster.protocol.codec import build
from cluster.protocol.versions import ApiKey
from tests.cluster.controller.driver import SESSION_TIMEOUT_MS, ControllerDriver, req

MIN_ISR_2 = {"min.insync.replicas": "2"}


def _isr_shrunk_by_fencing(make_controller: Callable[..., ControllerDriver], **properties: str) -> ControllerDriver:
    """RF 3, min ISR 2, ISR [0, 1, 2] led by 0; brokers 1 then 2 are fenced (their sessions
    expire one after the other while 0 heartbeats)."""
    controller = make_controller(properties={**MIN_ISR_2, **properties})
    controller.start_brokers([0, 1, 2])
    controller.create_topic("t", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]})
    controller.keep_alive([0, 2], SESSION_TIMEOUT_MS + 500)
    controller.keep_alive([0], SESSION_TIMEOUT_MS + 500)
    return controller


def test_members_lost_below_min_isr_become_eligible_and_the_isr_may_empty(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller)
    state = controller.partition("t")
    # Broker 1 left while the ISR was still at min ISR ({0, 2}): it may lack committed records.
    # Broker 2 left it below min ISR, where the high watermark stands still: it is eligible.
    assert (state.leader, state.isr, state.elr) == (0, (0,), (2,))
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)  # 0, the last ISR member, is fenced too
    state = controller.partition("t")
    assert (state.leader, state.isr, state.elr, state.last_known_leader) == (NO_LEADER, (), (0, 2), 0)


def test_without_elr_the_last_isr_member_stays_and_is_the_only_candidate(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller, **{"eligible.leader.replicas.version": "0"})
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)
    state = controller.partition("t")
    assert (state.leader, state.isr, state.elr, state.last_known_leader) == (NO_LEADER, (0,), (), NO_LEADER)


def _back(controller: ControllerDriver, broker_id: int, *, clean: bool) -> PartitionState:
    """The broker registers as a new process (after a clean shutdown at its epoch, or after
    a crash) and is unfenced; the partition after."""
    previous = controller.epochs[broker_id] if clean else -1
    body = controller.register(broker_id, uuid.uuid4(), version=3, previous_broker_epoch=previous)
    assert body.error_code == ErrorCode.none
    assert not controller.heartbeat(broker_id).is_fenced
    return controller.partition("t")


def test_a_crashed_last_isr_member_is_not_elected_while_an_eligible_replica_can_lead(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller)
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)
    # Broker 0 crashed (it may have lost its unflushed tail): it leaves the ELR at registration.
    state = _back(controller, 0, clean=False)
    assert (state.leader, state.isr, state.elr) == (NO_LEADER, (), (2,))
    # Broker 2 was only stalled (the same process comes back): it holds every committed record.
    assert not controller.heartbeat(2).is_fenced
    state = controller.partition("t")
    assert (state.leader, state.isr, state.elr, state.last_known_leader) == (2, (2,), (), NO_LEADER)
    # The ISR back at min ISR: the ELR stays empty.
    assert controller.alter_partition(state, [0, 2])[0] == ErrorCode.none
    state = controller.partition("t")
    assert (state.isr, state.elr) == ((0, 2), ())


def test_a_cleanly_stopped_member_stays_eligible(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller)
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)
    state = _back(controller, 0, clean=True)
    assert (state.leader, state.isr, state.elr) == (0, (0,), (2,))


def test_with_every_eligible_replica_crashed_the_last_known_leader_leads_recovering(make_controller: Callable[..., ControllerDriver],
                                                                                   caplog: pytest.LogCaptureFixture) -> None:
    controller = _isr_shrunk_by_fencing(make_controller)
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)
    state = _back(controller, 2, clean=False)
    assert (state.leader, state.isr, state.elr) == (NO_LEADER, (), (0,))
    state = _back(controller, 0, clean=False)
    # Nobody is known to hold every committed record: KIP-966's last known leader leads, as
    # in an unclean election (recovering), rather than the partition staying offline.
    assert (state.leader, state.isr, state.elr, state.last_known_leader) == (0, (0,), (), NO_LEADER)
    assert state.leader_recovering
    assert any("the last known leader 0 leads (recovering)" in r.getMessage() for r in caplog.records)


def test_without_elr_an_unclean_shutdown_changes_nothing(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller, **{"eligible.leader.replicas.version": "0"})
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)
    state = _back(controller, 0, clean=False)
    # The old rule: the crashed last ISR member leads again, whatever it lost.
    assert (state.leader, state.isr, state.elr) == (0, (0,), ())
    assert not state.leader_recovering


def test_a_bad_feature_level_is_refused_naming_the_setting(make_controller: Callable[..., ControllerDriver]) -> None:
    with pytest.raises(ValueError, match="eligible.leader.replicas.version"):
        make_controller(properties={"eligible.leader.replicas.version": "2"})


def _alter_topic_config(controller: ControllerDriver, topic: str, name: str, value: str | None) -> None:
    """IncrementalAlterConfigs v1 of one topic key (SET, or DELETE with None)."""
    entry = build(req(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "AlterableConfig"), name=name, config_operation=0 if value is not None else 1,
                  value=value)
    resource = build(req(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "AlterConfigsResource"), resource_type=2, resource_name=topic,
                     configs=(entry,))
    body = controller.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, resources=(resource,), validate_only=False)
    assert [r.error_code for r in body.responses] == [ErrorCode.none], body


def test_altering_the_topic_min_isr_clears_its_elr_and_last_known_leader(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller)
    controller.create_topic("other", partitions=1, replication_factor=3, assignments={0: [0, 1, 2]})
    controller.keep_alive([], SESSION_TIMEOUT_MS + 500)
    assert (controller.partition("t").elr, controller.partition("t").last_known_leader) == ((0, 2), 0)
    other = controller.partition("other")
    assert other.isr == () and other.elr == (0,)
    # Another key, or the cluster's min ISR set on the topic, leaves the ELR as it is.
    _alter_topic_config(controller, "t", "retention.ms", "60000")
    _alter_topic_config(controller, "t", "min.insync.replicas", "2")
    assert controller.partition("t").elr == (0, 2)
    # Lowered to 1, a lone ISR member could have committed records 0 and 2 never got: the ELR
    # (formed under min ISR 2) no longer proves anything, as Kafka's ClearElrRecord says.
    _alter_topic_config(controller, "t", "min.insync.replicas", "1")
    state = controller.partition("t")
    assert (state.leader, state.isr, state.elr, state.last_known_leader) == (NO_LEADER, (), (), NO_LEADER)
    assert controller.partition("other") == other  # only the altered topic
    # Broker 2 (stalled, not crashed) is unfenced: no longer eligible, it does not lead, and
    # the partition waits for an unclean election rather than guessing.
    assert not controller.heartbeat(2).is_fenced
    state = controller.partition("t")
    assert (state.leader, state.isr, state.elr) == (NO_LEADER, (), ())
    # Removing the topic's min ISR (back to the cluster's 2) changes it too.
    _alter_topic_config(controller, "t", "min.insync.replicas", None)
    assert controller.partition("t").elr == ()


def test_without_elr_altering_the_min_isr_changes_no_partition(make_controller: Callable[..., ControllerDriver]) -> None:
    controller = _isr_shrunk_by_fencing(make_controller, **{"eligible.leader.replicas.version": "0"})
    before = controller.partition("t")
    _alter_topic_config(controller, "t", "min.insync.replicas", "1")
    assert controller.partition("t") == before
