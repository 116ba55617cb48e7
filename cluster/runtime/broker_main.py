"""The broker process: `python -m cluster.runtime.broker_main --broker-id 0 --host 127.0.0.10
--port 9092 --data-dir D [--config k=v ...]`.

Listens, registers with the controller named by controller.quorum.voters, follows the
metadata log (opening and recovering its partitions as the metadata names them), and writes
a ready file (JSON with host, port, pid) once the controller has unfenced it, so a launcher
can use `--port 0` and knows the broker is usable. Without controller.quorum.voters the
process runs its own controller too (KRaft's combined mode), on a second port of the same
address, with its metadata log under DATA_DIR/controller.

SIGTERM and SIGINT shut down cleanly: a controlled shutdown first (the controller moves
this broker's leaderships away; bounded by CONTROLLED_SHUTDOWN_TIMEOUT_S), then stop
listening, flush and close every log, exit 0.
"""

from __future__ import annotations

import sys

# kio registers Hypothesis strategies for its types whenever Hypothesis is importable (it is,
# as a test dependency); the broker process never uses them, and the import costs about half
# a second of every broker start. Marking it absent makes kio skip it; only in the broker
# process itself, never in a process that merely imports this module.
if __name__ == "__main__" and "hypothesis" not in sys.modules:
    sys.modules["hypothesis"] = None  # type: ignore[assignment]

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import random
import signal
import uuid

from cluster.broker.broker import Broker
from cluster.broker.env import Endpoint
from cluster.config import BrokerConfig, parse_assignments
from cluster.runtime import controller_halt
from cluster.runtime.adapters import AsyncioScheduler, SystemClock
from cluster.runtime.connection import BrokerConnection
from cluster.runtime.disk_faults import DiskFaultCommands, sleep_ms
from cluster.runtime.outbound import AsyncioOutbound
from cluster.runtime.request_trace import install_from_env as install_request_trace
from cluster.storage.disk import OsDisk
from cluster.storage.faulty_disk import FaultyDisk

log = logging.getLogger("cluster.runtime.broker_main")
EXIT_BAD_ARGUMENTS = 254
CONTROLLED_SHUTDOWN_TIMEOUT_S = 10.0
READY_POLL_S = 0.02


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="broker_main", description="Run one logquake broker process.")
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--host", required=True, help="address to bind and advertise, e.g. 127.0.0.10")
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port (see --ready-file)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="broker property (repeatable)")
    parser.add_argument("--log-file", help="default: DATA_DIR/broker.log")
    parser.add_argument("--ready-file", help="written (JSON host/port/pid) once the controller has unfenced the broker")
    parser.add_argument("--listening-file", help="written (JSON host/port/pid) as soon as the broker accepts connections")
    parser.add_argument("--seed", type=int, help="seed of the broker's RNG (topic ids, member ids, fault draws)")
    return parser.parse_args(argv)


def _setup_logging(path: str) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _write_ready_file(path: str, host: str, port: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"host": host, "port": port, "pid": os.getpid()}, f)
    os.replace(tmp, path)


async def _combined_controller(config: BrokerConfig, loop: asyncio.AbstractEventLoop, seed: int) -> tuple[object, object, Endpoint]:
    """Combined mode: the controller core in this process, on its own port."""
    from cluster.controller.config import ControllerConfig
    from cluster.controller.core import Controller
    from cluster.controller.quorum_node import quorum_versions, raft_factory

    controller: Controller | None = None
    server = await loop.create_server(lambda: BrokerConnection(controller), config.host, 0, reuse_address=True, start_serving=False)
    port = server.sockets[0].getsockname()[1]
    controller_config = ControllerConfig.from_properties(config.broker_id, config.host, port, os.path.join(config.data_dir, "controller"),
                                                         dict(config.properties))
    disk, clock, scheduler, rng = OsDisk(), SystemClock(), AsyncioScheduler(loop), random.Random(seed ^ 0x5EED)
    # The only voter of its own metadata quorum (a majority of one: it sends nothing to peers).
    outbound = AsyncioOutbound(loop, config.host, f"controller-{config.broker_id}")
    factory = raft_factory(controller_config, disk, clock, scheduler, random.Random(rng.getrandbits(64)), outbound)
    controller = Controller(controller_config, disk, clock, scheduler, rng, factory, quorum_versions())
    controller.on_fatal = controller_halt.halt  # committed metadata it cannot apply: the whole process exits
    controller.start()
    await server.start_serving()
    log.info("combined mode: controller %d on %s:%d", config.broker_id, config.host, port)
    return controller, server, Endpoint(config.broker_id, config.host, port)


