"""Clock skew with the PyPI libfaketime build on real processes: bumps move wall time and
not monotonic time, strobes flip, reset returns to real time, and libfaketime's shm files
are removed by recorded pid."""

from __future__ import annotations

import json
import os
import time

import pytest

from cluster.control import BrokerClocks, ClusterControl, ControlError, faketime_shm_paths, format_clock_offset
from nemeses.base import NemesisOptions
from nemeses.clock import ClockPackage
from tests.nemeses.echo_cluster import EchoCluster, ask


def skew(control: ClusterControl, node: int) -> tuple[float, float]:
    """(wall offset, monotonic offset) of a server's clocks against ours, in seconds."""
    before_wall, before_mono = time.time(), time.monotonic()
    answer = json.loads(ask(control.host(node), control.port(node), "clock"))
    after_wall, after_mono = time.time(), time.monotonic()
    return answer["wall"] - (before_wall + after_wall) / 2, answer["mono"] - (before_mono + after_mono) / 2


@pytest.fixture
def clocked(tmp_path):
    clocks = BrokerClocks(tmp_path / "clocks")
    cluster = EchoCluster(2, base_dir=str(tmp_path), extra_env=clocks.extra_env)
    control = None
    try:
        cluster.__enter__()
        control = ClusterControl(cluster, clocks)
        yield control
    finally:
        cluster.close()
        if control is not None:
            control.close()


def test_bump_moves_wall_clock_not_monotonic_and_reset_restores(clocked):
    control = clocked
    package = ClockPackage(control, NemesisOptions())
    wall, mono = skew(control, 0)
    assert abs(wall) < 0.5 and abs(mono) < 0.5

    done = package.invoke("start-clock", {"kind": "bump", "targets": "one", "nodes": [0], "delta_ms": 3_600_000})
    assert done["offsets"] == {"0": "+3600"}
    wall, mono = skew(control, 0)
    assert 3599.5 < wall < 3600.5
    assert abs(mono) < 0.5
    other_wall, _ = skew(control, 1)
    assert abs(other_wall) < 0.5

    # Bumps accumulate on the current offset.
    package.invoke("start-clock", {"kind": "bump", "targets": "one", "nodes": [0], "delta_ms": -1500})
    wall, _ = skew(control, 0)
    assert 3598.0 < wall < 3599.0

    reset = package.invoke("stop-clock", None)
    assert reset == {"reset": {"0": "+0", "1": "+0"}}
    wall, mono = skew(control, 0)
    assert abs(wall) < 0.5 and abs(mono) < 0.5


def test_strobe_flips_between_offsets_until_stopped(clocked):
    control = clocked
    package = ClockPackage(control, NemesisOptions())
    package.invoke("start-clock", {"kind": "strobe", "targets": "all", "nodes": [0, 1], "delta_ms": 5000,
                                   "period_ms": 50, "duration_ms": 30_000})
    seen = set()
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        wall, mono = skew(control, 1)
        assert abs(mono) < 0.5
        seen.add(round(wall))
    assert seen == {0, 5}
    package.invoke("stop-clock", None)
    assert all(abs(skew(control, node)[0]) < 0.5 for node in (0, 1))
    time.sleep(0.2)  # a stopped strobe must not flip again
    assert all(abs(skew(control, node)[0]) < 0.5 for node in (0, 1))


def test_shm_files_are_removed_by_recorded_pid(clocked):
    control = clocked
    first_pid = control.pid(0)
    for node in control.broker_ids:
        ask(control.host(node), control.port(node), "clock")  # libfaketime sets up its shm on use
    paths = faketime_shm_paths(first_pid)
    assert all(os.path.exists(p) for p in paths)
    control.kill(0)
    assert not any(os.path.exists(p) for p in paths)
    control.start(0)
    ask(control.host(0), control.port(0), "clock")
    live = [p for node in control.broker_ids for p in faketime_shm_paths(control.pid(node))]
    assert all(os.path.exists(p) for p in live)
    assert control.close() == []  # nothing to remove while the servers run
    control.cluster.close()
    removed = control.close()
    assert sorted(removed) == sorted(live)
    assert not any(os.path.exists(p) for p in live)


def test_offsets_are_written_in_libfaketime_syntax(tmp_path):
    assert [format_clock_offset(x) for x in (0, -0.0, 1, -2.25, 3600, 0.0005)] == \
        ["+0", "+0", "+1", "-2.25", "+3600", "+0.0005"]
    for bad in (float("nan"), float("inf"), "3", True):
        with pytest.raises(ValueError):
            format_clock_offset(bad)
    clocks = BrokerClocks(tmp_path)
    clocks.set_offset(3, -30)
    assert clocks.path(3).read_text() == "-30\n"
    assert not list(tmp_path.glob("*.tmp"))
    env = clocks.extra_env(4)
    assert env["DONT_FAKE_MONOTONIC"] == "1" and env["LD_PRELOAD"].endswith("libfaketime.so.1")
    assert clocks.path(4).read_text() == "+0\n"


def test_clock_control_refuses_without_clocks(tmp_path):
    cluster = EchoCluster(1, base_dir=str(tmp_path))
    control = ClusterControl(cluster)
    with pytest.raises(ControlError, match="extra_env=BrokerClocks"):
        control.set_clock_offset(0, 5)
    with pytest.raises(ControlError, match="no broker 7"):
        control.address(7)
