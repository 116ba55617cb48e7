"""Unflushed crashes that overlap: with log.crash.lose.unflushed=true, eligible leader
replicas on and min ISR m >= 2, the claims allow losing an acknowledged write only when the
history's nemesis ops show at least m brokers down at once from such crashes
(checkers/crashes.py). Histories are built line by line as the nemeses record them (an
invocation, then a completion, both `info`)."""

from __future__ import annotations

import pytest

from checkers.claims import ClaimInputs, claims_for, classify, loss_allowance, unflushed_down_at_once, with_faults
from checkers.crashes import crash_periods, most_down_at_once

T = 0


def _line(f: str, value=None, error=None, heal: bool = False) -> dict:
    global T
    T += 100_000_000
    return {"f": f, "time_ns": T, "value": value, "error": error, "heal": heal}


def kill(*nodes: int, not_running: tuple[int, ...] = ()) -> list[dict]:
    killed = [{"node": n, "pid": 100 + n} for n in nodes] + [{"node": n, "not_running": True} for n in not_running]
    return [_line("start-kill", {"targets": "nodes", "nodes": sorted(nodes + not_running)}),
            _line("start-kill", {"targets": "nodes", "nodes": sorted(nodes + not_running), "killed": killed})]


def restart(kind: str = "kill") -> list[dict]:
    return [_line(f"stop-{kind}"), _line(f"stop-{kind}", {"started": []})]


def heal(kind: str) -> list[dict]:
    return [_line(f"stop-{kind}", "heal", heal=True), _line(f"stop-{kind}", None, heal=True)]


def lone_leader_crash(leader: int, stalled: tuple[int, int]) -> list[dict]:
    return [_line("start-lone-leader-crash", {"script": "lone-leader-crash"}),
            _line("start-lone-leader-crash", {"partition": "t0-0", "leader": leader, "stalled": list(stalled),
                                              "stall_s": 1.0})]


def brokers_down(leader: int, first: int, second: int) -> list[dict]:
    return [_line("start-brokers-down", {"script": "brokers-down"}),
            _line("start-brokers-down", {"partition": "t0-0", "leader": leader, "followers": [first, second],
                                         "steps": ["..."], "new_leader": -1})]


def torn_crash(node: int) -> list[dict]:
    return [_line("start-disk", {"kind": "torn-crash", "targets": "one", "nodes": [node], "seed": 1}),
            _line("start-disk", {"kind": "torn-crash", "targets": "one", "nodes": [node], "seed": 1,
                                 "faulted": [{"node": node, "power_loss": True, "files_torn": 3}]})]


def pause(*nodes: int) -> list[dict]:
    return [_line("start-pause", {"targets": "nodes", "nodes": list(nodes)}),
            _line("start-pause", {"targets": "nodes", "nodes": list(nodes), "paused": [{"node": n} for n in nodes]})]


def inputs(ops: list[dict], *, min_isr: int = 2, lose: bool = True, elr: str = "1", rf: int = 3) -> ClaimInputs:
    cluster = {"min.insync.replicas": str(min_isr), "log.crash.lose.unflushed": str(lose).lower(),
               "eligible.leader.replicas.version": elr}
    spec = {"workload": "queue", "brokers": 3, "client_config": {"acks": "all"}, "cluster_config": cluster,
            "workload_options": {"replication_factor": rf}}
    kinds = frozenset(op["f"][len("start-"):] for op in ops if op["f"].startswith("start-"))
    return with_faults(ClaimInputs.from_spec_json(spec), kinds, tuple(ops))


def down(ops: list[dict], lose: bool = True) -> int:
    return most_down_at_once(crash_periods(ops), kills_lose_unflushed=lose).count


def loss_allowed(i: ClaimInputs) -> bool:
    allowed = loss_allowance(i) is not None
    claims = claims_for(i)
    for name in ("lost-write", "unseen"):
        assert classify(name, i, claims) == ((True, []) if allowed else (False, ["acked-writes-durable"]))
    return allowed


OVERLAPPING = kill(1, 2) + restart()
SEQUENTIAL = kill(0) + restart() + kill(1) + restart() + kill(2) + restart()
ALL_AT_ONCE = kill(0, 1, 2) + restart()


@pytest.mark.parametrize("ops, min_isr, allowed", [
    (OVERLAPPING, 2, True),  # two in-sync copies crash together: the documented loss
    (OVERLAPPING, 3, False),  # min ISR 3: the third acknowledged copy survives
    (ALL_AT_ONCE, 3, True),
    (SEQUENTIAL, 2, False),  # one crash at a time loses nothing with eligible leader replicas
    (SEQUENTIAL, 3, False),
    # a kill of 0 held across the kill of 1 by another package: two down at once.
    (kill(0) + lone_leader_crash(1, (0, 2)) + restart("lone-leader-crash") + restart(), 2, True),
    # brokers-down: at its leader's kill the three were down (then it restarts the first).
    (brokers_down(leader=2, first=0, second=1) + restart("brokers-down"), 3, True),
])
def test_a_loss_is_allowed_only_with_min_isr_brokers_down_at_once(ops, min_isr, allowed) -> None:
    i = inputs(ops, min_isr=min_isr)
    assert loss_allowed(i) == allowed, loss_allowance(i)