async def serve(config: BrokerConfig, seed: int, ready_file: str | None, listening_file: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    broker: Broker | None = None
    # Bind first (not yet serving) so that with --port 0 the broker advertises the real port.
    server = await loop.create_server(lambda: BrokerConnection(broker), config.host, config.port, reuse_address=True, start_serving=False)  # type: ignore[arg-type]
    config = dataclasses.replace(config, port=server.sockets[0].getsockname()[1])
    controller = controller_server = None
    controller_endpoint = None
    if config.controller_endpoint() is None:
        controller, controller_server, controller_endpoint = await _combined_controller(config, loop, seed)
    os_disk = OsDisk(lose_unflushed_on_crash=config.log_crash_lose_unflushed)
    # Healthy until a disk-fault command (runtime/disk_faults.py) arrives with SIGUSR1.
    disk = FaultyDisk(os_disk, stall=sleep_ms)
    disk_faults = DiskFaultCommands(disk, config.data_dir)
    outbound = AsyncioOutbound(loop, config.host, f"broker-{config.broker_id}", config.inter_broker_address_overrides)
    broker = Broker(config, disk, SystemClock(), AsyncioScheduler(loop), random.Random(seed), outbound, controller_endpoint)
    # A process start is a new incarnation even when --seed repeats (a restarted broker gets the
    # same seed): with the seeded draw the controller took a restart within the session
    # timeout for a retry of the old registration, never fenced the old incarnation, and the
    # restarted broker led its old epochs again with whatever its log recovery had kept.
    # Kafka draws Uuid.randomUuid() at every start.
    broker.controller_client.incarnation_id = uuid.uuid4()
    broker.on_halt = disk_faults.halt  # its only log directory failed: exit at once, as Kafka's Exit.halt
    loop.add_signal_handler(signal.SIGUSR1, disk_faults.apply_pending)
    broker.start()
    await server.start_serving()
    port = config.port
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("broker %d listening on %s:%d (data dir %s, seed %d)", config.broker_id, config.host, port, config.data_dir, seed)
    if listening_file:
        # Up, though perhaps not yet registered: a broker restarted while a partition cuts it
        # off from the controller stays here until the network heals.
        _write_ready_file(listening_file, config.host, port)
    while not broker.ready and not stop.is_set():
        await asyncio.sleep(READY_POLL_S)
    if ready_file and not stop.is_set():
        log.info("broker %d is registered and unfenced: ready", config.broker_id)
        _write_ready_file(ready_file, config.host, port)
    await stop.wait()
    log.info("broker %d: shutdown requested", config.broker_id)
    if broker.controller_client.registered:
        moved = asyncio.Event()
        broker.begin_controlled_shutdown(moved.set)
        try:
            await asyncio.wait_for(moved.wait(), CONTROLLED_SHUTDOWN_TIMEOUT_S)
            log.info("broker %d: controlled shutdown done: leadership moved away", config.broker_id)
        except asyncio.TimeoutError:
            log.warning("broker %d: controlled shutdown not confirmed within %.0f s; stopping anyway", config.broker_id, CONTROLLED_SHUTDOWN_TIMEOUT_S)
    server.close()
    broker.shutdown()
    outbound.close_all()
    if controller is not None:
        controller_server.close()  # type: ignore[attr-defined]
        controller.shutdown()  # type: ignore[attr-defined]
    os_disk.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        props = parse_assignments(args.config)
        config = BrokerConfig.from_properties(args.broker_id, args.host, args.port, args.data_dir, props)
    except ValueError as error:
        print(f"broker_main: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    os.makedirs(args.data_dir, exist_ok=True)
    _setup_logging(args.log_file or os.path.join(args.data_dir, "broker.log"))
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(8), "big")
    trace = install_request_trace(args.broker_id)  # only with LOGQUAKE_REQUEST_TRACE_DIR set
    try:
        asyncio.run(serve(config, seed, args.ready_file, args.listening_file))
    except Exception:
        log.exception("broker %d failed", args.broker_id)
        return 1
    finally:
        if trace is not None:
            trace.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
