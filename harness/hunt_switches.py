"""The hunt that exposes each unsafe switch the simulation can show: its fault kinds, the
run's shape and the cluster and client settings (the README's fault mixes, on short
simulated runs so that each example costs a few wall seconds). bench/bench_hunt.py times
them; tests/harness/test_hunt.py runs them (the unflushed crash in CI, the others soak).

Not here, and why: `unclean.leader.election.enable=true` and `min.insync.replicas=1` lose
data Kafka documents as possible, so the claims allow it and their runs are valid (a hunt
stops only at an invalid verdict); the transaction switches need the eos workload, which
has no simulated client yet.
"""

from __future__ import annotations

SWITCH_HUNTS: dict[str, list[str]] = {
    "log.crash.lose.unflushed": [
        "--nemesis", "kill", "--time-limit", "2", "--final-time-limit", "3", "--quiet-period", "0.5",
        "--rate", "50", "--concurrency", "2", "--max-faults", "2",
        "--cluster-config", "min.insync.replicas=2", "--cluster-config", "log.crash.lose.unflushed=true"],
    "replica.truncate.to.high.watermark": [
        "--nemesis", "kill,partition", "--time-limit", "8", "--final-time-limit", "5", "--quiet-period", "1",
        "--rate", "50", "--concurrency", "3", "--max-faults", "3",
        "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=1000",
        "--cluster-config", "replica.truncate.to.high.watermark=true"],
    "fetch.read.past.high.watermark": [
        "--nemesis", "partition", "--time-limit", "8", "--final-time-limit", "5", "--quiet-period", "1",
        "--rate", "50", "--concurrency", "3", "--max-faults", "2", "--client-config", "isolation.level=read_uncommitted",
        "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=1000",
        "--cluster-config", "fetch.read.past.high.watermark=true"],
}


def without_switch(argv: list[str]) -> list[str]:
    """The same hunt on the safe cluster: the switch's own setting left out."""
    out: list[str] = []
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if item == "--cluster-config" and i + 1 < len(argv) and argv[i + 1].split("=")[0] in SWITCH_HUNTS:
            skip = True
            continue
        out.append(item)
    return out
