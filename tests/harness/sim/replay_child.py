"""One simulated run of a `logquake test --sim` command line, without the check, for the
replay test: `python -m tests.harness.sim.replay_child RESULTS_DIR ARGS...` prints the path
of the history it wrote (and the run's speed on stderr)."""

from __future__ import annotations

import sys

from harness.cli import ArgumentParser
from harness.run import open_run
from harness.sim.run import execute_sim
from harness.testcmd import build_spec, register


def main(results_dir: str, argv: list[str]) -> None:
    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", *argv])
    assert args.sim and args.seed is not None, "the replay child runs a seeded --sim command"
    run = open_run(build_spec(args, args.seed), results_dir)
    try:
        outcome = execute_sim(run, check_history=False)
    finally:
        run.close()
    print(run.run_dir / "history.jsonl")
    print(outcome.message, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
