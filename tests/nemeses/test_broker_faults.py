"""The nemesis packages against real bundled brokers (cluster.launcher.LocalCluster).

"A partitioned leader loses leadership" needs replication (the next issue): LocalCluster
runs one broker until then, so partitions are shown on echo servers (test_mechanisms)."""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.control import BrokerClocks, ClusterControl, TopicPartition
from cluster.launcher import LocalCluster
from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.protocol.versions import ApiKey
from nemeses.base import NemesisOptions
from nemeses.clock import ClockPackage
from nemeses.kill import KillPackage
from nemeses.pause import PausePackage
from tests.nemeses.sandboxed import run_scenario

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "3",
}
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \w+ \S+: (.*)$")


@pytest.fixture
def cluster_control(tmp_path):
    clocks = BrokerClocks(tmp_path / "clocks")
    cluster = LocalCluster(1, base_dir=tmp_path / "cluster", config=BROKER_CONFIG, extra_env=clocks.extra_env)
    control = None
    try:
        cluster.__enter__()
        control = ClusterControl(cluster, clocks)
        yield control
    finally:
        cluster.close()
        if control is not None:
            control.close()


def api_versions(control: ClusterControl, timeout_s: float = 1.0) -> int:
    with WireClient(control.host(0), control.port(0), timeout_s=timeout_s) as client:
        return client.request(ApiKey.API_VERSIONS, 3, client_software_name="nemesis-test",
                              client_software_version="0").error_code.value


def create_topic(control: ClusterControl, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": control.address(0)})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)[name].result(timeout=15)


def log_lines(control: ClusterControl) -> list[tuple[float, str]]:
    """(wall time the broker stamped, message) of every line of its log."""
    lines = []
    for line in Path(control.log_path(0)).read_text().splitlines():
        match = LOG_LINE.match(line)
        if match:
            stamp = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) + int(match.group(2)) / 1000
            lines.append((stamp, match.group(3)))
    return lines


def stamped(control: ClusterControl, needle: str) -> float:
    found = [stamp for stamp, message in log_lines(control) if needle in message]
    assert found, f"{needle!r} not in the broker log"
    # (Topics are created by the controller; the broker logs taking leadership of each
    # partition, stamped with its own wall clock.)
    return found[-1]


def commit_record_time(control: ClusterControl, group: str) -> float:
    """Wall time (s) the broker stamped on the newest __consumer_offsets record of `group`."""
    reader = Consumer({"bootstrap.servers": control.address(0), "group.id": "nemesis-test-reader",
                       "enable.auto.commit": False})
    try:
        partitions = int(BROKER_CONFIG["offsets.topic.num.partitions"])
        reader.assign([KafkaTopicPartition("__consumer_offsets", p, 0) for p in range(partitions)])
        stamps = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                if stamps:
                    break
                continue
            # Every record of a group lands in one partition, in order; the newest is the commit.
            if message.error() is None and group.encode() in (message.key() or b""):
                stamps.append(message.timestamp()[1] / 1000)
        assert stamps, f"no offset commit of group {group} in __consumer_offsets"
        return stamps[-1]
    finally:
        reader.close()


