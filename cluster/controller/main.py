"""The controller process: `python -m cluster.controller.main --node-id 1000 --host 127.0.0.9
--port 9093 --data-dir D [--config k=v ...] [--ready-file F] [--log-file F] [--seed N]`.

It is a node of the metadata quorum (cluster/quorum/raft.py): with `--config
controller.quorum.voters=ID@HOST:PORT,...` naming several voters it replicates the metadata
log with the others; alone it is a quorum of one. It decides only while it leads, and
journals what it saw for the checks after a run (quorum_journal.py). It listens and writes
the ready file (JSON host, port, pid) once it serves.
SIGTERM and SIGINT close it cleanly; SIGKILL loses nothing, because every decision is
fsynced before it is acted on. Committed metadata it cannot apply halts it at once with
status 3 (runtime/controller_halt.py), as Kafka's controller halts on a replay error.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and "hypothesis" not in sys.modules:
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # see broker_main: kio's optional import

import argparse
import asyncio
import dataclasses
import logging
import os
import random
import signal

from cluster.config import parse_assignments
from cluster.controller.config import ControllerConfig
from cluster.controller.core import Controller
from cluster.controller.quorum_journal import JournalFile
from cluster.controller.quorum_node import quorum_versions, raft_factory
from cluster.runtime import controller_halt
from cluster.runtime.adapters import AsyncioScheduler, SystemClock
from cluster.runtime.broker_main import _setup_logging, _write_ready_file
from cluster.runtime.connection import BrokerConnection
from cluster.runtime.outbound import AsyncioOutbound
from cluster.storage.disk import OsDisk

log = logging.getLogger("cluster.controller.main")
EXIT_BAD_ARGUMENTS = 254
# A dedicated controller's node id, clear of the brokers' ids.
DEFAULT_NODE_ID = 1000


class BadArguments(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse would exit 2; the project's convention for bad arguments is 254.
        raise BadArguments(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="controller", description="Run the logquake cluster's controller process.")
    parser.add_argument("--node-id", type=int, default=DEFAULT_NODE_ID, help=f"default {DEFAULT_NODE_ID}")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port (see --ready-file)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--log-file")
    parser.add_argument("--ready-file")
    parser.add_argument("--seed", type=int)
    return parser.parse_args(argv)


async def serve(config: ControllerConfig, seed: int, ready_file: str | None) -> None:
    loop = asyncio.get_running_loop()
    controller: Controller | None = None
    server = await loop.create_server(lambda: BrokerConnection(controller), config.host, config.port, reuse_address=True, start_serving=False)
    config = dataclasses.replace(config, port=server.sockets[0].getsockname()[1])
    disk = OsDisk()
    clock, scheduler, rng = SystemClock(), AsyncioScheduler(loop), random.Random(seed)
    # Every controller process is a voter of the Raft quorum (alone: a majority of one), and
    # journals what it saw for the checks after a run.
    outbound = AsyncioOutbound(loop, config.host, f"controller-{config.node_id}")
    journal = JournalFile(config.data_dir, config.node_id)
    factory = raft_factory(config, disk, clock, scheduler, random.Random(rng.getrandbits(64)), outbound,
                           lambda t: journal.role(t.epoch, t.role, t.leader_id))
    controller = Controller(config, disk, clock, scheduler, rng, factory, quorum_versions())
    controller.on_committed = journal.commit
    controller.on_fatal = controller_halt.halt  # committed metadata it cannot apply: exit at once
    controller.start()
    await server.start_serving()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("controller %d listening on %s:%d (data dir %s, seed %d)", config.node_id, config.host, config.port, config.data_dir, seed)
    if ready_file:
        _write_ready_file(ready_file, config.host, config.port)
    await stop.wait()
    server.close()
    controller.shutdown()
    outbound.close_all()
    journal.close()
    disk.close()
    log.info("controller %d stopped", config.node_id)




def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except BadArguments as error:
        print(f"controller: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    try:
        config = ControllerConfig.from_properties(args.node_id, args.host, args.port, args.data_dir, parse_assignments(args.config))
    except ValueError as error:
        print(f"controller: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    os.makedirs(args.data_dir, exist_ok=True)
    _setup_logging(args.log_file or os.path.join(args.data_dir, "controller.log"))
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(8), "big")
    try:
        asyncio.run(serve(config, seed, args.ready_file))
    except Exception:
        log.exception("controller %d failed", args.node_id)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
