"""The fault schedule is a generator routed to the nemesis: seeded, so the same seed gives
the same faults at the same (simulated) times, and it mixes with the workload."""

import pytest

from cluster.control import ClusterControl
from cluster.launcher import LocalCluster
from harness.generator import Completion, simulate
from harness.run import combine, fault_schedule, main_generator
from harness.spec import RunSpec
from nemeses.base import NemesisOptions
from nemeses.kill import KillPackage
from nemeses.pause import PausePackage
from workloads import queue


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    with LocalCluster(brokers=1, base_dir=tmp_path_factory.mktemp("faults"), seed=3) as cluster:
        yield ClusterControl(cluster)


def spec(seed):
    return RunSpec(name="faults", workload="queue", seed=seed, brokers=1, concurrency=3, rate_hz=20,
                   time_limit_s=80, nemeses=("kill", "pause"), nemesis_interval_s=5,
                   client_config=queue.default_client_config({}))


def schedule(control, seed):
    packages = [KillPackage(control, NemesisOptions()), PausePackage(control, NemesisOptions())]
    s = spec(seed)
    # The nemesis does nothing here: only what is scheduled, and when, is under test.
    history = simulate(main_generator(s, queue.build(s, "127.0.0.1:9").generator, fault_schedule(s, combine(packages))),
                       concurrency=3, complete=lambda inv: (Completion("ok", echo(inv)), 1_000_000))
    nemesis_invocations = [op for i, op in enumerate(op for op in history if op.process == "nemesis") if i % 2 == 0]
    return [(op.time_ns, op.f, op.value) for op in nemesis_invocations], history


def echo(inv):
    if inv.f == "send":
        return [["send", k, [None, v]] for _, k, v in inv.value]
    if inv.f == "poll":
        return [["poll", {}]]
    return inv.value


def test_same_seed_same_fault_schedule_and_different_seed_different(control):
    a, history = schedule(control, 1)
    b, _ = schedule(control, 1)
    c, _ = schedule(control, 2)
    assert len(a) >= 10
    assert a == b
    assert a != c
    fs = {f for _, f, _ in a}
    assert {"start-kill", "stop-kill", "start-pause", "stop-pause"} <= fs
    # every fault op comes after the initial calm, and client ops run alongside them
    assert min(t for t, _, _ in a) >= spec(1).initial_quiet_s * 1e9
    assert any(op.process != "nemesis" for op in history)


def test_each_fault_is_stopped_after_it_starts(control):
    ops, _ = schedule(control, 9)
    active = set()
    for _, f, _ in ops:
        phase, kind = f.split("-", 1) if "-" in f else (f, None)
        if phase == "start":
            assert kind not in active
            active.add(kind)
        elif phase == "stop":
            assert kind in active
            active.discard(kind)
