"""A client library's `time` and `random` pointed at the simulation, and hashes that do not
change between processes, for exactly as long as the environment is active."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.structs import TopicPartition

from cluster.runtime.virtual_time import NodeClock, VirtualClock
from cluster.sim.aio_client_env import CanonicalRandom, stable_hash, virtual_environment


@pytest.fixture
def fake_package() -> Iterator[types.ModuleType]:
    """A client package as the environment sees one: modules in sys.modules that imported
    `time` and `random`."""
    package = types.ModuleType("fakeclient")
    inner = types.ModuleType("fakeclient.conn")
    inner.time = time  # type: ignore[attr-defined]
    inner.random = random  # type: ignore[attr-defined]
    sys.modules["fakeclient"], sys.modules["fakeclient.conn"] = package, inner
    try:
        yield inner
    finally:
        del sys.modules["fakeclient"], sys.modules["fakeclient.conn"]


def test_the_clock_and_the_draws_are_the_simulations_while_active_and_real_after(fake_package: types.ModuleType) -> None:
    clock = VirtualClock(monotonic_ns=2_500_000_000, wall_ms=1_700_000_000_000)
    with virtual_environment(NodeClock(clock), CanonicalRandom(9), ("fakeclient",), ()):
        assert fake_package.time.monotonic() == 2.5
        assert fake_package.time.time() == 1_700_000_000.0
        assert fake_package.time.strftime("%Y", fake_package.time.gmtime(0)) == "1970"  # the rest is the real module
        with pytest.raises(RuntimeError, match="asyncio.sleep"):
            fake_package.time.sleep(1)
        draws = [fake_package.random.random() for _ in range(3)]
        with pytest.raises(RuntimeError, match="already active"):
            with virtual_environment(NodeClock(clock), CanonicalRandom(9), ("fakeclient",), ()):
                pass
    expected = random.Random(9)
    assert draws == [expected.random() for _ in range(3)]
    assert fake_package.time is time and fake_package.random is random


def test_a_clock_imported_by_name_is_refused_and_nothing_stays_swapped(fake_package: types.ModuleType) -> None:
    fake_package.monotonic = time.monotonic  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="fakeclient.conn.monotonic"):
        with virtual_environment(NodeClock(VirtualClock()), CanonicalRandom(1), ("fakeclient",), ()):
            pass
    assert fake_package.time is time and fake_package.random is random
    # The failed attempt released the environment: it can be entered again.
    del fake_package.monotonic
    with virtual_environment(NodeClock(VirtualClock()), CanonicalRandom(1), ("fakeclient",), ()):
        assert fake_package.time is not time


def test_canonical_draws_do_not_depend_on_the_order_of_their_input() -> None:
    members = ["broker-b", "broker-a", "broker-c", "broker-d"]
    orders = [members, list(reversed(members)), sorted(members)]
    assert len({CanonicalRandom(5).choice(order) for order in orders}) == 1
    shuffled = []
    for order in orders:
        copy = list(order)
        CanonicalRandom(5).shuffle(copy)
        shuffled.append(copy)
    assert shuffled[0] == shuffled[1] == shuffled[2]
    assert len({tuple(CanonicalRandom(5).sample(order, 2)) for order in orders}) == 1


def test_partition_hashes_are_the_same_in_every_process_while_active() -> None:
    code = ("from aiokafka.structs import TopicPartition; from cluster.sim.aio_client_env import virtual_environment, CanonicalRandom;"
            "from cluster.runtime.virtual_time import NodeClock, VirtualClock;"
            "env = virtual_environment(NodeClock(VirtualClock()), CanonicalRandom(1));"
            "env.__enter__(); print(hash(TopicPartition('orders', 3)), list({TopicPartition(t, p) for t in 'abcdefgh' for p in range(3)}))")
    outputs = {subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3],
                              env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True,
                              check=True, timeout=120).stdout for seed in ("1", "2", "3")}
    assert len(outputs) == 1
    assert outputs.pop().split()[0] == str(stable_hash(("orders", 3)))
    # Outside the environment, the tuple's own (salted) hash is back.
    assert hash(TopicPartition("orders", 3)) == hash(("orders", 3))
