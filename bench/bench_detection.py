"""Runs to detection: how many 60-second runs it takes the harness to flag each unsafe switch
of the bundled cluster, with the fault mix named for it, and the verdict of the same mix on
the safe cluster (switch off), which must be valid.

    python -m bench.bench_detection [--runs 5] [--safe-runs 1] [--time-limit 60] [--switch NAME ...] [--seed 1000]
                                    [--results-dir DIR]

For each switch (SWITCHES below: the setting, the `logquake test` arguments that expose it,
and the anomalies its loss shows as), it runs `logquake test` with the switch on and seeds
seed, seed+1, ... until one run reports one of the switch's anomalies, up to `--runs` runs;
then `--safe-runs` runs of the same mix and seeds with the switch off (min ISR: at 2). It
prints one row per switch: runs to detection (or "not in N"), the anomalies found and
whether the claims allowed them, and the safe cluster's verdict. Runs are real processes on
the bundled cluster (the CLI a user runs, in a subprocess); results go to a temporary
directory that is removed, or are kept under `--results-dir` (each run's directory is printed).

Each run takes 80-140 s (60 s of faults, the final read, the Spark check), so a pass over
the five switches takes about 15 minutes when each is found in its first run, and up to an
hour when none is. This is a measurement, not a test: the two replication switches' losses
are also shown deterministically by the simulator (tests/cluster/sim/test_unsafe_switches.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The loss anomalies: an acknowledged or read value missing, or one offset holding two values.
LOSS = ("lost-write", "unseen", "inconsistent-offsets")


@dataclass(frozen=True)
class Switch:
    setting: str  # the cluster setting that turns the unsafe behaviour on
    mix: tuple[str, ...]  # `logquake test` arguments that expose it (the switch itself excluded)
    anomalies: tuple[str, ...]  # what its loss shows as
    why: str  # how the mix exposes it
    # The setting of the safe run, when leaving the switch out is not safe (min ISR defaults to 1).
    safe_setting: str | None = None


SWITCHES = (
    Switch("unclean.leader.election.enable=true",
           ("--nemesis", "brokers-down"),
           LOSS,
           "brokers-down kills both followers one at a time (ISR = the leader alone), then the leader, and restarts "
           "the follower killed first: unclean election makes it leader without what it missed. Kafka documents "
           "the loss, so the anomalies are listed as allowed and the verdict stays valid"),
    Switch("log.crash.lose.unflushed=true",
           ("--nemesis", "brokers-down", "--cluster-config", "min.insync.replicas=2"),
           LOSS,
           "with min ISR 2 a record is acknowledged by two replicas; brokers-down SIGKILLs both of them, and "
           "without the page cache both lose what they had not flushed. No in-sync replica stays alive: Kafka "
           "documents the loss, and the claims allow it (3 brokers down at once >= min ISR 2), so the verdict "
           "stays valid"),
    Switch("min.insync.replicas=1",
           ("--nemesis", "brokers-down", "--cluster-config", "log.crash.lose.unflushed=true",
            "--cluster-config", "log.flush.interval.ms=1000"),
           LOSS,
           "min ISR 1 loses acks=all writes only if the lone leader's crash loses them too: brokers-down leaves the "
           "leader alone in the ISR, which with min ISR 1 acknowledges writes by itself for 2 s, then SIGKILLs it; "
           "without the page cache it loses the last second of them (flushes every 1 s). With min ISR 2 the lone "
           "leader refuses writes, and what two replicas acknowledged earlier is flushed by the time it is killed. "
           "Kafka documents the loss (min ISR 1 and an unflushed crash), so the anomalies are allowed",
           safe_setting="min.insync.replicas=2"),
    Switch("replica.truncate.to.high.watermark=true",
           ("--nemesis", "kill,partition", "--nemesis-interval", "5",
            "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=1000"),
           LOSS,
           "every leader change makes the other in-sync replicas truncate to their own high watermark, which trails "
           "the leader's by a fetch round, so they drop records the leader has acknowledged; kills and partitions "
           "every few seconds, with a 3 s session timeout for prompt elections, elect such a replica before it has "
           "fetched them back (a partition can keep it from the new leader while it stays in the ISR), and the "
           "acknowledged records are gone"),
    Switch("fetch.read.past.high.watermark=true",
           ("--nemesis", "partition", "--nemesis-interval", "10", "--nemesis-option", "partition_targets=primary",
            "--client-config", "isolation.level=read_uncommitted",
            "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=1000"),
           LOSS,
           "every partition fault isolates the broker leading the most tested partitions from the other brokers and "
           "the controller, but not from the clients: its acks=all writes wait and its high watermark stands still "
           "while consumers read past it; after the 3 s session timeout the majority elects a follower without those "
           "records, which gives their offsets to other values. The consumers read uncommitted: a read_committed "
           "fetch (the workloads' default, as Jepsen's) stops at the last stable offset, which never passes the high "
           "watermark, so the switch cannot show"),
)


@dataclass
class Outcome:
    verdict: str  # valid, invalid, unknown, error
    found: dict[str, bool]  # anomaly name -> allowed by the claims
    run_dir: str


def run_once(args: list[str], results_dir: Path, name: str) -> Outcome:
    command = [sys.executable, "-m", "harness.cli", "test", "--name", name, "--results-dir", str(results_dir), *args]
    proc = subprocess.run(command, capture_output=True, text=True)
    runs = sorted((results_dir / name).glob("2*/results.json"))
    if not runs:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return Outcome("error", {}, f"exit {proc.returncode}: {' | '.join(tail)}")
    result = json.loads(runs[-1].read_text())
    valid = result.get("valid")
    verdict = "valid" if valid is True else "invalid" if valid is False else "unknown"
    found = {a["name"]: bool(a.get("allowed")) for a in result.get("anomalies", [])}
    return Outcome(verdict, found, str(runs[-1].parent))


def measure(switch: Switch, runs: int, safe_runs: int, time_limit: float, seed: int, results_dir: Path) -> dict:
    base = ["--time-limit", str(time_limit), *switch.mix]
    detected_at = None
    found: dict[str, bool] = {}
    verdicts = []
    for i in range(runs):
        started = time.monotonic()
        out = run_once([*base, "--seed", str(seed + i), "--cluster-config", switch.setting], results_dir,
                       f"on-{switch.setting.split('=')[0]}-{i}")
        verdicts.append(out.verdict)
        hits = {name: allowed for name, allowed in out.found.items() if name in switch.anomalies}
        print(f"  {switch.setting} seed {seed + i}: {out.verdict}, {sorted(out.found)} ({time.monotonic() - started:.0f} s, "
              f"{out.run_dir})", flush=True)
        if hits:
            detected_at, found = i + 1, hits
            break
    safe_verdicts: list[str] = []
    safe_found: set[str] = set()
    for i in range(safe_runs):
        safe_args = ["--cluster-config", switch.safe_setting] if switch.safe_setting else []
        safe = run_once([*base, "--seed", str(seed + i), *safe_args], results_dir, f"off-{switch.setting.split('=')[0]}-{i}")
        print(f"  safe cluster, seed {seed + i}: {safe.verdict}, {sorted(safe.found)} ({safe.run_dir})", flush=True)
        safe_verdicts.append(safe.verdict)
        safe_found |= set(safe.found)
    # The safe cluster's verdict is the worst of its runs: one invalid run is a bug to chase.
    worst = next((v for v in ("error", "invalid", "unknown") if v in safe_verdicts), "valid")
    return {"switch": switch.setting, "mix": " ".join(switch.mix), "runs_to_detection": detected_at, "runs": len(verdicts),
            "verdicts": verdicts, "found": found, "safe_verdict": worst, "safe_verdicts": safe_verdicts,
            "safe_anomalies": sorted(safe_found)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="most runs per switch (default 5)")
    parser.add_argument("--safe-runs", type=int, default=1, help="runs of the same mix with the switch off (default 1)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per run (default 60)")
    parser.add_argument("--seed", type=int, default=1000, help="first seed (default 1000)")
    parser.add_argument("--switch", action="append", default=[], help="only this setting name (repeatable)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--results-dir", default=None,
                        help="keep every run's directory here (default: a temporary directory, removed)")
    opts = parser.parse_args(argv)
    chosen = [s for s in SWITCHES if not opts.switch or s.setting.split("=")[0] in opts.switch]
    if not chosen:
        parser.error(f"no switch named {opts.switch}; known: {', '.join(s.setting.split('=')[0] for s in SWITCHES)}")
    print(f"load at start: {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="logquake-detection-") as tmp:
        results_dir = Path(opts.results_dir) if opts.results_dir else Path(tmp)
        for switch in chosen:
            print(f"== {switch.setting}: {' '.join(switch.mix)}", flush=True)
            rows.append(measure(switch, opts.runs, opts.safe_runs, opts.time_limit, opts.seed, results_dir))
    print(f"load at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"{'switch':42} {'runs to detection':18} {'anomalies (allowed?)':48} safe cluster")
    for row in rows:
        runs = str(row["runs_to_detection"]) if row["runs_to_detection"] else f"not in {row['runs']}"
        found = ", ".join(f"{name}{' (allowed)' if allowed else ''}" for name, allowed in sorted(row["found"].items())) or "-"
        print(f"{row['switch']:42} {runs:18} {found:48} {row['safe_verdict']} ({', '.join(row['safe_verdicts'])})")
    if opts.json:
        Path(opts.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
