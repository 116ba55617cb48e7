"""The Docker back end (cluster/docker_backend.py): real containers from the node image on a
bridge network of their own, real faults, and nothing left behind however a run ends.

Needs a Docker daemon and the node image: the module fixture runs scripts/ensure-docker
(installs docker.io, starts a private daemon if none answers) and builds the image if it is
missing (`make test` does both before the suite; the image is cached by the daemon).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.history import read_history

PROJECT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the Docker back end's set-up (dockerd, nft) needs root")


@pytest.fixture(scope="module")
def docker_image():
    from cluster.docker_backend import DockerUnavailable, docker_client
    from harness.image import ensure_image

    try:
        client = docker_client()
    except DockerUnavailable:
        result = subprocess.run([str(PROJECT / "scripts" / "ensure-docker")], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        os.environ["DOCKER_HOST"] = result.stdout.strip()
        client = docker_client()
    return client, ensure_image(client)


def logquake_objects(client, owner_pid=None):
    """Every container and network of logquake (of runs owned by `owner_pid`, if given)."""
    from cluster.docker_backend import LABEL_OWNER_PID, LABEL_RUN

    label = f"{LABEL_OWNER_PID}={owner_pid}" if owner_pid is not None else LABEL_RUN
    found = [f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters={"label": label})]
    found += [f"network {n.name}" for n in client.networks.list(filters={"label": label})]
    return found


def connects(pid: int, host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection from inside the network namespace of `pid` to host:port
    succeeds (nsenter: the node's own view of the network)."""
    code = (f"import socket,sys\ns=socket.socket()\ns.settimeout({timeout_s})\n"
            f"try:\n s.connect(({host!r},{port}))\nexcept OSError:\n sys.exit(1)\n")
    return subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", code],
                          capture_output=True, timeout=30).returncode == 0


def test_kill_pause_and_partition_act_on_the_containers(docker_image, tmp_path):
    from cluster.docker_backend import DockerCluster, DockerControl
    from cluster.launcher import probe

    client, image = docker_image
    with DockerCluster(brokers=2, image=image, base_dir=tmp_path / "cluster", client=client,
                       config={"offsets.topic.num.partitions": "5"}) as cluster:
        control = DockerControl(cluster)
        b0, b1 = cluster.brokers
        assert b0.host.startswith("10.213.") and b0.host.endswith(".10") and b1.host.endswith(".11")
        assert cluster.controller.host.endswith(".9")
        probe(b0.host, b0.port)  # the host reaches every node over the bridge

        # partition: b0 -> b1 cut (b1's SYN-ACKs to b0 are lost too, as with Jepsen's drops);
        # b0's link to the controller and the host's own connections are unaffected
        from nemeses.net.nft import bridge_partitioner

        cut = control.bridge_cut()
        partitioner = bridge_partitioner(cut.table, cut.subnet)
        partitioner.apply(blocked=[(b0.host, b1.host)])
        assert partitioner.current() == ({(b0.host, b1.host)}, set())
        with pytest.raises(ValueError, match="not on the run's network"):
            partitioner.apply(blocked=[("127.0.0.1", b1.host)])  # only the run's own containers are ever cut
        assert not connects(b0.pid, b1.host, b1.port)
        assert not connects(b1.pid, b0.host, b0.port)
        assert connects(b0.pid, cluster.controller.host, cluster.controller.port)
        probe(b0.host, b0.port)
        probe(b1.host, b1.port)
        # the cut survives the container's kill and restart (the rules are on the host's bridge)
        old_pid = control.kill(1)
        assert not control.is_alive(1)
        assert control.start(1) != old_pid
        assert not connects(b0.pid, b1.host, b1.port)
        partitioner.heal()
        assert connects(b0.pid, b1.host, b1.port)

        # pause freezes the container: the node answers nothing until resumed
        control.pause(0)
        assert control.is_paused(0) and control.is_alive(0)
        with pytest.raises(OSError):
            with socket.create_connection((b0.host, b0.port), timeout=2) as sock:
                sock.settimeout(1.0)
                sock.sendall(b"\x00\x00\x00\x00")
                assert sock.recv(1) == b""  # never answered
        control.resume(0)
        assert not control.is_paused(0)
        probe(b0.host, b0.port)
        run_id = cluster.run_id
    from cluster.docker_backend import run_objects

    assert run_objects(client, run_id) == []


