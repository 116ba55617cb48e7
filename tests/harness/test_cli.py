"""The `logquake` entry point: subcommand discovery and Jepsen's exit codes for bad input."""

import subprocess
import sys

import pytest

from harness import cli


def test_unknown_subcommand_exits_254(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == cli.EXIT_BAD_ARGUMENTS
    assert "invalid choice" in capsys.readouterr().err


def test_missing_subcommand_exits_254(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == cli.EXIT_BAD_ARGUMENTS


def test_every_registered_module_contributes_a_subcommand():
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert len(subparsers.choices) >= len(cli.SUBCOMMAND_MODULES)


def test_console_script_help_runs():
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "logquake" in out.stdout
