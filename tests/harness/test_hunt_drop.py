"""`drop_needless_faults`, the pass after Hypothesis's shrink: on the cluster whose followers
truncate to their own high watermark (replica.truncate.to.high.watermark), a simulated kill of
every broker 0.4 s into the run for 0.1 s loses acknowledged records (inconsistent-offsets,
seed 1; met by the truncation hunt of tests/harness/test_hunt.py). A schedule that holds that
kill behind a 0.1-s kill of broker 1 (the shape of the local minimum Hypothesis's shrinker stops
at, tests/logquake/test_strategies_quorum.py) is cut to the kill alone; a base fault stays; the
pass runs past --max-shrinks (one run per fault) but not past the wall budget, where every
fault stays. Every run is a real simulated run judged by the real checkers."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from logquake.strategies import Fault

SEED = 1
ARGV = ["hunt", "--nemesis", "kill", "--time-limit", "2", "--final-time-limit", "3", "--quiet-period", "0.5",
        "--rate", "50", "--concurrency", "2", "--max-faults", "2", "--seed", str(SEED), "--no-database",
        "--cluster-config", "replica.truncate.to.high.watermark=true"]
LOSS = Fault("kill", (0, 1, 2), 0.4, 0.1)
NEEDLESS = Fault("kill", (1,), 0.2, 0.1)
LATE = Fault("kill", (0,), 1.9, 0.1)


def _hunt(tmp_path: Path, max_shrinks: int | None = None) -> Any:
    from harness.cli import ArgumentParser
    from harness.hunt import Hunt, register
    from harness.testcmd import build_spec

    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    spec = build_spec(parser.parse_args([*ARGV, "--results-dir", str(tmp_path / "results")]), SEED)
    scratch = tmp_path / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    return Hunt(spec, scratch, deadline_s=float("inf"), max_shrinks=max_shrinks, out=io.StringIO())


def test_a_fault_the_failure_does_not_need_is_dropped_and_a_base_fault_stays(tmp_path: Path) -> None:
    from harness.hunt import drop_needless_faults

    hunt = _hunt(tmp_path)
    assert hunt.fails((NEEDLESS, LOSS))  # the shrunk schedule as Hypothesis might leave it
    assert drop_needless_faults(hunt, (NEEDLESS, LOSS)) == (LOSS,)
    assert hunt.tally.examples == 2  # one run without the first fault; the loss alone is never dropped
    # The same needless fault as a base fault: kept; of the drawn faults, the one after the loss goes.
    assert drop_needless_faults(hunt, (NEEDLESS, LOSS, LATE), base_count=1) == (NEEDLESS, LOSS)
    assert hunt.tally.examples == 3  # one run more: without the loss (it passes); without LATE is the failure cached above

def test_the_pass_runs_past_max_shrinks_but_not_past_the_budget(tmp_path: Path) -> None:
    from harness.hunt import drop_needless_faults

    # --max-shrinks spent (0 here) by Hypothesis's shrink: the pass still tries each fault once.
    hunt = _hunt(tmp_path, max_shrinks=0)
    assert hunt.fails((NEEDLESS, LOSS))
    assert drop_needless_faults(hunt, (NEEDLESS, LOSS)) == (LOSS,)
    assert hunt.tally.examples == 2
    # Past the wall budget: no run, every fault stays.
    hunt = _hunt(tmp_path / "late", max_shrinks=0)
    assert hunt.fails((NEEDLESS, LOSS))
    hunt.deadline_s = 0.0
    assert drop_needless_faults(hunt, (NEEDLESS, LOSS)) == (NEEDLESS, LOSS)
    assert hunt.tally.examples == 1
