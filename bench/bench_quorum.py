"""Metadata-quorum failover time in the simulator (issue 19, Performance): a quorum of real
Raft nodes (cluster/quorum/raft.py) on the virtual clock and network, KRaft's default
timeouts, a client appending every 10 ms; the leader is SIGKILLed (or stopped gracefully with
`--graceful`) and the benchmark measures, in simulated time from the kill:

- elected: a surviving node becomes leader of a new epoch;
- ready: its LeaderChange record is committed (everything before the epoch delivered): the
  controller above it may act, e.g. elect partition leaders;
- first commit: the first append made after the kill is committed.

    python -m bench.bench_quorum [--seeds 20] [--voters 3] [--graceful]

Reference (printed alongside): Kafka's defaults, controller.quorum.fetch.timeout.ms 2000
(followers notice a silent leader) + controller.quorum.election.timeout.ms 1000 (one election
round) = 3000 ms. The figures are exact for a seed (virtual time), so they do not depend on
the machine's load; the wall time of the whole run is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from cluster.quorum.raft import Role
from cluster.sim.quorum_harness import QuorumSim

KAFKA_FETCH_TIMEOUT_MS = 2000
KAFKA_ELECTION_TIMEOUT_MS = 1000
APPEND_EVERY_MS = 10


@dataclass
class Failover:
    seed: int
    elected_ms: float
    ready_ms: float
    first_commit_ms: float


def measure(seed: int, voters: int, graceful: bool) -> Failover:
    sim = QuorumSim(voters, seed)
    sim.run_until(lambda: sim.leader() is not None, 30_000, what="a first leader")
    # Warm up: appends flowing, followers long-polling, as under a controller's load.
    for i in range(100 + seed % 37):  # a seed-dependent phase of the kill against the fetches
        sim.propose(f"warm-{i}".encode())
        sim.run_for(APPEND_EVERY_MS)
    old = sim.leader()
    assert old is not None
    old_epoch = old.epoch
    start_ns = sim.clock.monotonic_ns()
    if graceful:
        sim.stop(old.node_id)
    else:
        sim.kill(old.node_id)

    def elapsed_ms() -> float:
        return (sim.clock.monotonic_ns() - start_ns) / 1e6

    elected = ready = first_commit = None
    acknowledged_before = len(sim.acknowledged)
    proposed_after_kill = False
    while first_commit is None:
        if elapsed_ms() > 60_000:
            raise AssertionError(f"seed {seed}: no failover within 60 simulated s")
        if sim.propose(b"after-kill"):
            proposed_after_kill = True
        sim.run_for(1)
        running = [q for q in sim.running() if q.node_id != old.node_id]
        if elected is None and any(q.role is Role.LEADER and q.epoch > old_epoch for q in running):
            elected = elapsed_ms()
        if ready is None and any(q.is_leader and q.epoch > old_epoch for q in running):
            ready = elapsed_ms()
        if proposed_after_kill and len(sim.acknowledged) > acknowledged_before:
            first_commit = elapsed_ms()
    assert elected is not None and ready is not None
    violations = sim.check()
    assert not violations, violations
    return Failover(seed, elected, ready, first_commit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--graceful", action="store_true", help="stop the leader (EndQuorumEpoch) instead of SIGKILL")
    args = parser.parse_args()
    wall = time.perf_counter()
    runs = [measure(seed, args.voters, args.graceful) for seed in range(1, args.seeds + 1)]
    wall = time.perf_counter() - wall
    reference = KAFKA_FETCH_TIMEOUT_MS + KAFKA_ELECTION_TIMEOUT_MS
    how = "graceful stop" if args.graceful else "SIGKILL"
    print(f"quorum failover after {how} of the leader: {args.voters} voters, {args.seeds} seeds, KRaft's default timeouts, "
          f"simulated ms ({wall:.1f} s wall)")
    for name in ("elected_ms", "ready_ms", "first_commit_ms"):
        values = [getattr(r, name) for r in runs]
        print(f"  {name[:-3]:<13} median {statistics.median(values):7.1f}  min {min(values):7.1f}  max {max(values):7.1f}")
    over = [r.seed for r in runs if r.ready_ms > reference]
    print(f"  seeds ready later than the reference: {len(over)} of {len(runs)} {over}")
    ready = statistics.median(r.ready_ms for r in runs)
    print(f"reference: Kafka's defaults, fetch timeout {KAFKA_FETCH_TIMEOUT_MS} + election timeout {KAFKA_ELECTION_TIMEOUT_MS} "
          f"= {reference} ms; ready median / reference = {ready / reference:.2f}x")


if __name__ == "__main__":
    main()
