"""The `logquake` command line.

Each subcommand lives in its own module exposing `register(subparsers)`; the module's
handler returns the process exit code. Exit codes follow Jepsen: 0 valid, 1 invalid,
2 unknown, 254 bad arguments, 255 harness error.
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import importlib
import signal
import sys
from typing import Sequence

EXIT_BAD_ARGUMENTS = 254
EXIT_HARNESS_ERROR = 255

# Modules that contribute subcommands, in the order `--help` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = ("cluster.cli", "harness.testcmd", "harness.hunt", "harness.analyze", "harness.report.cli",
                                        "harness.serve",
                                        "harness.suite", "proxy.cli")
SUBCOMMAND_MODULES += ("harness.image",)  # `logquake image build`: the Docker back end's node image


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits 2 on bad input, which we reserve for 'unknown'; use 254 instead."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_ARGUMENTS)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="logquake", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 PID` prints every thread's stack to stderr and the run goes on: how a user
    (or a test that timed out) sees where a run that stopped making progress is waiting."""
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass  # stderr is not a file (an embedding that captured it): nowhere to print stacks


def main(argv: Sequence[str] | None = None) -> int:
    dump_stacks_on_sigusr1()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        print("logquake: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
