"""Scenarios the mechanism tests run INSIDE a private namespace (through nemeses.net.sandbox):

    python -m tests.nemeses.scenarios NAME

Each starts echo servers, drives the real nemesis packages through ClusterControl, and
prints what it observed as one JSON line; the pytest side makes the assertions.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from cluster.control import BrokerClocks, ClusterControl, TopicPartition, faketime_shm_paths
from nemeses.base import NemesisOptions
from nemeses.kill import KillPackage
from nemeses.net.nft import NftPartitioner
from nemeses.net.sandbox import current_netns, inside_private_namespace
from nemeses.partition import PartitionPackage
from nemeses.pause import PausePackage
from nemeses.targets import Topology
from tests.nemeses.echo_cluster import EchoCluster, ask

UDP_SETTLE_S = 0.3


def udp_matrix(control: ClusterControl) -> list[list[int]]:
    """Directed pairs (src, dst) whose datagram did NOT arrive."""
    ids = control.broker_ids
    before = {d: len(json.loads(ask(control.host(d), control.port(d), "heard"))["udp"]) for d in ids}
    for src in ids:
        for dst in ids:
            if src != dst:
                ask(control.host(src), control.port(src), f"udp {control.host(dst)} {control.port(dst)}")
    time.sleep(UDP_SETTLE_S)
    missing = []
    for dst in ids:
        heard = json.loads(ask(control.host(dst), control.port(dst), "heard"))["udp"][before[dst]:]
        for src in ids:
            if src != dst and control.host(src) not in heard:
                missing.append([src, dst])
    return sorted(missing)


def dial(control: ClusterControl, src: int, dst: int, timeout_s: float = 1.0) -> str:
    answer = ask(control.host(src), control.port(src),
                 f"dial {control.host(dst)} {control.port(dst)} {timeout_s}", timeout_s=timeout_s + 5)
    return json.loads(answer)["result"]


def tcp_matrix(control: ClusterControl, timeout_s: float = 1.0) -> dict[str, str]:
    pairs = [(s, d) for s in control.broker_ids for d in control.broker_ids if s != d]
    with ThreadPoolExecutor(len(pairs)) as pool:
        results = list(pool.map(lambda p: dial(control, p[0], p[1], timeout_s), pairs))
    return {f"{s}->{d}": r for (s, d), r in zip(pairs, results)}


def tcp_heard(control: ClusterControl, node: int) -> list[str]:
    return json.loads(ask(control.host(node), control.port(node), "heard"))["tcp"]


def scenario_partitions() -> dict:
    """Every seeded topology over 4 servers: exactly its directed pairs are cut (UDP), TCP
    is cut on every link with a cut in either direction, and heal restores everything."""
    out: dict = {"inside": inside_private_namespace(), "topologies": {}}
    with EchoCluster(4) as cluster:
        control = ClusterControl(cluster)
        package = PartitionPackage(control, NemesisOptions(partition_targets=("one", "majority", "majorities-ring", "bridge")))
        import random

        ops = package.schedule(random.Random(7))
        out["baseline_udp"] = udp_matrix(control)
        seen = 0
        while seen < 4:
            start, stop = next(ops), next(ops)
            name = start["value"]["topology"]
            if name in out["topologies"]:
                continue
            seen += 1
            done = package.invoke(start["f"], start["value"])
            record = {"expected": done["blocked"], "udp": udp_matrix(control), "tcp": tcp_matrix(control),
                      "kernel": sorted([[a, b] for a, b in package.partitioner.current()[0]])}
            package.invoke(stop["f"], stop["value"])
            record["udp_after_heal"] = udp_matrix(control)
            record["tcp_after_heal"] = tcp_matrix(control)
            record["hosts"] = {str(k): v for k, v in control.hosts().items()}
            out["topologies"][name] = record
    return out


def scenario_one_way() -> dict:
    """One-way from server 0: its messages to the others are lost, theirs reach it."""
    with EchoCluster(3) as cluster:
        control = ClusterControl(cluster)
        package = PartitionPackage(control, NemesisOptions())
        value = Topology("one-way", blocked_data=frozenset({(0, 1), (0, 2)})).as_value()
        package.invoke("start-partition", value)
        heard_by_0_before = len(tcp_heard(control, 0))
        heard_by_1_before = len(tcp_heard(control, 1))
        out = {
            "1->0": dial(control, 1, 0),   # hello arrives at 0, welcome (0 -> 1) is lost
            "0->1": dial(control, 0, 1),   # hello (0 -> 1) is lost
            "1->2": dial(control, 1, 2),   # untouched link
        }
        out["0_heard_1"] = control.host(1) in tcp_heard(control, 0)[heard_by_0_before:]
        out["1_heard_0"] = control.host(0) in tcp_heard(control, 1)[heard_by_1_before:]
        out["udp"] = udp_matrix(control)
        package.invoke("stop-partition", None)
        out["after_heal"] = {"1->0": dial(control, 1, 0), "0->1": dial(control, 0, 1)}
        # A directed full drop: 2 does not hear 0, everything else flows.
        package.invoke("start-partition", Topology("grudge", blocked=frozenset({(0, 2)})).as_value())
        out["directed_udp"] = udp_matrix(control)
        package.invoke("stop-partition", None)
        out["directed_udp_after_heal"] = udp_matrix(control)
    return out


def scenario_pause() -> dict:
    with EchoCluster(2) as cluster:
        control = ClusterControl(cluster)
        package = PausePackage(control, NemesisOptions())
        out: dict = {"before": ask(control.host(0), control.port(0), "ping")}
        out["start"] = package.invoke("start-pause", {"targets": "one", "nodes": [0]})
        state = open(f"/proc/{control.pid(0)}/stat").read().rsplit(")", 1)[1].split()[0]
        out["state"] = state
        try:
            out["paused"] = ask(control.host(0), control.port(0), "ping", timeout_s=1.0)
        except TimeoutError:
            out["paused"] = "timeout"
        out["other"] = ask(control.host(1), control.port(1), "ping")
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(ask, control.host(0), control.port(0), "ping", 10.0)
            time.sleep(0.5)
            out["pending_done_while_paused"] = pending.done()
            out["stop"] = package.invoke("stop-pause", None)
            out["pending_after_resume"] = pending.result()
        out["after"] = ask(control.host(0), control.port(0), "ping")
    return out


def scenario_kill() -> dict:
    with EchoCluster(2) as cluster:
        control = ClusterControl(cluster)
        package = KillPackage(control, NemesisOptions())
        address_before = control.address(0)
        pid_before = control.pid(0)
        out: dict = {"start": package.invoke("start-kill", {"targets": "one", "nodes": [0]})}
        out["alive_after_kill"] = control.is_alive(0)
        out["pid_exists_after_kill"] = os.path.exists(f"/proc/{pid_before}")
        try:
            out["while_killed"] = ask(control.host(0), control.port(0), "ping", timeout_s=1.0)
        except ConnectionRefusedError:
            out["while_killed"] = "refused"
        out["other"] = ask(control.host(1), control.port(1), "ping")
        out["stop"] = package.invoke("stop-kill", None)
        out["same_address"] = control.address(0) == address_before
        out["new_pid"] = control.pid(0) != pid_before
        out["after"] = ask(control.host(0), control.port(0), "ping")
    return out


def scenario_hold() -> dict:
    """For the SIGKILL test: brokers under libfaketime, a partition in force; print what
    exists, then wait to be killed. Files go in the directory named by the second argument."""
    base = sys.argv[2]  # the test's own temporary directory: this process dies by SIGKILL
    clocks = BrokerClocks(os.path.join(base, "clocks"))
    cluster = EchoCluster(3, base_dir=base, extra_env=clocks.extra_env).__enter__()
    control = ClusterControl(cluster, clocks)
    partitioner = NftPartitioner()
    partitioner.apply(blocked=[(control.host(0), control.host(1))])
    for node in control.broker_ids:  # each libfaketime process creates its shm on first clock read
        ask(control.host(node), control.port(node), "clock")
    print(json.dumps({
        "netns": current_netns(),
        "pids": [control.pid(n) for n in control.broker_ids],
        "shm": [path for n in control.broker_ids for path in faketime_shm_paths(control.pid(n)) if os.path.exists(path)],
        "rules": sorted([list(p) for p in partitioner.current()[0]]),
    }), flush=True)
    time.sleep(600)
    return {}


def scenario_combined() -> dict:
    """Every package on one combined schedule, ops back to back; then heal: all must be whole."""
    import random

    from nemeses.base import build_packages
    from nemeses.combined import Combined

    with tempfile.TemporaryDirectory(prefix="logquake-combined-") as base, \
            EchoCluster(3, base_dir=base, extra_env=(clocks := BrokerClocks(os.path.join(base, "clocks"))).extra_env) as cluster:
        control = ClusterControl(cluster, clocks)
        # 'primaries' needs Kafka metadata, which echo servers do not serve.
        options = NemesisOptions(db_targets=("one", "minority", "majority", "all"),
                                 partition_targets=("one", "majority", "majorities-ring", "bridge", "one-way"))
        packages = build_packages(["kill", "pause", "partition", "clock"], control, options)
        combined = Combined(packages, quiet_probability=0.2)
        ops = combined.schedule(random.Random(11))
        performed = []
        # Stop in the middle of a round, with a broker down or frozen, and heal from there.
        while len(performed) < 40 or performed[-1]["f"] not in ("start-kill", "start-pause"):
            op = next(ops)
            performed.append({"f": op["f"], "result": combined.invoke(op["f"], op["value"])})
        faults_in_force = {
            "dead": [n for n in control.broker_ids if not control.is_alive(n)],
            "paused": [n for n in control.broker_ids if control.is_paused(n)],
        }
        combined.heal()
        out = {
            "performed": performed,
            "before_heal": faults_in_force,
            "alive": [control.is_alive(n) for n in control.broker_ids],
            "paused": [control.is_paused(n) for n in control.broker_ids],
            "rules": [sorted(map(list, pairs)) for pairs in packages[2].partitioner.current()],
            "udp": udp_matrix(control),
            "tcp": sorted(set(tcp_matrix(control).values())),
            "skew": [abs(json.loads(ask(control.host(n), control.port(n), "clock"))["wall"] - time.time()) < 0.5
                     for n in control.broker_ids],
            "offsets": clocks.offsets(),
        }
    return out


def scenario_broker() -> dict:
    """A real bundled broker inside the namespace: clients reach it, an nftables cut between
    the client address and the broker stops Kafka requests, heal restores them."""
    from confluent_kafka import Producer

    from cluster.launcher import LocalCluster
    from cluster.protocol.client import WireClient
    from cluster.protocol.versions import ApiKey

    def api_versions(control: ClusterControl) -> str:
        try:
            with WireClient(control.host(0), control.port(0), timeout_s=1.0) as client:
                return str(client.request(ApiKey.API_VERSIONS, 3, client_software_name="t",
                                          client_software_version="0").error_code.value)
        except (TimeoutError, OSError) as error:
            return type(error).__name__

    with tempfile.TemporaryDirectory(prefix="logquake-broker-ns-") as base, \
            LocalCluster(1, base_dir=os.path.join(base, "cluster"),
                         extra_env=(clocks := BrokerClocks(os.path.join(base, "clocks"))).extra_env) as cluster:
        control = ClusterControl(cluster, clocks)
        out: dict = {"inside": inside_private_namespace()}
        delivered: list = []
        producer = Producer({"bootstrap.servers": control.address(0)})
        producer.produce("ns", value=b"v", on_delivery=lambda err, msg: delivered.append(err is None))
        producer.flush(15)
        out["delivered"] = delivered
        out["before"] = api_versions(control)
        partitioner = NftPartitioner()
        partitioner.apply(blocked=[("127.0.0.1", control.host(0))])  # the client cannot reach the broker
        out["cut"] = api_versions(control)
        partitioner.heal()
        out["healed"] = api_versions(control)
    return out


def scenario_partitioned_leader() -> dict:
    """Three real brokers and the controller inside the namespace: the partition nemesis
    isolates the leader of a partition ("primaries"); the majority elects a new leader; after
    heal the old leader follows it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from cluster.launcher import LocalCluster

    config = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300", "replica.lag.time.max.ms": "4000",
              "offsets.topic.num.partitions": "3", "default.replication.factor": "3"}
    with tempfile.TemporaryDirectory(prefix="logquake-leader-ns-") as base, \
            LocalCluster(3, base_dir=os.path.join(base, "cluster"), config=config) as cluster:
        control = ClusterControl(cluster)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for future in admin.create_topics([NewTopic("t", 1, 3)]).values():
            future.result(timeout=30)

        def leader() -> int:
            try:
                return next(iter(control.leaders(["t"]).values()), -1)
            except Exception:  # noqa: BLE001 - no broker answered yet
                return -1

        deadline = time.monotonic() + 30
        while leader() < 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = leader()
        package = PartitionPackage(control, NemesisOptions(partition_targets=("primaries",), primary_topics=("t",)))
        started = package.invoke("start-partition", {"topology": "primaries"})
        majority = [b for b in control.broker_ids if b != before]
        after = before
        deadline = time.monotonic() + 30
        while after in (before, -1) and time.monotonic() < deadline:
            # Ask the majority brokers themselves: an AdminClient bootstrapped from them may
            # still send its Metadata request to the isolated broker, whose view is stale.
            try:
                after = control.leaders(["t"], via=majority).get(TopicPartition("t", 0), -1)
            except Exception:  # noqa: BLE001 - keep polling while the cluster fails over
                pass
            time.sleep(0.1)
        package.invoke("stop-partition", None)
        isr: list[int] = []
        deadline = time.monotonic() + 30
        while len(isr) < 3 and time.monotonic() < deadline:
            try:
                isr = sorted(admin.list_topics("t", timeout=2).topics["t"].partitions[0].isrs)
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.1)
        return {"inside": inside_private_namespace(), "before": before, "after": after, "started": started, "isr_after_heal": isr}


