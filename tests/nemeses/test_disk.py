"""The disk nemesis: its seeded schedule, and its door into real broker processes (a command
file and SIGUSR1, cluster/runtime/disk_faults.py): a full disk halts a broker as Kafka's
(status 1, the reason recorded) while acks=all clients keep going with nothing lost; a
power loss tears and corrupts the unflushed tails, recovery cuts them on restart."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.control import ClusterControl, ControlError
from cluster.launcher import LocalCluster
from cluster.runtime.disk_faults import HALT_EXIT_STATUS
from nemeses.base import DISK_KINDS, NemesisError, NemesisOptions, build_packages, checked_options
from nemeses.disk import DiskPackage

TOPIC = "disk"
PARTITIONS = 3


class FakeControl:
    broker_ids = [0, 1, 2]


def test_the_schedule_is_seeded_and_a_power_loss_hits_one_broker() -> None:
    package = DiskPackage(FakeControl(), NemesisOptions())  # type: ignore[arg-type]
    first = [op for op, _ in zip(package.schedule(random.Random(4)), range(200))]
    assert first == [op for op, _ in zip(package.schedule(random.Random(4)), range(200))]
    starts = [op["value"] for op in first if op["f"] == "start-disk"]
    assert [op["f"] for op in first[:4]] == ["start-disk", "stop-disk", "start-disk", "stop-disk"]
    assert {v["kind"] for v in starts} == set(DISK_KINDS)
    for value in starts:
        if value["kind"] == "torn-crash":
            assert value["targets"] == "one" and len(value["nodes"]) == 1 and isinstance(value["seed"], int)
        if value["kind"] == "slow-fsync":
            assert 16 <= value["delay_ms"] < 512
    only = DiskPackage(FakeControl(), checked_options({"disk_kinds": "disk-full"}))  # type: ignore[arg-type]
    assert {op["value"]["kind"] for op, _ in zip(only.schedule(random.Random(1)), range(20)) if op["f"] == "start-disk"} == {"disk-full"}
    with pytest.raises(NemesisError, match="unknown disk_kinds value 'meteor'"):
        checked_options({"disk_kinds": "meteor"})
    with pytest.raises(ValueError, match="kind one of"):
        package.start({"kind": "flood"})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("disk-cluster")
    with LocalCluster(3, base_dir=base, seed=17, config={"min.insync.replicas": "2", "offsets.topic.num.partitions": "3",
                                                          "broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300",
                                                          "group.initial.rebalance.delay.ms": "0"}) as running:
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=10)[TOPIC].result(timeout=15)
        control = ClusterControl(running)
        try:
            yield running, control
        finally:
            control.close()


def produce(bootstrap: str, values: list[bytes]) -> list[bytes]:
    """acks=all with idempotence; the values acknowledged."""
    acked: list[bytes] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 60_000,
                         "log_level": 0})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value, partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        producer.poll(0)
    assert producer.flush(90) == 0
    return acked


def read_everything(bootstrap: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 0})
    try:
        consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        out, ends, deadline = [], set(), time.monotonic() + 60
        while len(ends) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == -191:  # _PARTITION_EOF
                    ends.add(message.partition())
                continue
            out.append(message.value())
        assert len(ends) == PARTITIONS, "the consumer did not reach every partition's end"
        return out
    finally:
        consumer.close()


def test_commands_are_answered_and_bad_ones_refused_by_name(cluster) -> None:
    _, control = cluster
    answer = control.set_disk_faults(2, fsync_delay_ms=20)
    assert answer["faults"] == {"fsync_errno": None, "write_errno": None, "fsync_delay_ms": 20}
    cleared = control.clear_disk_faults(2)
    assert cleared is not None and cleared["faults"]["fsync_delay_ms"] == 0
    with pytest.raises(ControlError, match="fsync_errno 'EFOO' is not an errno"):
        control.set_disk_faults(2, fsync_errno="EFOO")
    assert control.is_alive(2)


def test_a_full_disk_halts_the_broker_and_the_heal_restarts_it_with_nothing_acknowledged_lost(cluster) -> None:
    running, control = cluster
    acked = produce(running.bootstrap_servers, [f"a{i}".encode() for i in range(60)])
    package = DiskPackage(control, NemesisOptions())
    started = package.start({"kind": "disk-full", "targets": "one", "nodes": [1]})
    assert started["faulted"] == [{"node": 1, "faults": {"fsync_errno": None, "write_errno": "ENOSPC", "fsync_delay_ms": 0}}]
    acked += produce(running.bootstrap_servers, [f"b{i}".encode() for i in range(60)])  # its next append fails the disk
    deadline = time.monotonic() + 30
    while control.is_alive(1) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not control.is_alive(1)
    assert running.brokers[1].popen.returncode == HALT_EXIT_STATUS
    assert "No space left on device" in control.disk_halt(1)["reason"]
    acked += produce(running.bootstrap_servers, [f"c{i}".encode() for i in range(30)])  # the other two carry on
    healed = package.stop()
    assert healed["healed"][0]["node"] == 1 and "No space left" in healed["healed"][0]["halted"]
    assert control.is_alive(1) and control.disk_halt(1) is None
    read = read_everything(running.bootstrap_servers)
    assert len(acked) == 150 and set(acked) <= set(read), f"lost: {sorted(set(acked) - set(read))[:5]}"
    log_text = Path(control.log_path(1)).read_text()
    assert re.search(r"broker 1 halted: all log directories have failed", log_text)


def test_a_power_loss_tears_the_tails_and_recovery_cuts_them(cluster) -> None:
    running, control = cluster
    acked = produce(running.bootstrap_servers, [f"d{i}".encode() for i in range(60)])
    answer = control.crash_torn(0, seed=3, corrupt=True)
    assert not control.is_alive(0)
    torn = [t for t in answer["torn"] if t["path"].endswith(".log") and f"/{TOPIC}-" in t["path"]]
    assert torn and all(t["unflushed_bytes"] > 0 for t in torn)
    control.start(0)  # at once, before the controller has fenced the old incarnation
    acked += produce(running.bootstrap_servers, [f"e{i}".encode() for i in range(30)])
    read = read_everything(running.bootstrap_servers)
    assert set(acked) <= set(read), f"lost: {sorted(set(acked) - set(read))[:5]}"
    cut = [t for t in torn if t["kept_bytes"] < t["unflushed_bytes"] or t["flipped_at"] is not None]
    if cut:
        assert "recovery truncated" in Path(control.log_path(0)).read_text()


class IsrControl:
    """Just enough of ClusterControl to choose a power loss's target."""

    broker_ids = [0, 1, 2]

    def __init__(self, isrs: dict[str, tuple[int, ...]]) -> None:
        from cluster.control import PartitionStatus, TopicPartition as ControlTp
        self.states = {ControlTp(name, 0): PartitionStatus(ControlTp(name, 0), isr[0], (0, 1, 2), isr) for name, isr in isrs.items()}
        self.crashed: list[int] = []

    def partition_states(self):
        return self.states

    def is_alive(self, broker_id: int) -> bool:
        return True

    def crash_torn(self, broker_id: int, *, seed: int, corrupt: bool) -> dict:
        self.crashed.append(broker_id)
        return {"torn": []}


def test_a_power_loss_never_hits_the_last_in_sync_replica() -> None:
    value = {"kind": "torn-crash", "targets": "one", "nodes": [0], "seed": 1, "corrupt": True}
    safe = IsrControl({"a": (0, 1), "b": (1, 2)})
    assert DiskPackage(safe, NemesisOptions()).start(value)["faulted"][0]["node"] == 0  # type: ignore[arg-type]
    last = IsrControl({"a": (0,), "b": (1, 2)})
    result = DiskPackage(last, NemesisOptions()).start(value)["faulted"][0]  # type: ignore[arg-type]
    assert last.crashed == [1] and result["instead_of"] == 0 and result["because_last_in_sync_of"] == ["a-0"]
    everyone = IsrControl({"a": (0,), "b": (1,), "c": (2,)})
    result = DiskPackage(everyone, NemesisOptions()).start(value)["faulted"][0]  # type: ignore[arg-type]
    assert everyone.crashed == [] and result["skipped"] == "the last in-sync replica of a-0"
