"""How produce requests end when replication cannot keep up, on three simulated brokers:
REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS before the append, NOT_LEADER_OR_FOLLOWER from a
follower or when leadership moves while an acks=all request waits."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.cluster.replication.scenario import TOPIC, answer, followers, leader, produce, replica, start, wait_isr
from tests.cluster.sim.sim_requests import read_all


def test_acks_all_times_out_when_the_isr_does_not_replicate_in_time() -> None:
    sim = start(min_isr=2)
    lead = leader(sim)
    sim.isolate([[lead], followers(sim, lead)])
    call = produce(sim, lead, b"late", acks=-1, timeout_ms=500)
    assert answer(sim, call, within_ms=1500)[0] == ErrorCode.request_timed_out
    assert set(replica(sim, lead).isr) == {0, 1, 2}, "the answer came only after the ISR shrank"
    assert replica(sim, lead).log_end_offset == 1  # appended, just not committed in time


def test_acks_all_is_refused_before_the_append_when_the_isr_is_too_small() -> None:
    sim = start(min_isr=3)
    lead = leader(sim)
    _, far = followers(sim, lead)
    sim.isolate([[lead], [far]])
    wait_isr(sim, set(sim.broker_ids) - {far})
    error, offset = answer(sim, produce(sim, lead, b"refused", acks=-1))
    assert (error, offset) == (ErrorCode.not_enough_replicas, -1)
    assert replica(sim, lead).log_end_offset == 0
    assert answer(sim, produce(sim, lead, b"acks=1 still works", acks=1)) == (ErrorCode.none, 0)


def test_a_follower_refuses_produce_and_consumer_fetch() -> None:
    sim = start(min_isr=1)
    lead = leader(sim)
    follower = followers(sim, lead)[0]
    assert answer(sim, produce(sim, follower, b"misdirected", acks=1))[0] == ErrorCode.not_leader_or_follower
    try:
        read_all(sim, follower, TOPIC)
    except AssertionError as error:
        assert "not_leader_or_follower" in str(error)
    else:
        raise AssertionError("a follower served a consumer fetch")


def test_a_waiting_acks_all_request_fails_when_leadership_moves() -> None:
    sim = start(min_isr=2)
    lead = leader(sim)
    near, far = followers(sim, lead)
    sim.isolate([[lead], [far]])  # far stays in the ISR for replica.lag.time.max.ms without the record
    call = produce(sim, lead, b"in-doubt", acks=-1, timeout_ms=20_000)
    sim.run_for(300)
    assert not call.done
    shut_down: list[bool] = []
    sim.broker(lead).begin_controlled_shutdown(lambda: shut_down.append(True))
    assert answer(sim, call, within_ms=5_000)[0] == ErrorCode.not_leader_or_follower
    assert replica(sim, lead).role == "follower"
    assert replica(sim, lead).leader_id in (near, far)
