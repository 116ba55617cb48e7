"""The unflushed-crash loss rule with and without eligible leader replicas (KIP-966): with
log.crash.lose.unflushed=true and eligible.leader.replicas.version=0 one crash of a lone ISR
member loses acknowledged writes whatever min ISR (the last replica standing), so the claims
allow it once a kill ran; with them (the default) min ISR >= 2 allows nothing."""

from __future__ import annotations

import pytest

from checkers.claims import ClaimInputs, claims_for, classify, loss_allowance, with_faults


def _inputs(min_isr: int, lose: bool, elr: str | None, faults: set[str]) -> ClaimInputs:
    cluster = {"min.insync.replicas": str(min_isr), "log.crash.lose.unflushed": str(lose).lower()}
    if elr is not None:
        cluster["eligible.leader.replicas.version"] = elr
    spec = {"workload": "queue", "brokers": 3, "client_config": {"acks": "all"}, "cluster_config": cluster,
            "workload_options": {"replication_factor": 3}}
    return with_faults(ClaimInputs.from_spec_json(spec), frozenset(faults))


@pytest.mark.parametrize("min_isr, lose, elr, faults, allowed", [
    # ELR off: the last replica standing, one kill is enough, whatever min ISR.
    *[(m, True, "0", f, True) for m in (2, 3) for f in ({"kill"}, {"pause", "kill"}, {"brokers-down"}, {"lone-leader-crash"})],
    # ...but only a crash loses the page cache, and only with the switch.
    (2, True, "0", {"pause", "partition"}, False),
    (2, False, "0", {"pause", "kill"}, False),
    # ELR on (given or by default): min ISR >= 2 allows no loss.
    *[(m, True, e, {"pause", "kill"}, False) for m in (2, 3) for e in ("1", None)],
])
def test_unflushed_crash_rule_follows_eligible_leader_replicas(min_isr, lose, elr, faults, allowed):
    inputs = _inputs(min_isr, lose, elr, faults)
    assert inputs.eligible_leader_replicas == (elr != "0")
    allowance = loss_allowance(inputs)
    assert (allowance is not None) == allowed, allowance
    if allowed:
        assert "KIP-966" in allowance and "eligible.leader.replicas.version=0" in allowance
    claims = claims_for(inputs)
    assert classify("lost-write", inputs, claims) == ((True, []) if allowed else (False, ["acked-writes-durable"]))
