"""Issue 15's spike: an unmodified aiokafka runs inside the simulation, on the deterministic
asyncio loop, against three simulated brokers; a leader is killed mid-way; nothing acked is
lost; and one seed gives a byte-identical trace, in this process and in another one with a
different PYTHONHASHSEED."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import aiokafka.conn
import aiokafka.consumer.fetcher

from tests.cluster.sim.aiokafka_scenario import PARTITIONS, run

REPO = Path(__file__).resolve().parents[3]


def test_an_idempotent_producer_and_a_group_consumer_lose_nothing_through_a_leader_kill() -> None:
    outcome = run(seed=3, records=200)
    print(f"\nsimulated {outcome.speed.simulated_s:.2f} s in {outcome.speed.wall_s:.2f} s wall "
          f"({outcome.speed.ratio:.1f}x), {outcome.client_requests} client requests, broker {outcome.killed} killed")
    values = [f"v{i:05d}".encode() for i in range(200)]
    assert sorted(v for _, _, v in outcome.acked) == values, "every send was acknowledged"
    # Each acknowledged record is where the producer was told, and read exactly once there
    # (idempotence: retries through the failover wrote no duplicates).
    at = {(p, o): v for p, o, v in outcome.consumed}
    assert all(at.get((p, o)) == v for p, o, v in outcome.acked)
    assert Counter(v for _, _, v in outcome.consumed) == Counter(values)
    # The group's commits are the ends of the partitions.
    ends = {p: 1 + max(o for q, o, _ in outcome.consumed if q == p) for p in range(PARTITIONS)}
    assert outcome.committed == ends
    # Partition 0 took records sent after its leader died: the producer found the new one.
    assert any(p == 0 and int(v[1:]) >= 100 for p, _, v in outcome.acked)
    assert not outcome.sim_running[outcome.killed]
    # The client's time and randomness are the real modules again afterwards.
    assert aiokafka.conn.time is time and aiokafka.consumer.fetcher.random is random


def test_the_same_seed_gives_a_byte_identical_trace_in_process_and_across_hash_seeds() -> None:
    first = run(seed=11, records=120)
    second = run(seed=11, records=120)
    assert first.trace == second.trace
    hash_seed = "4242" if os.environ.get("PYTHONHASHSEED") != "4242" else "77"
    child = subprocess.run([sys.executable, "-m", "tests.cluster.sim.aiokafka_scenario", "11", "120"], cwd=REPO,
                           env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout == first.trace
    # It is a trace worth comparing: requests to every broker, records read, commits made.
    assert {line.split()[1] for line in first.trace.splitlines() if " node=" in line} == {"node=0", "node=1", "node=2"}
    assert sum(line.startswith("record ") for line in first.trace.splitlines()) >= 120
    assert sum(line.startswith("committed ") for line in first.trace.splitlines()) == PARTITIONS
    # A different seed is a different run.
    assert run(seed=12, records=120).trace != first.trace