def test_clock_skew_reaches_a_broker_inside_its_container(docker_image, tmp_path):
    from cluster.control import BrokerClocks
    from cluster.docker_backend import IMAGE_FAKETIME_LIBRARY, DockerCluster, DockerControl

    client, image = docker_image
    clocks = BrokerClocks(tmp_path / "clocks", library_path=IMAGE_FAKETIME_LIBRARY)
    with DockerCluster(brokers=1, image=image, base_dir=tmp_path / "cluster", client=client, extra_env=clocks.extra_env,
                       shared_dirs=[clocks.clock_dir], config={"offsets.topic.num.partitions": "1"}) as cluster:
        control = DockerControl(cluster, clocks)
        assert IMAGE_FAKETIME_LIBRARY in Path(f"/proc/{control.pid(0)}/maps").read_text()  # the broker runs under it
        control.set_clock_offset(0, 3600.0)
        container = client.containers.get(cluster.container_name(0))
        # a process started in the broker's container gets its environment: its wall clock is the broker's
        code, output = container.exec_run(["python3", "-c", "import time; print(time.time())"])
        assert code == 0, output
        assert 3590 < float(output.decode().split()[-1]) - time.time() < 3610
        control.set_clock_offset(0, 0.0)
        code, output = container.exec_run(["python3", "-c", "import time; print(time.time())"])
        assert abs(float(output.decode().split()[-1]) - time.time()) < 10


def docker_run_command(results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness.testcmd", "--backend", "docker", "--workload", "queue", "--brokers", "3",
            "--nemesis", "kill,pause,partition", "--nemesis-interval", "2", "--seed", "17",
            "--client-config", "enable.idempotence=true", "--cluster-config", "min.insync.replicas=2",
            "--quiet-period", "2", "--final-time-limit", "30", "--results-dir", str(results), *extra]


