"""The leader's high watermark on three simulated brokers: it follows the slowest ISR member,
moves only with the ISR, and stands still while the ISR is below min.insync.replicas."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.cluster.replication.scenario import TOPIC, answer, followers, leader, leads, produce, replica, start, wait_isr
from tests.cluster.sim.sim_requests import read_all


def test_a_follower_catches_up_and_the_hwm_advances_only_with_the_isr() -> None:
    sim = start(min_isr=1)
    lead = leader(sim)
    near, far = followers(sim, lead)
    sim.isolate([[lead], [far]])  # far keeps its controller session: only its fetches stop
    assert answer(sim, produce(sim, lead, b"a", acks=1)) == (ErrorCode.none, 0)
    sim.run_for(500)  # well inside replica.lag.time.max.ms (2000)
    assert replica(sim, near).log_end_offset == 1 and replica(sim, far).log_end_offset == 0
    assert far in replica(sim, lead).isr
    assert replica(sim, lead).high_watermark == 0, "the HWM passed a record an ISR member does not have"
    wait_isr(sim, {lead, near})
    assert replica(sim, lead).high_watermark == 1
    sim.heal()
    wait_isr(sim, {0, 1, 2})
    sim.run_until(lambda: replica(sim, far).high_watermark == 1, 5_000, what="the caught-up follower learning the HWM")
    assert replica(sim, far).log_end_offset == 1


def test_acks_all_is_answered_only_once_every_isr_member_has_the_record() -> None:
    sim = start(min_isr=2, **{"replica.lag.time.max.ms": "5000", "replica.socket.timeout.ms": "300"})
    lead = leader(sim)
    sim.isolate([[lead], followers(sim, lead)])
    call = produce(sim, lead, b"replicated", acks=-1, timeout_ms=10_000)
    sim.run_for(1500)
    assert not call.done, "acks=all answered before any follower had the record"
    assert all(replica(sim, f).log_end_offset == 0 for f in followers(sim, lead))
    sim.heal()
    assert answer(sim, call) == (ErrorCode.none, 0)
    assert all(replica(sim, f).log_end_offset == 1 for f in followers(sim, lead)), "acked before every ISR member had it"
    assert set(replica(sim, lead).isr) == {0, 1, 2}


def test_strict_min_isr_holds_the_hwm_until_the_isr_grows_back() -> None:
    sim = start(min_isr=2)
    lead = leader(sim)
    assert answer(sim, produce(sim, lead, b"committed")) == (ErrorCode.none, 0)
    sim.isolate([[lead], followers(sim, lead)])
    wait_isr(sim, {lead})
    assert answer(sim, produce(sim, lead, b"only-on-the-leader", acks=1)) == (ErrorCode.none, 1)
    sim.run_for(1000)
    assert replica(sim, lead).high_watermark == 1, "the HWM moved with the ISR below min.insync.replicas"
    assert [v for _, v in read_all(sim, lead, TOPIC)] == [b"committed"]
    error, _ = answer(sim, produce(sim, lead, b"refused", acks=-1))
    assert error == ErrorCode.not_enough_replicas
    assert replica(sim, lead).log_end_offset == 2, "a refused acks=all write was appended"
    sim.heal()
    sim.run_until(lambda: len(replica(sim, lead).isr) >= 2, 40_000, what="the ISR growing back (after the cut fetches time out)")
    sim.run_until(lambda: replica(sim, lead).high_watermark == 2, 5_000, what="the HWM passing the acks=1 record")
    assert [v for _, v in read_all(sim, lead, TOPIC)] == [b"committed", b"only-on-the-leader"]


def test_a_restarted_leader_starts_from_its_checkpointed_hwm_not_its_log_end() -> None:
    # The older election rule, under which the restarted last ISR member leads again: with
    # eligible leader replicas (the default) a restart after a kill is an unclean shutdown
    # and a follower that left the ISR below min ISR leads instead (test_last_replica_standing).
    sim = start(min_isr=2, **{"eligible.leader.replicas.version": "0"})
    lead = leader(sim)
    assert answer(sim, produce(sim, lead, b"committed")) == (ErrorCode.none, 0)
    sim.isolate([[lead], followers(sim, lead)])
    wait_isr(sim, {lead})
    assert answer(sim, produce(sim, lead, b"uncommitted", acks=1)) == (ErrorCode.none, 1)
    sim.run_for(6000)  # a high watermark checkpoint (every 5 s) has been written
    sim.restart(lead)
    sim.run_until(lambda: leads(sim, lead), 20_000, what="the restarted broker leading again (the last ISR member)")
    sim.run_for(500)
    assert replica(sim, lead).log_end_offset == 2
    assert replica(sim, lead).high_watermark == 1, "the restart took the log end for the high watermark"
    assert [v for _, v in read_all(sim, lead, TOPIC)] == [b"committed"]
    sim.heal()
    sim.run_until(lambda: replica(sim, lead).high_watermark == 2, 40_000, what="the followers catching up and the HWM passing the record")
    assert [v for _, v in read_all(sim, lead, TOPIC)] == [b"committed", b"uncommitted"]
