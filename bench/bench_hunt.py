"""bench_hunt: wall time for `logquake hunt` to find and shrink each unsafe switch's failure.

For each switch the simulation can show (its fault kinds and cluster settings below), the
hunt runs once per seed in this process (no example database, so seeds do not share
findings), and the bench prints, per seed, the wall seconds to the first invalid run, to the
end of the shrink (search + shrink, without the final replay run), the simulated runs it
took and the minimal schedule; then the medians. Spark starts once, untimed, before the
first hunt, and checks one simulated run, untimed: the first check in a JVM took 13.9 s
against 0.5-1.2 s for the next ones of the same history (load 15, 2026-11-27), so without
it the first seed alone carried that; a `logquake hunt` pays both in its first example. The load average is
printed at the start and the end: the machine is shared, and a run's wall time follows it.

    python -m bench.bench_hunt                     # every switch, seeds 1-5
    python -m bench.bench_hunt --switch log.crash.lose.unflushed --seeds 3 --budget 120
    python -m bench.bench_hunt --switch unclean.leader.election.enable --safe-examples 20
    python -m bench.bench_hunt --switch eligible.leader.replicas.version --first-seed 3 --seeds 2

The switches and their hunts are in harness/hunt_switches.py (which says why the others
are not there): SWITCH_HUNTS stop at an invalid verdict; FIND_HUNTS (`--find`) at a run
showing an acknowledged loss the claims allow (exit 3). `--safe-examples N` also runs, per
seed, the same search on the safe cluster for N runs and prints whether it found anything
(it should not).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.hunt_switches import FIND_HUNTS, SWITCH_HUNTS, safe_find_hunt, without_switch

SWITCHES = {**SWITCH_HUNTS, **FIND_HUNTS}


def safe_hunt(switch: str) -> list[str]:
    return safe_find_hunt(switch) if switch in FIND_HUNTS else without_switch(SWITCH_HUNTS[switch])


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def hunt_once(switch: str, seed: int, budget_s: float, max_shrinks: int | None) -> dict:
    return run_hunt(SWITCHES[switch], seed, budget_s, max_shrinks)


def safe_once(switch: str, seed: int, budget_s: float, examples: int) -> dict:
    """The same search on the safe cluster, `examples` runs: exit 0 and nothing found is the pass."""
    return run_hunt([*safe_hunt(switch), "--max-examples", str(examples)], seed, budget_s, None)


def run_hunt(hunt_argv: list[str], seed: int, budget_s: float, max_shrinks: int | None) -> dict:
    from harness.cli import main

    with tempfile.TemporaryDirectory(prefix="bench-hunt-") as root:
        argv = ["hunt", *hunt_argv, "--seed", str(seed), "--budget", f"{budget_s:g}", "--no-database",
                "--results-dir", root]
        if max_shrinks is not None:
            argv += ["--max-shrinks", str(max_shrinks)]
        out = io.StringIO()
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
        wall_s = time.monotonic() - started
        found = list(Path(root).glob("hunt/*/hunt.json"))
        if not found:
            return {"seed": seed, "code": code, "found": False, "wall_s": wall_s,
                    "examples": out.getvalue().count("logquake hunt: #")}
        info = json.loads(found[0].read_text())
        if "error" in info:  # a simulated run raised (exit 255): a harness bug, not a finding
            return {"seed": seed, "code": code, "found": False, "wall_s": wall_s, "examples": info["examples"],
                    "error": info["error"], "crash_faults": info["faults"]}
        return {"seed": seed, "code": code, "found": True, "first_failure_s": info["first_failure_s"],
                "search_and_shrink_s": info["search_and_shrink_s"], "examples": info["examples"],
                "first_failure_example": info["first_failure_example"], "wall_s": wall_s,
                "minimal": info["faults"], "replay_verdict": info["replay_verdict"],
                "replay_found": info.get("replay_found")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", action="append", choices=sorted(SWITCHES), help="only this switch (repeatable)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..N per switch (default 5)")
    parser.add_argument("--first-seed", type=int, default=1, help="start the seeds here instead of 1")
    parser.add_argument("--budget", type=float, default=120.0, help="each hunt's wall budget, s (default 120)")
    parser.add_argument("--max-shrinks", type=int, default=None, help="cap the shrink by runs (default: the budget)")
    parser.add_argument("--safe-examples", type=int, default=0,
                        help="per seed, also run the same search on the safe cluster for N runs (default 0: not)")
    args = parser.parse_args(argv)
    print(f"load average at start: {load()}", flush=True)
    from checkers.spark import make_spark
    from harness.hunt import describe_fault as describe
    from logquake.strategies import Fault

    started = time.monotonic()
    make_spark()
    print(f"spark session started in {time.monotonic() - started:.1f} s (untimed below)", flush=True)
    switches = args.switch or list(SWITCHES)
    started = time.monotonic()
    run_hunt([*SWITCHES[switches[0]], "--max-examples", "1"], 1, args.budget, 0)
    print(f"warm-up: one hunt example (simulated and checked) in {time.monotonic() - started:.1f} s (untimed below)",
          flush=True)
    for switch in switches:
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            row = hunt_once(switch, seed, args.budget, args.max_shrinks)
            rows.append(row)
            if row["found"]:
                minimal = "; ".join(describe(Fault.from_json(f)) for f in row["minimal"])
                replay = "invalid" if row["replay_verdict"] is False else row["replay_verdict"]
                if row.get("replay_found"):
                    replay = (f"{'valid' if row['replay_verdict'] is True else replay} showing "
                              + ", ".join(f"{n} ({'allowed' if ok else 'not allowed'})" for n, ok in sorted(row["replay_found"].items())))
                print(f"{switch} seed {seed}: found after {row['first_failure_s']:.1f} s (run {row['first_failure_example']}), "
                      f"found and shrunk in {row['search_and_shrink_s']:.1f} s ({row['examples']} runs), exit {row['code']}, "
                      f"replay {replay}; minimal: {minimal}; load {load()}", flush=True)
            elif "error" in row:
                faults = "; ".join(describe(Fault.from_json(f)) for f in row["crash_faults"])
                print(f"{switch} seed {seed}: HARNESS ERROR at run {row['examples']} (exit {row['code']}): "
                      f"{row['error']}; schedule: {faults}; load {load()}", flush=True)
            else:
                print(f"{switch} seed {seed}: NOT found within {args.budget:g} s ({row['examples']} runs, exit "
                      f"{row['code']}); load {load()}", flush=True)
            if args.safe_examples:
                safe = safe_once(switch, seed, args.budget, args.safe_examples)
                print(f"{switch} seed {seed}, safe cluster: {'FOUND' if safe['found'] else 'nothing found'} in "
                      f"{safe['examples']} runs, {safe['wall_s']:.1f} s, exit {safe['code']}; load {load()}", flush=True)
        found = [r for r in rows if r["found"]]
        if found:
            print(f"{switch}: found {len(found)}/{len(rows)}; median to first failure "
                  f"{statistics.median(r['first_failure_s'] for r in found):.1f} s, median to find and shrink "
                  f"{statistics.median(r['search_and_shrink_s'] for r in found):.1f} s (goal <= 60 s)", flush=True)
        else:
            print(f"{switch}: found 0/{len(rows)}", flush=True)
    print(f"load average at end: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
