"""Claims from spec.json and the allowed/bad classification (no Spark)."""

from __future__ import annotations

import pytest

from checkers.claims import (ClaimInputError, ClaimInputs, claims_for, classify,
                             loss_allowance, with_faults)


def holds(inputs: ClaimInputs) -> dict[str, bool]:
    return {c.name: c.holds for c in claims_for(inputs)}


KILL, PAUSE, PARTITION, CLOCK = "kill", "pause", "partition", "clock"
BROKERS_DOWN, LONE = "brokers-down", "lone-leader-crash"
EVERY_FAULT = (KILL, PAUSE, PARTITION, CLOCK, BROKERS_DOWN, LONE)

# (cluster/client settings, faults that ran, is a lost write allowed)
LOSS_RULES = [
    # acks=all, unclean election off, page cache kept: bad at any min ISR, any RF, any fault.
    *[(dict(acks="all", min_isr=m, rf=r), {f}, False)
      for m in (1, 2, 3) for r in (1, 2, 3) for f in EVERY_FAULT],
    (dict(acks="all", min_isr=1, rf=3), set(EVERY_FAULT), False),
    # log.crash.lose.unflushed: a kill of a lone in-sync copy (min ISR 1 or RF 1) may lose its tail.
    *[(dict(acks="all", min_isr=1, rf=r, lose=True), {f}, True) for r in (1, 2, 3) for f in (KILL, BROKERS_DOWN, LONE)],
    (dict(acks="all", min_isr=2, rf=1, lose=True), {KILL}, True),
    # ... but not without a kill, nor with min ISR ≥ 2 on replicated topics (fail closed).
    *[(dict(acks="all", min_isr=1, rf=3, lose=True), {f}, False) for f in (PAUSE, PARTITION, CLOCK)],
    *[(dict(acks="all", min_isr=m, rf=3, lose=True), {KILL, BROKERS_DOWN, LONE}, False) for m in (2, 3)],
    # acks=1 / acks=0: loss only once a fault moved leadership.
    *[(dict(acks=a, min_isr=m), {f}, True) for a in ("0", "1") for m in (1, 2) for f in EVERY_FAULT],
    *[(dict(acks=a, min_isr=m), set(), False) for a in ("0", "1") for m in (1, 2)],
    # a fault kind the claims do not know excuses nothing.
    (dict(acks="1"), {"disk-full"}, False),
    # unclean leader election: loss allowed, only if a fault ran.
    *[(dict(acks="all", min_isr=2, unclean=True), {f}, True) for f in EVERY_FAULT],
    (dict(acks="all", min_isr=2, unclean=True), set(), False),
    # the bug switches never allow anything.
    *[(dict(acks="all", min_isr=m, bug=b), set(EVERY_FAULT), False)
      for m in (1, 2) for b in ("replica.truncate.to.high.watermark", "fetch.read.past.high.watermark")],
    (dict(acks="1", bug="fetch.read.past.high.watermark"), set(), False),
]


def spec_for(acks="all", min_isr=1, rf=3, lose=False, unclean=False, bug=None, idempotence=False, txn=False):
    cluster = {"min.insync.replicas": str(min_isr), "unclean.leader.election.enable": str(unclean).lower(),
               "log.crash.lose.unflushed": str(lose).lower()}
    if bug:
        cluster[bug] = "true"
    client = {"acks": acks, "enable.idempotence": str(idempotence).lower()}
    return {"workload": "queue", "brokers": 3, "client_config": client, "cluster_config": cluster,
            "workload_options": {"replication_factor": rf, "txn": txn}}


@pytest.mark.parametrize("settings, faults, allowed", LOSS_RULES,
                         ids=[f"{'-'.join(f'{k}={v}' for k, v in s.items())}-{'+'.join(sorted(f)) or 'nofault'}"
                              for s, f, _ in LOSS_RULES])
def test_loss_rules(settings, faults, allowed):
    inputs = with_faults(ClaimInputs.from_spec_json(spec_for(**settings)), frozenset(faults))
    assert inputs.faults == frozenset(faults)
    claims = claims_for(inputs)
    made = {c.name: c for c in claims}
    assert (loss_allowance(inputs) is not None) == allowed
    assert made["acked-writes-durable"].holds == (not allowed)
    expected = (True, []) if allowed else (False, ["acked-writes-durable"])
    for name in ("lost-write", "unseen"):
        assert classify(name, inputs, claims) == expected
    # inconsistent-offsets: allowed exactly when the loss is (an offset reused after it).
    assert classify("inconsistent-offsets", inputs, claims) == ((True, []) if allowed else (False, ["consistent-log"]))
    # order anomalies: allowed with the loss (a lost record's offset goes to a later send, and
    # polls around it skip or go back), bad otherwise; Jepsen's always-allowed types stay allowed.
    for name in ("nonmonotonic-send", "poll-skip", "nonmonotonic-poll", "int-nonmonotonic-send"):
        assert classify(name, inputs, claims) == ((True, []) if allowed else (False, ["per-partition-order"]))
    assert classify("int-send-skip", inputs, claims) == (True, [])
    reason = made["acked-writes-durable"].reason
    if "bug" in settings:
        assert settings["bug"] in reason and "excuses nothing" in reason


@pytest.mark.parametrize("idempotence, txn, faults, allowed", [
    (False, False, set(), True),
    (False, False, {KILL}, True),
    (True, False, set(), False),
    (True, False, set(EVERY_FAULT), False),
    (False, True, set(EVERY_FAULT), False),  # transactions imply idempotence
])
def test_duplicate_rules(idempotence, txn, faults, allowed):
    inputs = with_faults(ClaimInputs.from_spec_json(spec_for(acks="1", idempotence=idempotence, txn=txn)),
                         frozenset(faults))
    claims = claims_for(inputs)
    assert classify("duplicate", inputs, claims) == ((True, []) if allowed else (False, ["no-duplicates"]))