@pytest.mark.slow
def test_a_seeded_docker_run_with_kill_pause_and_partition_is_valid(docker_image, tmp_path):
    client, _ = docker_image
    results = tmp_path / "results"
    proc = subprocess.Popen(docker_run_command(results, "--time-limit", "20"), cwd=PROJECT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err[-3000:]
    assert "--backend docker" in out.splitlines()[0]
    (run_dir,) = [p.parent for p in results.rglob("spec.json")]
    assert json.loads((run_dir / "spec.json").read_text())["backend"] == "docker"
    ops = read_history(run_dir / "history.jsonl", allow_torn_tail=False)
    faults = {op.f for op in ops if op.process == "nemesis"}
    assert {"start-kill", "stop-kill", "start-pause", "stop-pause", "start-partition", "stop-partition"} <= faults, faults
    assert logquake_objects(client, proc.pid) == []


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_an_interrupted_or_killed_docker_run_leaves_nothing_behind(docker_image, tmp_path, how):
    client, _ = docker_image
    proc = subprocess.Popen(docker_run_command(tmp_path / "results", "--time-limit", "120"), cwd=PROJECT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while len([o for o in logquake_objects(client, proc.pid) if o.startswith("container")]) < 4:
            assert proc.poll() is None, "the run ended before its cluster was up"
            assert time.monotonic() < deadline, "the run's containers did not appear"
            time.sleep(0.5)
        time.sleep(2)  # the workload and the first faults are under way
        proc.send_signal(getattr(signal, how))
        code = proc.wait(timeout=120)
        assert code == (130 if how == "SIGINT" else -signal.SIGKILL)
        # SIGINT: the harness's teardown; SIGKILL: the run's reaper process notices its owner is gone
        deadline = time.monotonic() + 60
        while logquake_objects(client, proc.pid):
            assert time.monotonic() < deadline, logquake_objects(client, proc.pid)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_sweep_removes_the_objects_of_runs_whose_owner_is_gone_and_keeps_live_ones(docker_image, capsys):
    import docker.types

    from cluster.docker_backend import LABEL_OWNER_PID, LABEL_RUN, NETWORK_PREFIX, run_objects, sweep_stale
    from harness.cli import main

    client, image = docker_image
    assert main(["image", "tag"]) == 0 and capsys.readouterr().out.strip() == image  # the tree's image is the one built
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    made = {}
    for name, owner in (("deadbeef0001", gone.pid), ("deadbeef0002", os.getpid())):
        made[name] = client.networks.create(NETWORK_PREFIX + name, driver="bridge",
                                            labels={LABEL_RUN: name, LABEL_OWNER_PID: str(owner)},
                                            ipam=docker.types.IPAMConfig(pool_configs=[]))
    try:
        removed = sweep_stale(client)
        assert f"network {NETWORK_PREFIX}deadbeef0001" in removed
        assert run_objects(client, "deadbeef0001") == []
        assert run_objects(client, "deadbeef0002") == [f"network {NETWORK_PREFIX}deadbeef0002"]
    finally:
        for network in client.networks.list(names=[NETWORK_PREFIX + n for n in made]):
            network.remove()


def test_the_docker_backend_refuses_what_it_cannot_do(capsys):
    from harness.testcmd import main

    for extra, reason in ((["--bootstrap-servers", "127.0.0.1:9092"], "an external cluster"),
                          (["--nemesis", "latency"], "latency cannot run on the docker backend"),
                          (["--sim"], "--sim")):
        assert main(["--backend", "docker", *extra]) == 254
        assert reason in capsys.readouterr().err


@pytest.mark.slow
def test_three_controllers_in_containers_fail_over(docker_image, tmp_path):
    """--controllers 3 on the Docker back end: the controllers at their static addresses (.9,
    .8, .7) form the quorum, brokers follow it, and the faults reach controllers: the active
    one killed, another paused and cut off from the rest by the bridge partitioner; the
    metadata keeps moving, the killed one rejoins, and the checks over the controllers'
    logs and journals find nothing."""
    from cluster.controller.quorum_journal import collect_quorum_report
    from cluster.docker_backend import DockerCluster, DockerControl
    from nemeses.net.nft import bridge_partitioner
    from tests.cluster.kafka_helpers import create_topic, partition_view, wait_for

    def create(name: str) -> None:
        """CreateTopics until it succeeds: one sent while the broker still names a controller
        that cannot answer times out (as a client's would) and is sent again."""
        def attempt() -> bool:
            try:
                create_topic(cluster.bootstrap_servers, name, 1, replication_factor=2)
            except Exception as error:  # noqa: BLE001 - timeouts and NOT_CONTROLLER during a failover
                return "already exists" in str(error).lower()
            return True
        wait_for(attempt, 60, f"topic {name} created")

    client, image = docker_image
    with DockerCluster(brokers=2, controllers=3, image=image, base_dir=tmp_path / "cluster", client=client,
                       config={"offsets.topic.num.partitions": "1"}) as cluster:
        control = DockerControl(cluster)
        assert [c.host.rsplit(".", 1)[1] for c in cluster.controllers] == ["9", "8", "7"]
        assert control.controller_ids == [1000, 1001, 1002]
        assert set(control.nemesis_nodes(("broker", "controller"))) == {0, 1, 1000, 1001, 1002}
        bootstrap = cluster.bootstrap_servers
        first = wait_for(cluster.active_controller, 30, "an active controller")
        create("before")
        control.kill(first)
        second = wait_for(lambda: (a := cluster.active_controller()) not in (None, first) and a, 30, "a new active controller")
        # The killed one rejoins; then the third is cut off from both (the other two keep a majority).
        control.start(first)
        third = next(c for c in control.controller_ids if c not in (first, second))
        cut = control.bridge_cut()
        partitioner = bridge_partitioner(cut.table, cut.subnet)
        node = {c.broker_id: c for c in cluster.controllers}
        partitioner.apply(blocked=[(node[third].host, node[c].host) for c in (first, second)]
                          + [(node[c].host, node[third].host) for c in (first, second)])
        assert not connects(node[third].pid, node[second].host, node[second].port)
        assert connects(node[first].pid, node[second].host, node[second].port)
        create("during-cut")
        partitioner.heal()
        control.pause(second)
        wait_for(lambda: (a := cluster.active_controller()) not in (None, second) and a, 30, "a controller leading while the active one is paused")
        create("after")
        control.resume(second)
        for topic in ("before", "during-cut", "after"):
            wait_for(lambda: (v := partition_view(bootstrap, topic, 0)) and v.leader >= 0, 30, f"a leader of {topic}")
        run_id = cluster.run_id
    report = collect_quorum_report({c.broker_id: c.data_dir for c in cluster.controllers})
    assert report["valid"], report["violations"]
    assert len(report["nodes"]) == 3 and report["partition_records"]
    from cluster.docker_backend import run_objects

    assert run_objects(client, run_id) == []