def scenario_busiest_leader_isolated() -> dict:
    """Three real brokers, a topic of five partitions: the 'primary' topology isolates the
    broker leading the most of them; the other two (with the controller) take over its
    partitions and keep theirs; after heal every ISR is whole again."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from cluster.launcher import LocalCluster

    config = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300", "replica.lag.time.max.ms": "4000",
              "offsets.topic.num.partitions": "3", "default.replication.factor": "3"}
    with tempfile.TemporaryDirectory(prefix="logquake-primary-ns-") as base, \
            LocalCluster(3, base_dir=os.path.join(base, "cluster"), config=config) as cluster:
        control = ClusterControl(cluster)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for future in admin.create_topics([NewTopic("t", 5, 3)]).values():
            future.result(timeout=30)

        def leaders(via: list[int] | None = None) -> dict[int, int]:
            try:
                return {tp.partition: leader for tp, leader in control.leaders(["t"], via=via).items()}
            except Exception:  # noqa: BLE001 - no broker answered yet, or mid-failover
                return {}

        deadline = time.monotonic() + 30
        before = leaders()
        while len(before) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
            before = leaders()
        package = PartitionPackage(control, NemesisOptions(partition_targets=("primary",), primary_topics=("t",)))
        started = package.invoke("start-partition", {"topology": "primary"})
        isolated = started.get("isolated", -1)
        majority = [b for b in control.broker_ids if b != isolated]
        after = before
        deadline = time.monotonic() + 30
        while (len(after) < 5 or isolated in after.values()) and time.monotonic() < deadline:
            after = leaders(via=majority)  # the isolated broker's own view is stale
            time.sleep(0.1)
        package.invoke("stop-partition", None)
        isrs: list[list[int]] = []
        deadline = time.monotonic() + 30
        while not (len(isrs) == 5 and all(len(isr) == 3 for isr in isrs)) and time.monotonic() < deadline:
            try:
                isrs = [sorted(p.isrs) for p in admin.list_topics("t", timeout=2).topics["t"].partitions.values()]
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.1)
        return {"inside": inside_private_namespace(), "before": before, "after": after, "started": started, "isrs_after_heal": isrs}


def scenario_restart_inside_partition() -> dict:
    """The leader is cut off from the others and the controller, killed and restarted while
    still cut off: the restart returns once the broker listens (it cannot register yet);
    after heal it registers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from cluster.launcher import LocalCluster

    config = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300", "offsets.topic.num.partitions": "3"}
    with tempfile.TemporaryDirectory(prefix="logquake-restart-ns-") as base, \
            LocalCluster(3, base_dir=os.path.join(base, "cluster"), config=config) as cluster:
        control = ClusterControl(cluster)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for future in admin.create_topics([NewTopic("t", 1, 3)]).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        leader = -1
        while leader < 0 and time.monotonic() < deadline:
            leader = control.leaders(["t"]).get(TopicPartition("t", 0), -1)
            time.sleep(0.1)
        package = PartitionPackage(control, NemesisOptions(partition_targets=("primaries",), primary_topics=("t",)))
        started = package.invoke("start-partition", {"topology": "primaries"})
        node = cluster.brokers[leader]
        control.kill(leader)
        control.start(leader)
        after_start = {"alive": control.is_alive(leader), "listening": os.path.exists(node.listening_file),
                       "registered": os.path.exists(node.ready_file)}
        package.invoke("stop-partition", None)
        deadline = time.monotonic() + 30
        while not os.path.exists(node.ready_file) and time.monotonic() < deadline:
            time.sleep(0.1)
        return {"inside": inside_private_namespace(), "leader": leader, "started": started, "after_start": after_start,
                "registered_after_heal": os.path.exists(node.ready_file)}


SCENARIOS = {
    "restart_inside_partition": scenario_restart_inside_partition,
    "partitioned_leader": scenario_partitioned_leader,
    "busiest_leader_isolated": scenario_busiest_leader_isolated,
    "broker": scenario_broker,
    "combined": scenario_combined,
    "partitions": scenario_partitions,
    "one_way": scenario_one_way,
    "pause": scenario_pause,
    "kill": scenario_kill,
    "hold": scenario_hold,
}


def main() -> None:
    result = SCENARIOS[sys.argv[1]]()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
