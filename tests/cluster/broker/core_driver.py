"""Drives the sans-I/O broker core the way a runtime does: encoded requests in (through the
real codec), responses out, on a MemoryDisk with virtual time and a seeded RNG.

The broker runs in combined mode, as `broker_main` does without controller.quorum.voters:
the controller core lives in the same "process" (same disk, data under DATA_DIR/controller,
same host on its own port), and the broker reaches it over the virtual network with real
frames. A restart restarts both, as it restarts the process.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from typing import Any

import kio.index
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from cluster.broker.broker import Broker
from cluster.broker.env import ClientInfo, Endpoint, Response
from cluster.config import BrokerConfig
from cluster.controller.config import ControllerConfig
from cluster.controller.core import Controller
from cluster.controller.quorum_node import quorum_versions, raft_factory
from cluster.protocol.codec import build, decode_request
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.sim.network import NodeScheduler, SimNode, VirtualNetwork, VirtualOutbound
from cluster.storage.disk import MemoryDisk

DATA_DIR = "/data"
HOST = "127.0.0.10"
PORT = 9092
CONTROLLER_PORT = 9093
BROKER_ID = 0
# Combined mode: the controller shares the broker's node id, as in KRaft's combined mode.
CONTROLLER_ENDPOINT = Endpoint(BROKER_ID, HOST, CONTROLLER_PORT)
# Fast heartbeats and short sessions, so a restarted broker re-registers in little virtual
# time; the session outlasts the controller's 500 ms metadata long poll, which a heartbeat on
# the same connection waits behind.
DRIVER_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "1",
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "1500",
}
STARTUP_LIMIT_MS = 10_000
STEP_MS = 1


class Pending:
    """The answer to one request, which may arrive later (long poll, rebalance)."""

    def __init__(self, api_key: int, api_version: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.response: Response | None = None

    @property
    def done(self) -> bool:
        return self.response is not None

    def __call__(self, response: Response) -> None:
        assert self.response is None, "answered twice"
        self.response = response

    @property
    def body(self) -> Any:
        assert self.response is not None, "no answer yet"
        assert self.response.chunks is not None, "request was answered with no response"
        frame = b"".join(bytes(c) for c in self.response.chunks)
        (size,) = struct.unpack_from(">i", frame, 0)
        assert size == len(frame) - 4
        schema = kio.index.load_response_schema(self.api_key, self.api_version)
        _, used = entity_reader(schema.__header_schema__)(frame, 4)
        body, body_size = entity_reader(schema)(frame, 4 + used)
        assert 4 + used + body_size == len(frame)
        return body


class CoreDriver:
    def __init__(self, properties: dict[str, str] | None = None, seed: int = 1) -> None:
        self.disk = MemoryDisk()
        self.clock = VirtualClock()
        self.scheduler = VirtualScheduler(self.clock)
        # Zero latency: the broker-controller hop adds no virtual time, so tests that count
        # milliseconds see only the broker's own timers.
        self.network = VirtualNetwork(self.scheduler, random.Random(seed), min_latency_ms=0.0, max_latency_ms=0.0)
        self.properties = {**DRIVER_DEFAULTS, **(properties or {})}
        self.seed = seed
        self.controller: Controller | None = None
        self._node_scheduler: NodeScheduler | None = None
        self._outbound: VirtualOutbound | None = None
        self.network.add_node(SimNode(CONTROLLER_ENDPOINT, self._controller_handle, {**quorum_versions(), **Controller.versions}))
        self.broker = self._start()
        self._correlation = 0

    def _controller_handle(self, request: Any, client: Any, reply: Any) -> None:
        assert self.controller is not None, "request delivered to a stopped controller"
        self.controller.handle(request, client, reply)

    def _start(self, wait: bool = True) -> Broker:
        self.network.revive(HOST)
        self._node_scheduler = NodeScheduler(self.scheduler, self.network, HOST)
        self._outbound = self.network.outbound_for(HOST)
        rng = random.Random(self.seed)
        controller_config = ControllerConfig.from_properties(BROKER_ID, HOST, CONTROLLER_PORT, f"{DATA_DIR}/controller", self.properties)
        # The combined controller is the only voter of its metadata quorum (its own draws come
        # from a seed of their own, so the broker's and the controller's stay as they were).
        factory = raft_factory(controller_config, self.disk, self.clock, self._node_scheduler, random.Random(self.seed ^ 0x5AF7), self._outbound)
        self.controller = Controller(controller_config, self.disk, self.clock, self._node_scheduler, random.Random(rng.getrandbits(64)),
                                     factory, quorum_versions())
        self.controller.start()
        config = BrokerConfig.from_properties(BROKER_ID, HOST, PORT, DATA_DIR, self.properties)
        broker = Broker(config, self.disk, self.clock, self._node_scheduler, random.Random(rng.getrandbits(64)), self._outbound,
                        CONTROLLER_ENDPOINT)
        broker.start()
        self.broker = broker
        if wait:
            self.run_until(lambda: broker.ready, STARTUP_LIMIT_MS, "the broker registered and unfenced")
        return broker

    def restart(self, crash: bool = False, wait: bool = True) -> None:
        """Restart the process: clean, or with `crash` a power loss (timers die, connections
        reset, unfsynced bytes dropped); with `wait`, until the broker is registered and
        unfenced."""
        assert self._node_scheduler is not None and self._outbound is not None and self.controller is not None
        if crash:
            self._node_scheduler.halt()
            self._outbound.dead = True
            self.network.crash(HOST)
            self.disk.crash()
        else:
            self.broker.shutdown()
            self.controller.shutdown()
            self._node_scheduler.halt()
            self._outbound.dead = True
            self.network.crash(HOST)
        self.controller = None
        self.seed += 1
        self._start(wait)

    def run_until(self, predicate: Callable[[], bool], limit_ms: float, what: str) -> None:
        waited = 0.0
        while not predicate():
            if waited >= limit_ms:
                raise AssertionError(f"{what}: not reached within {limit_ms:.0f} virtual ms")
            self.scheduler.advance(STEP_MS)
            waited += STEP_MS

    def send(self, api_key: int, api_version: int, client_id: str = "tester", **fields: Any) -> Pending:
        schema = kio.index.load_request_schema(api_key, api_version)
        self._correlation += 1
        buffer = io.BytesIO()
        header = schema.__header_schema__(request_api_key=api_key, request_api_version=api_version, correlation_id=self._correlation, client_id=client_id)
        entity_writer(schema.__header_schema__)(buffer, header)
        entity_writer(schema)(buffer, build(schema, **fields))
        request = decode_request(buffer.getvalue())
        pending = Pending(api_key, api_version)
        self.broker.handle(request, ClientInfo(client_id, "/127.0.0.1"), pending)
        return pending

    def call(self, api_key: int, api_version: int, wait_ms: float = 10_000, **fields: Any) -> Any:
        """Send and run virtual time until answered (requests forwarded to the controller and
        commits waiting for replication answer later)."""
        pending = self.send(api_key, api_version, **fields)
        self.run_until(lambda: pending.done, wait_ms, f"an answer to API {api_key} v{api_version}")
        return pending.body

    def find_coordinator(self, group_id: str) -> Any:
        return self.call(ApiKey.FIND_COORDINATOR, 3, key=group_id, key_type=0)

    def await_coordinator(self, *group_ids: str) -> None:
        """What a client does before its first group request: FindCoordinator (the first one
        creates __consumer_offsets) until this broker coordinates each group."""
        for group_id in group_ids or ("g",):
            self.run_until(lambda: self.find_coordinator(group_id).error_code is ErrorCode.none, 10_000, f"a coordinator for {group_id}")
            self.run_until(lambda: self.broker.coordinates(group_id), 10_000, f"group {group_id} loaded")

    @staticmethod
    def request_class(api_key: int, api_version: int, name: str) -> type:
        module = kio.index.load_payload_module(api_key, api_version, kio.index.EntityType.request)
        return getattr(module, name)
