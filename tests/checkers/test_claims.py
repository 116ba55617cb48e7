"""Claims from spec.json and the allowed/bad classification (no Spark)."""

from __future__ import annotations

import pytest

from checkers.claims import ClaimInputError, ClaimInputs, claims_for, classify


def holds(inputs: ClaimInputs) -> dict[str, bool]:
    return {c.name: c.holds for c in claims_for(inputs)}


def test_durability_needs_acks_all_and_min_isr_2():
    spec = {"workload": "queue", "client_config": {"acks": "-1"},
            "cluster_config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}}
    assert holds(ClaimInputs.from_spec_json(spec))["acked-writes-durable"]
    for change in ({"client_config": {"acks": "1"}},
                   {"cluster_config": {"min.insync.replicas": "1"}}):
        inputs = ClaimInputs.from_spec_json({**spec, **change})
        assert not holds(inputs)["acked-writes-durable"]
        allowed, violates = classify("lost-write", inputs, claims_for(inputs))
        assert allowed and violates == []


def test_unclean_election_is_a_broken_promise_not_a_withdrawn_claim():
    # The client still asked for durability; the unsafe cluster switch is what the run must catch.
    spec = {"workload": "queue", "client_config": {"acks": "all"},
            "cluster_config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}}
    inputs = ClaimInputs.from_spec_json(spec)
    durable = {c.name: c for c in claims_for(inputs)}["acked-writes-durable"]
    assert durable.holds and "unclean.leader.election.enable=true" in durable.reason
    assert classify("lost-write", inputs, claims_for(inputs)) == (False, ["acked-writes-durable"])


def test_delivery_commit_modes():
    base = {"workload": "delivery", "client_config": {"acks": "all", "enable.auto.commit": "false"},
            "cluster_config": {"min.insync.replicas": "2"}}
    after = ClaimInputs.from_spec_json({**base, "workload_options": {"commit_mode": "after"}})
    before = ClaimInputs.from_spec_json({**base, "workload_options": {"commit_mode": "before"}})
    assert holds(after)["at-least-once"] and not holds(after)["at-most-once"]
    assert holds(before)["at-most-once"] and not holds(before)["at-least-once"]
    assert classify("duplicate-processing", before, claims_for(before)) == (False, ["at-most-once"])
    assert classify("duplicate-processing", after, claims_for(after)) == (True, [])
    auto = ClaimInputs.from_spec_json({**base, "client_config": {"acks": "all"},
                                       "workload_options": {"commit_mode": "auto"}})
    assert not holds(auto)["at-most-once"] and not holds(auto)["at-least-once"]


def test_jepsen_allowed_types():
    sub = ClaimInputs(sub_via=("subscribe",))
    assert classify("poll-skip", sub, claims_for(sub))[0]
    plain = ClaimInputs()
    assert not classify("poll-skip", plain, claims_for(plain))[0]
    assert classify("G0", plain, claims_for(plain))[0] and classify("int-send-skip", plain, claims_for(plain))[0]
    no_ww = ClaimInputs(ww_deps=False, transactional=True)
    assert not classify("G1c", no_ww, claims_for(no_ww))[0]
    assert classify("duplicate", plain, claims_for(plain))[0]  # no idempotence: duplicates allowed
    idem = ClaimInputs.from_spec_json({"client_config": {"enable.idempotence": "true"}})
    assert not classify("duplicate", idem, claims_for(idem))[0]


@pytest.mark.parametrize("spec, field", [
    ({"client_config": {"acks": "2"}}, "acks"),
    ({"cluster_config": {"min.insync.replicas": "two"}}, "min.insync.replicas"),
    ({"workload_options": {"commit_mode": "sometimes"}}, "commit_mode"),
    ({"workload_options": {"sub_via": ["poll"]}}, "sub_via"),
    ({"client_config": "acks=all"}, "client_config"),
])
def test_bad_spec_names_the_field(spec, field):
    with pytest.raises(ClaimInputError, match=field):
        ClaimInputs.from_spec_json(spec)
