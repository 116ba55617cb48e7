"""The controller as its own process (`python -m cluster.controller.main`), reached over real
TCP: by the blocking WireClient, and by a broker's ControllerClient on an asyncio loop with
AsyncioOutbound. SIGKILL and restart on the same data directory: every decision survives,
and the broker carries on with the same epoch."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from cluster.broker.controller_client import ControllerClient
from cluster.broker.env import Endpoint
from cluster.broker.producer_ids import ProducerIdAllocator
from cluster.config import BrokerConfig
from cluster.controller.core import CONTROLLER_VERSIONS
from cluster.controller.main import EXIT_BAD_ARGUMENTS
from cluster.metadata.records import METADATA_TOPIC, TopicRecord, decode_record
from cluster.protocol.client import WireClient
from cluster.protocol.codec import build, request_class
from cluster.protocol.records import read_records
from cluster.protocol.versions import ApiKey
from cluster.runtime.adapters import AsyncioScheduler, SystemClock
from cluster.runtime.outbound import AsyncioOutbound
from cluster.storage.batch import parse_header, split_batches
from tests.cluster.controller.driver import req

HOST = "127.0.0.9"
BROKER_HOST = "127.0.0.10"
# Generous limits on waiting for a process: only a hang fails them.
START_LIMIT_S = 30.0
WAIT_LIMIT_S = 20.0
SETTINGS = ["broker.session.timeout.ms=4000"]
BROKER_PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "4000", "controller.quorum.request.timeout.ms": "1000"}


class ControllerProcess:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> None:
        ready = self.data_dir / "ready.json"
        if ready.exists():
            ready.unlink()
        command = [sys.executable, "-m", "cluster.controller.main", "--host", HOST, "--port", str(self.port),
                   "--data-dir", str(self.data_dir), "--ready-file", str(ready), "--seed", "5"]
        for setting in SETTINGS:
            command += ["--config", setting]
        self.process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[3], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_LIMIT_S
        while not ready.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"controller exited with {self.process.returncode}: {self.process.stderr.read().decode()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"controller not ready within {START_LIMIT_S} s")
            time.sleep(0.02)
        info = json.loads(ready.read_text())
        assert info["host"] == HOST and info["pid"] == self.process.pid
        self.port = info["port"]

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(WAIT_LIMIT_S)

    def terminate(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(WAIT_LIMIT_S)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT_LIMIT_S)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture
def controller_process(tmp_path: Path) -> Iterator[ControllerProcess]:
    process = ControllerProcess(tmp_path / "controller")
    process.data_dir.mkdir()
    try:
        yield process
    finally:
        process.close()


def metadata_records(port: int) -> list:
    part = req(ApiKey.FETCH, 12, "FetchPartition")
    topic = req(ApiKey.FETCH, 12, "FetchTopic")
    with WireClient(HOST, port) as client:
        body = client.request(ApiKey.FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 24,
                              isolation_level=0, session_id=0, session_epoch=-1,
                              topics=(build(topic, topic=METADATA_TOPIC, partitions=(build(part, partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                                                              last_fetched_epoch=-1, log_start_offset=-1,
                                                                                              partition_max_bytes=1 << 23),)),),
                              forgotten_topics_data=(), rack_id="")
    records = body.responses[0].partitions[0].records or b""
    # Control batches are the quorum's own records (a leader change), not metadata.
    return [decode_record(r.value, f"at offset {r.offset}") for _, batch in split_batches(records) if not parse_header(batch).is_control
            for r in read_records(bytes(batch))]


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT_LIMIT_S} s")
        await asyncio.sleep(0.02)


def test_process_serves_brokers_and_survives_sigkill(controller_process: ControllerProcess) -> None:
    controller_process.start()
    with WireClient(HOST, controller_process.port) as client:
        versions = client.request(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    assert {int(k.api_key): (k.min_version, k.max_version) for k in versions.api_keys} == \
           {int(k): (r.min_version, r.max_version) for k, r in CONTROLLER_VERSIONS.items()}

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        outbound = AsyncioOutbound(loop, BROKER_HOST, "broker-0")
        config = BrokerConfig.from_properties(0, BROKER_HOST, 9092, "/unused", BROKER_PROPERTIES)
        client = ControllerClient(config, SystemClock(), AsyncioScheduler(loop), outbound, Endpoint(1000, HOST, controller_process.port),
                                  lambda image, delta: None, random.Random(0))
        client.start()
        try:
            await wait_for(lambda: client.registered and not client.fenced, "broker registered and unfenced")
            epoch = client.broker_epoch
            topic = req(ApiKey.CREATE_TOPICS, 5, "CreatableTopic")
            body = build(request_class(ApiKey.CREATE_TOPICS, 5), timeout=datetime.timedelta(seconds=5), validate_only=False,
                         topics=(topic(name="durable", num_partitions=2, replication_factor=1, assignments=(), configs=()),))
            answers: list = []
            client.create_topics(body, 5, answers.append)
            await wait_for(lambda: bool(answers), "CreateTopics answered")
            assert answers[0].ok and answers[0].body.topics[0].error_code == ErrorCode.none
            allocator = ProducerIdAllocator(client)
            ids: list = []
            allocator.allocate(lambda pid, error: ids.append((pid, error)))
            await wait_for(lambda: bool(ids), "a producer id")
            assert ids[0][1] is None

            # SIGKILL: nothing was answered before it was fsynced, so nothing is lost.
            await loop.run_in_executor(None, controller_process.kill)
            await loop.run_in_executor(None, controller_process.start)  # same port, same data dir
            assert client.image.topic("durable") is not None
            records = await loop.run_in_executor(None, metadata_records, controller_process.port)
            assert [r.name for r in records if isinstance(r, TopicRecord)] == ["durable"]
            # The broker keeps its epoch and stays usable; its next block is a new one.
            await asyncio.sleep(1.0)
            assert client.broker_epoch == epoch and not client.fenced
            second = ProducerIdAllocator(client)
            more: list = []
            second.allocate(lambda pid, error: more.append((pid, error)))
            await wait_for(lambda: bool(more), "a producer id after the restart")
            assert more[0][1] is None and more[0][0] >= ids[0][0] + 1000
        finally:
            client.stop()
            outbound.close_all()

    asyncio.run(scenario())
    assert controller_process.terminate() == 0
    log_text = (controller_process.data_dir / "controller.log").read_text()
    assert "controller 1000 stopped" in log_text and "created topic durable" in log_text


def test_bad_arguments_exit_254(tmp_path: Path) -> None:
    for arguments in (["--port", "x"], ["--host", HOST, "--port", "0", "--data-dir", str(tmp_path), "--config", "nonsense"],
                      ["--host", HOST, "--port", "0", "--data-dir", str(tmp_path), "--config", "broker.session.timeout.ms=soon"]):
        done = subprocess.run([sys.executable, "-m", "cluster.controller.main", *arguments], cwd=Path(__file__).resolve().parents[3],
                              capture_output=True, timeout=WAIT_LIMIT_S)
        assert done.returncode == EXIT_BAD_ARGUMENTS, (arguments, done.stderr)
        assert done.stderr.decode().startswith("controller: ")
    assert not os.path.exists(tmp_path / "__cluster_metadata-0")