def test_without_the_history_no_fault_ran():
    # A spec alone (e.g. a check that failed before reading the history) excuses nothing.
    inputs = ClaimInputs.from_spec_json(spec_for(acks="1", unclean=True, lose=True))
    assert inputs.faults == frozenset() and loss_allowance(inputs) is None
    assert with_faults(inputs, frozenset({"pause"})).faults == frozenset({"pause"})


def test_replication_factor_is_the_workloads():
    assert ClaimInputs.from_spec_json({"brokers": 1}).replication_factor == 1
    assert ClaimInputs.from_spec_json({"brokers": 5}).replication_factor == 3
    assert ClaimInputs.from_spec_json({}).replication_factor == 3
    assert ClaimInputs.from_spec_json({"workload_options": {"replication_factor": 2}}).replication_factor == 2


def test_unclean_election_is_a_broken_promise_without_faults():
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
    ({"workload_options": {"replication_factor": "x"}}, "replication_factor"),
    ({"workload_options": {"replication_factor": 0}}, "replication_factor"),
    ({"brokers": "many"}, "brokers"),
    ({"workload_options": {"commit_mode": "sometimes"}}, "commit_mode"),
    ({"workload_options": {"sub_via": ["poll"]}}, "sub_via"),
    ({"client_config": "acks=all"}, "client_config"),
])
def test_bad_spec_names_the_field(spec, field):
    with pytest.raises(ClaimInputError, match=field):
        ClaimInputs.from_spec_json(spec)


# The transaction bug switches (issue 14): on when set to their unsafe value (partition
# verification is unsafe when false), from the spec of a bundled run and from what an
# external cluster's brokers report; named in the transaction claims' reasons.
TXN_BUG_SWITCHES = [("transaction.partition.verification.enable", "false", "true"),
                    ("transaction.lso.ignore.open.transactions", "true", "false"),
                    ("transaction.offset.commit.skip.generation.check", "true", "false")]


@pytest.mark.parametrize("name, unsafe, safe", TXN_BUG_SWITCHES)
def test_transaction_bug_switches_are_named_and_excuse_nothing(name, unsafe, safe):
    def spec(value):
        return {"workload": "queue", "brokers": 3, "client_config": {"acks": "all"},
                "cluster_config": {"min.insync.replicas": "2", name: value}, "workload_options": {"txn": True}}

    assert ClaimInputs.from_spec_json(spec(safe)).bug_switches == ()
    inputs = with_faults(ClaimInputs.from_spec_json(spec(unsafe)), frozenset(EVERY_FAULT))
    assert inputs.bug_switches == (name,)
    made = {c.name: c for c in claims_for(inputs)}
    for claim in ("acked-writes-durable", "no-duplicates", "no-aborted-reads", "transaction-isolation"):
        assert made[claim].holds and name in made[claim].reason and "excuses nothing" in made[claim].reason
    for anomaly, claim in (("G1a", "no-aborted-reads"), ("duplicate", "no-duplicates"), ("lost-write", "acked-writes-durable")):
        assert classify(anomaly, inputs, claims_for(inputs)) == (False, [claim])

    def reported(value):
        brokers = {"0": {"configs": {name: safe}, "errors": []}, "1": {"configs": {name: value}, "errors": []}}
        return {"readings": [{"when": "end", "topics": {}, "brokers": brokers, "errors": []}]}

    external = {**spec(safe), "bootstrap_servers": "127.0.0.1:9092"}
    assert ClaimInputs.from_spec_json(external, reported(safe)).bug_switches == ()
    assert ClaimInputs.from_spec_json(external, reported(unsafe)).bug_switches == (name,)  # one broker is enough


@pytest.mark.parametrize("txn, isolation, transactional, no_aborted_reads, isolated", [
    ("true", "read_committed", True, True, True),  # KIP-98's exactly-once configuration
    ("true", "read_uncommitted", True, False, False),  # aborted transactions are readable
    ("false", "read_uncommitted", False, True, False),  # the CLI's text "false" is no transaction
    (False, "read_committed", False, True, True),
])
def test_transaction_claims_follow_txn_and_the_isolation_level(txn, isolation, transactional, no_aborted_reads,
                                                               isolated):
    spec = {"workload": "queue", "client_config": {"isolation.level": isolation}, "workload_options": {"txn": txn}}
    inputs = ClaimInputs.from_spec_json(spec)
    assert inputs.transactional is transactional and inputs.idempotence is transactional
    made = holds(inputs)
    assert made["no-aborted-reads"] is no_aborted_reads and made["transaction-isolation"] is isolated
    assert classify("G1a", inputs, claims_for(inputs))[0] is not no_aborted_reads


def test_sub_via_is_read_as_the_workloads_read_it_a_comma_list():
    both = ClaimInputs.from_spec_json({"workload_options": {"sub_via": "assign, subscribe"}})
    assert both.sub_via == ("assign", "subscribe")
    assert classify("poll-skip", both, claims_for(both))[0]  # rebalances move positions
    assert ClaimInputs.from_spec_json({"workload_options": {"sub_via": "assign"}}).sub_via == ("assign",)
    with pytest.raises(ClaimInputError, match="sub_via"):
        ClaimInputs.from_spec_json({"workload_options": {"sub_via": "assign,poll"}})
