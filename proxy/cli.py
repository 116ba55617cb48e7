"""`logquake proxy`: serve Toxiproxy's HTTP API and its proxies until SIGINT or SIGTERM.

Toxiproxy's clients (toxiproxy-python, toxiproxy-cli, testcontainers) then create proxies and
toxics on it. On exit every proxy's listener and every connection is closed.
Exit codes: 0 after a signal, 254 for bad options or an address it cannot listen on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from typing import Any

from proxy.server import DEFAULT_API_HOST, DEFAULT_API_PORT, ProxyServerError, RunningApi, new_seed, serve

EXIT_OK = 0
EXIT_BAD_ARGUMENTS = 254
_DESCRIPTION = ("serve Toxiproxy's HTTP API (proxies with latency, bandwidth, slow_close, timeout, reset_peer, slicer "
                "and limit_data toxics) until SIGINT or SIGTERM")


def _port(text: str) -> int:
    try:
        port = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must lie in [0, 65535], got {port}")
    return port


def _seed(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer seed: {text!r}") from None


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_API_HOST, help=f"address the API listens on (default {DEFAULT_API_HOST})")
    parser.add_argument("--port", type=_port, default=DEFAULT_API_PORT,
                        help=f"API port (default {DEFAULT_API_PORT}, Toxiproxy's; 0 picks a free one)")
    parser.add_argument("--seed", type=_seed, help="seed of the toxics' randomness (toxicity, jitter, slicer); default random, printed")
    parser.add_argument("--config", metavar="FILE", help="JSON list of proxies to create at start, as POST /populate takes")
    parser.set_defaults(handler=_run)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("proxy", help="run a Toxiproxy-compatible TCP proxy server", description=_DESCRIPTION)
    _add_arguments(parser)


def _load_config(path: str) -> list[Any]:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except OSError as error:
        raise ProxyServerError(f"cannot read --config {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ProxyServerError(f"--config {path} is not JSON: {error}") from None
    if not isinstance(value, list):
        raise ProxyServerError(f"--config {path} must hold a JSON list of proxies")
    return value


def _run(args: argparse.Namespace) -> int:
    # Every change of a proxy or toxic is logged, so a run's faults can be read back afterwards.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    logger = logging.getLogger("proxy")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    seed = new_seed() if args.seed is None else args.seed
    try:
        populate = _load_config(args.config) if args.config else None
        asyncio.run(_serve_until_signal(args.host, args.port, seed, populate))
    except ProxyServerError as error:
        print(f"logquake proxy: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    print("logquake proxy: stopped, every listener and connection closed", flush=True)
    return EXIT_OK


async def _serve_until_signal(host: str, port: int, seed: int, populate: list[Any] | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    def ready(running: RunningApi) -> None:
        proxies = len(running.registry.proxies)
        print(f"logquake proxy: Toxiproxy API on http://{running.host}:{running.port} (seed {seed}, {proxies} proxies); "
              f"SIGINT or SIGTERM stops it", flush=True)

    await serve(host, port, seed, stop, populate, ready)


class _ArgumentParser(argparse.ArgumentParser):
    """Exit 254 on bad options, as every logquake command does (2 means 'unknown' there)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_ARGUMENTS)


def main(argv: list[str] | None = None) -> int:
    """`python -m proxy`: the same as `logquake proxy`."""
    parser = _ArgumentParser(prog="logquake proxy", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    return int(args.handler(args))
