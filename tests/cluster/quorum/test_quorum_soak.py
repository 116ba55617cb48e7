"""Soak (not run by make test: `pytest -m soak`): many random fault schedules on simulated
quorums of 3 and 5 nodes, each checked for safety and for liveness after healing (the same
150 seeds, 3000-3149, were all valid when run as a script before this file existed; ten of
them take about 5 s of CPU)."""

from __future__ import annotations

import random

import pytest

from tests.cluster.quorum.test_quorum_faults import KINDS, Fault, assert_safe_and_live, run_schedule


def random_schedule(seed: int) -> tuple[int, list[Fault]]:
    rng = random.Random(seed)
    n = rng.choice([3, 5])
    faults = [Fault(rng.choice(KINDS), rng.randint(0, 1_500), rng.randint(100, 4_000), rng.randint(0, 20), rng.randint(0, 1_000))
              for _ in range(rng.randint(1, 6))]
    return n, faults


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(3000, 3150))
def test_random_fault_schedules_keep_the_quorum_safe_and_live(seed: int) -> None:
    n, faults = random_schedule(seed)
    assert_safe_and_live(run_schedule(n, seed, faults))
