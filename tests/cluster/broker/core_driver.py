"""Drives the sans-I/O broker core the way a runtime does: encoded requests in (through the
real codec), responses out, on a MemoryDisk with virtual time and a seeded RNG."""

from __future__ import annotations

import io
import random
import struct
from typing import Any

import kio.index
from kio.serial import entity_reader, entity_writer

from cluster.broker.broker import Broker
from cluster.broker.env import ClientInfo, Response
from cluster.config import BrokerConfig
from cluster.protocol.codec import build, decode_request
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.storage.disk import MemoryDisk

DATA_DIR = "/data"


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
        self.properties = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3", **(properties or {})}
        self.seed = seed
        self.broker = self._new_broker()
        self._correlation = 0

    def _new_broker(self) -> Broker:
        config = BrokerConfig.from_properties(0, "127.0.0.10", 9092, DATA_DIR, self.properties)
        broker = Broker(config, self.disk, self.clock, self.scheduler, random.Random(self.seed))
        broker.start()
        return broker

    def restart(self, crash: bool = False) -> None:
        """Clean restart, or with `crash` a power loss (unfsynced bytes dropped)."""
        if crash:
            self.broker._running = False
            self.disk.crash()
        else:
            self.broker.shutdown()
        self.seed += 1
        self.broker = self._new_broker()

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

    def call(self, api_key: int, api_version: int, **fields: Any) -> Any:
        pending = self.send(api_key, api_version, **fields)
        assert pending.done, "expected an immediate answer"
        return pending.body

    @staticmethod
    def request_class(api_key: int, api_version: int, name: str) -> type:
        module = kio.index.load_payload_module(api_key, api_version, kio.index.EntityType.request)
        return getattr(module, name)