def test_the_explanation_says_why_the_loss_is_allowed() -> None:
    i = inputs(ALL_AT_ONCE, min_isr=2)
    allowance = loss_allowance(i)
    assert "3 brokers down at once from unflushed crashes >= min ISR 2" in allowance
    assert "broker(s) 0, 1, 2 (kill)" in allowance and "log.crash.lose.unflushed=true" in allowance
    durable = next(c for c in claims_for(i) if c.name == "acked-writes-durable")
    assert not durable.holds and "3 brokers down at once" in durable.reason
    # A loss that stays bad says how many overlapped, so the reader sees why it is not excused.
    durable = next(c for c in claims_for(inputs(SEQUENTIAL)) if c.name == "acked-writes-durable")
    assert durable.holds and "at most 1 broker(s) down at once from unflushed crashes" in durable.reason


def test_kills_count_only_when_they_lose_unflushed_data_and_power_losses_always() -> None:
    assert not loss_allowed(inputs(ALL_AT_ONCE, lose=False))  # SIGKILL keeps the page cache
    assert down(ALL_AT_ONCE, lose=False) == 0
    torn_and_kill = torn_crash(0) + kill(1) + restart() + restart("disk")
    assert down(torn_and_kill, lose=True) == 2 and down(torn_and_kill, lose=False) == 1
    assert loss_allowed(inputs(torn_and_kill))
    assert not loss_allowed(inputs(torn_and_kill, lose=False))


def test_a_crash_ends_at_the_first_op_that_may_restart_it() -> None:
    # A kill that ends before the next starts does not overlap it, and a restarted broker
    # (back from an unclean shutdown, out of every ISR and ELR) carries no loss afterwards.
    assert down(kill(0) + restart() + kill(1)) == 1
    assert down(kill(0) + heal("kill") + kill(1)) == 1
    # Pauses, partitions and clock faults leave a dead broker dead.
    assert down(kill(0) + pause(2) + restart("pause") + [_line("stop-partition")] + lone_leader_crash(1, (0, 2))) == 2
    # A stop of a kind the claims do not know may restart anything.
    assert down(kill(0) + [_line("stop-meteor")] + lone_leader_crash(1, (0, 2))) == 1
    # kill found 0 down (a torn-crash) and took it over: its stop restarts 0 ...
    assert down(torn_crash(0) + kill(not_running=(0,)) + restart() + lone_leader_crash(2, (0, 1))) == 1
    # ... while a stop of a package that never held it leaves it down.
    ops = torn_crash(0) + kill(1) + restart() + lone_leader_crash(2, (0, 1)) + restart("lone-leader-crash")
    assert [(p.node, p.kind, p.end) for p in crash_periods(ops)] == [
        (0, "torn-crash", None), (1, "kill", 4), (2, "lone-leader-crash", 8)]
    assert down(ops + restart("disk")) == 2
    # brokers-down restarts its first follower inside the op: a kill of it before ends there.
    assert down(kill(0) + brokers_down(leader=2, first=0, second=1) + kill(0)) == 3


def test_only_a_completed_start_proves_a_crash() -> None:
    invoked_only = [kill(0, 1)[0]]
    failed = [kill(0, 1)[0], _line("start-kill", None, error=["exception", "ControlError: boom"])]
    assert down(invoked_only) == 0 and down(failed) == 0
    assert not loss_allowed(inputs(failed))
    # A kill of a broker already down proves nothing new; a controller's kill loses no data.
    assert down(kill(0, not_running=(1,))) == 1
    assert down(kill(0, 1000)) == 1
    # A brokers-down script that raised may have restarted any broker: nothing held counts after it.
    script_failed = kill(0) + [_line("start-brokers-down", {"script": "brokers-down"}),
                               _line("start-brokers-down", None, error=["exception", "ControlError: boom"])]
    assert down(script_failed + lone_leader_crash(1, (0, 2))) == 1
    # ... while one that found no partition did nothing.
    no_target = kill(0) + [_line("start-brokers-down", {"script": "brokers-down"}),
                           _line("start-brokers-down", {"error": "no partition with a leader and at least two followers"})]
    assert down(no_target + lone_leader_crash(1, (0, 2))) == 2


def test_the_older_rules_stand() -> None:
    # Without eligible leader replicas one kill loses (the last replica standing); with min
    # ISR 1 or RF 1 a lone in-sync copy's crash loses: no overlap needed.
    single = kill(0) + restart()
    assert loss_allowed(inputs(single, elr="0"))
    assert loss_allowed(inputs(single, min_isr=1))
    assert loss_allowed(inputs(single, rf=1))
    assert not loss_allowed(inputs(single))


def test_the_overlap_is_recorded_in_the_inputs() -> None:
    i = inputs(kill(1, 2) + restart())
    d = unflushed_down_at_once(i)
    assert (d.count, d.nodes, d.kinds) == (2, (1, 2), ("kill",))
    assert with_faults(i, frozenset()).crashes == i.crashes  # nothing new read, nothing added


def test_the_sweep_counts_what_a_brute_force_count_does() -> None:
    import random

    from checkers.crashes import CrashPeriod

    rng = random.Random(7)
    for _ in range(300):
        periods, free_at = [], {}
        for _ in range(rng.randint(0, 8)):
            node = rng.randrange(5)
            if free_at.get(node, 0) is None:
                continue  # down to the end already
            start = free_at.get(node, 0) + rng.randint(0, 4)  # one broker's periods never overlap
            end = None if rng.random() < 0.2 else start + rng.randint(0, 4)
            free_at[node] = None if end is None else end + 1
            periods.append(CrashPeriod(node, rng.choice(["kill", "torn-crash", "brokers-down"]), start, end, start))
        for lose in (True, False):
            counted = [p for p in periods if lose or p.kind == "torn-crash"]
            brute = max((len({p.node for p in counted if p.start <= x and (p.end is None or x <= p.end)})
                         for x in range(0, 80)), default=0)
            assert most_down_at_once(periods, kills_lose_unflushed=lose).count == brute, periods