def test_paused_broker_stops_answering_and_resumes(cluster_control):
    control = cluster_control
    package = PausePackage(control, NemesisOptions())
    assert api_versions(control) == 0
    package.invoke("start-pause", {"targets": "one", "nodes": [0]})
    assert control.is_paused(0)
    with pytest.raises((TimeoutError, socket.timeout)):
        api_versions(control, timeout_s=1.0)
    answers: list[int] = []
    waiting = threading.Thread(target=lambda: answers.append(api_versions(control, timeout_s=30.0)))
    waiting.start()
    time.sleep(0.5)
    assert answers == []  # the request sits in the paused broker's socket
    package.invoke("stop-pause", None)
    waiting.join(timeout=30)
    assert answers == [0]
    assert not control.is_paused(0)
    producer = Producer({"bootstrap.servers": control.address(0)})
    delivered = []
    producer.produce("after-pause", value=b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert delivered == [None]


def test_clock_bump_moves_the_broker_wall_clock_not_its_timers(cluster_control):
    control = cluster_control
    package = ClockPackage(control, NemesisOptions())
    create_topic(control, "before")
    assert abs(stamped(control, "before-0: leader in epoch") - time.time()) < 5

    consumer = Consumer({"bootstrap.servers": control.address(0), "group.id": "skew-probe-group", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["before"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        package.invoke("start-clock", {"kind": "bump", "targets": "one", "nodes": [0], "delta_ms": 3_600_000})
        create_topic(control, "skewed")
        assert 3590 < stamped(control, "skewed-0: leader in epoch") - time.time() < 3610
        # Heartbeats keep flowing for longer than the session timeout: a session judged by
        # wall time would have expired an hour ago; judged by monotonic time it is fine.
        until = time.monotonic() + 8
        while time.monotonic() < until:
            consumer.poll(0.2)
        assert consumer.assignment()
        expired = [m for _, m in log_lines(control) if "session expired" in m or "did not rejoin" in m]
        assert expired == []
        assert api_versions(control) == 0
        # Over the protocol too: a commit is stored as a record stamped with the broker's time.
        consumer.commit(offsets=[KafkaTopicPartition("before", 0, 0)], asynchronous=False)
        assert 3590 < commit_record_time(control, "skew-probe-group") - time.time() < 3610
    finally:
        consumer.close()
    package.invoke("stop-clock", None)
    create_topic(control, "after")
    assert abs(stamped(control, "after-0: leader in epoch") - time.time()) < 5


def test_kill_restarts_and_primaries_come_from_metadata(cluster_control):
    control = cluster_control
    create_topic(control, "led", partitions=2)
    assert {tp: leader for tp, leader in control.leaders(["led"]).items()} == \
        {TopicPartition("led", 0): 0, TopicPartition("led", 1): 0}
    # An internal topic's leaders are never "primaries": make __consumer_offsets exist (it is
    # created on the first coordinator lookup, as in Kafka).
    admin = AdminClient({"bootstrap.servers": control.address(0)})
    deadline = time.monotonic() + 15
    while not any(tp.topic == "__consumer_offsets" for tp in control.leaders()) and time.monotonic() < deadline:
        try:
            admin.describe_consumer_groups(["primaries-probe"], request_timeout=2)["primaries-probe"].result(timeout=5)
        except Exception:  # noqa: BLE001 - COORDINATOR_NOT_AVAILABLE until the topic exists
            pass
        time.sleep(0.2)
    assert any(tp.topic == "__consumer_offsets" for tp in control.leaders())
    package = KillPackage(control, NemesisOptions())  # primaries: leaders of every non-internal topic
    pid_before = control.pid(0)
    done = package.invoke("start-kill", {"targets": "primaries", "nodes": None})
    assert done["nodes"] == [0] and done["leaders"] == {"led-0": 0, "led-1": 0}
    assert done["killed"] == [{"node": 0, "pid": pid_before}]
    assert not control.is_alive(0)
    with pytest.raises((ConnectionRefusedError, ProtocolClientError)):
        api_versions(control)
    # With every broker down the leaders cannot be read: the completion says so.
    nothing = package.invoke("start-kill", {"targets": "primaries", "nodes": None})
    assert nothing["nodes"] == [] and "no broker answered" in nothing["error"]
    again = package.invoke("start-kill", {"targets": "one", "nodes": [0]})
    assert again["killed"] == [{"node": 0, "not_running": True}]
    started = package.invoke("stop-kill", None)
    assert started["started"][0]["node"] == 0 and started["started"][0]["pid"] != pid_before
    assert api_versions(control) == 0
    # The restarted broker is ready once unfenced, and the same metadata batch re-elects it.
    assert control.leaders(["led"]) == {TopicPartition("led", 0): 0, TopicPartition("led", 1): 0}


def test_a_broker_restarted_from_a_short_lived_thread_outlives_it(cluster_control):
    control = cluster_control
    # The harness performs faults on worker threads that end with their phase; the
    # launcher's PR_SET_PDEATHSIG fires when the forking thread exits.
    worker = threading.Thread(target=lambda: (control.kill(0), control.start(0)))
    worker.start()
    worker.join()
    time.sleep(0.5)
    assert control.is_alive(0)
    assert api_versions(control) == 0


def test_a_real_broker_and_its_clients_share_the_private_namespace():
    observed = run_scenario("broker")
    assert observed == {"inside": True, "delivered": [True], "before": "0", "cut": "TimeoutError", "healed": "0"}


def test_a_partitioned_leader_loses_leadership_and_rejoins_after_heal():
    observed = run_scenario("partitioned_leader")
    assert observed["inside"] is True
    before, after = observed["before"], observed["after"]
    assert before in (0, 1, 2), f"no leader before the partition: {observed}"
    assert observed["started"]["cut-from-controller"] == [before], observed["started"]
    assert after in (0, 1, 2) and after != before, f"the isolated leader {before} kept leadership: {observed}"
    assert observed["isr_after_heal"] == [0, 1, 2], f"the old leader did not rejoin the ISR after heal: {observed}"


def test_the_primary_topology_isolates_the_busiest_leader_and_the_majority_takes_over():
    observed = run_scenario("busiest_leader_isolated")
    assert observed["inside"] is True
    before = {int(p): leader for p, leader in observed["before"].items()}
    counts = {b: list(before.values()).count(b) for b in set(before.values())}
    busiest = min(counts, key=lambda b: (-counts[b], b))
    assert len(before) == 5 and observed["started"]["isolated"] == busiest, observed
    assert observed["started"]["cut-from-controller"] == [busiest], observed
    after = {int(p): leader for p, leader in observed["after"].items()}
    assert len(after) == 5 and busiest not in after.values(), f"the isolated broker kept a leadership: {observed}"
    # Only the isolated broker's partitions moved: the majority keeps its own.
    assert all(after[p] == leader for p, leader in before.items() if leader != busiest), observed
    assert observed["isrs_after_heal"] == [[0, 1, 2]] * 5, f"an ISR did not heal: {observed}"


def test_a_broker_restarted_inside_a_partition_comes_back_without_waiting_for_the_heal():
    # The kill nemesis restarts a broker while the partition nemesis still cuts it off from
    # the controller: the restart must not wait for a registration only the heal allows.
    observed = run_scenario("restart_inside_partition")
    assert observed["inside"] is True
    assert observed["started"]["cut-from-controller"] == [observed["leader"]], observed
    assert observed["after_start"] == {"alive": True, "listening": True, "registered": False}, observed
    assert observed["registered_after_heal"] is True, observed
