"""`logquake test --docker-compose FILE --nodes ...` (cluster/docker_compose.py): a Compose
project brought up per run, real faults on its containers, claims from the cluster's own
DescribeConfigs, and nothing left behind however a run ends.

Needs a Docker daemon, docker-compose and the node image (examples/compose/bundled-cluster.yaml
runs it): the module fixture runs scripts/ensure-docker (installs docker.io and docker-compose,
starts a private daemon if none answers) and builds the image if it is missing, as
test_docker_backend.py does (`make test` does both before the suite).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.history import read_history

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "examples" / "compose" / "bundled-cluster.yaml"
NODES = "broker-0,broker-1,broker-2"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the Docker set-up (dockerd, nft) needs root")


@pytest.fixture(scope="module")
def docker_image():
    from cluster.docker_backend import DockerUnavailable, docker_client
    from harness.image import ensure_image

    try:
        client = docker_client()
    except DockerUnavailable:
        client = None
    if client is None or subprocess.run(["which", "docker-compose"], capture_output=True).returncode != 0:
        result = subprocess.run([str(PROJECT / "scripts" / "ensure-docker")], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        os.environ["DOCKER_HOST"] = result.stdout.strip()
        client = docker_client()
    return client, ensure_image(client)


def project_objects_of(client, owner_pid: int) -> list[str]:
    """Every container, network and volume of the Compose projects that process `owner_pid` owns."""
    from cluster.docker_compose import PROJECT_RE, logquake_projects, project_objects

    found = []
    for project in logquake_projects(client):
        if PROJECT_RE.match(project).group(2) == str(owner_pid):
            found += project_objects(client, project)
    return found


def logquake_test(*args: str, env: dict | None = None, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.testcmd", *args], cwd=PROJECT, capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})


def connects(pid: int, host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection from inside the network namespace of `pid` to host:port succeeds."""
    code = (f"import socket,sys\ns=socket.socket()\ns.settimeout({timeout_s})\n"
            f"try:\n s.connect(({host!r},{port}))\nexcept OSError:\n sys.exit(1)\n")
    return subprocess.run(["nsenter", "-t", str(pid), "-n", sys.executable, "-c", code],
                          capture_output=True, timeout=30).returncode == 0


def compose_run_command(results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness.testcmd", "--docker-compose", str(EXAMPLE), "--nodes", NODES,
            "--workload", "queue", "--nemesis", "kill,pause,partition", "--nemesis-interval", "1", "--seed", "17",
            "--client-config", "enable.idempotence=true", "--cluster-config", "min.insync.replicas=2",
            "--quiet-period", "2", "--final-time-limit", "30", "--results-dir", str(results), *extra]


# -- the cluster's faults, observed from inside the containers ---------------------------

def test_kill_pause_and_partition_act_on_the_projects_containers(docker_image):
    from cluster.docker_compose import ComposeCluster, ComposeControl, ComposeNode, project_objects
    from cluster.launcher import probe
    from nemeses.net.nft import bridge_partitioner

    client, image = docker_image
    nodes = [ComposeNode(s) for s in NODES.split(",")]
    with ComposeCluster(EXAMPLE, nodes, client=client, node_image=image) as cluster:
        control = ComposeControl(cluster)
        assert control.broker_ids == [0, 1, 2]  # the brokers' own Kafka ids, read from Metadata
        assert [cluster.service(i) for i in control.broker_ids] == ["broker-0", "broker-1", "broker-2"]
        hosts = control.hosts()
        assert all(ipaddress_in(h, cluster.subnet) for h in hosts.values())
        assert control.controller_host() == f"{cluster.net}.9"  # the service labelled org.logquake.role=controller
        b0, b1 = cluster.brokers[0], cluster.brokers[1]

        cut = control.bridge_cut()
        partitioner = bridge_partitioner(cut.table, cut.subnet)
        partitioner.apply(blocked=[(b0.host, b1.host)])
        assert partitioner.current() == ({(b0.host, b1.host)}, set())
        assert not connects(control.pid(0), b1.host, b1.port)
        assert not connects(control.pid(1), b0.host, b0.port)  # its SYN-ACKs to b0 are lost too
        assert connects(control.pid(0), control.controller_host(), 9093)
        probe(b0.host, b0.port)  # the host still reaches every node
        probe(b1.host, b1.port)
        old_pid = control.kill(1)
        assert not control.is_alive(1)
        assert control.start(1) != old_pid
        assert not connects(control.pid(0), b1.host, b1.port)  # the cut outlives the restart
        partitioner.heal()
        assert connects(control.pid(0), b1.host, b1.port)

        control.pause(2)
        assert control.is_paused(2) and control.is_alive(2)
        with pytest.raises(OSError):
            probe(cluster.brokers[2].host, cluster.brokers[2].port, timeout_s=1.0)
        control.resume(2)
        probe(cluster.brokers[2].host, cluster.brokers[2].port)
        project = cluster.project
    assert project_objects(client, project) == []  # containers, network, volumes and the nft table


def ipaddress_in(host: str, subnet) -> bool:
    import ipaddress

    return ipaddress.IPv4Address(host) in subnet


# -- a whole run --------------------------------------------------------------------------

@pytest.mark.slow
def test_a_seeded_compose_run_with_kill_pause_and_partition_is_valid(docker_image, tmp_path):
    client, _ = docker_image
    results = tmp_path / "results"
    proc = subprocess.Popen(compose_run_command(results, "--time-limit", "15"), cwd=PROJECT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err[-3000:]
    assert f"--docker-compose {EXAMPLE} --nodes {NODES}" in out.splitlines()[0]
    (run_dir,) = [p.parent for p in results.rglob("spec.json")]
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["docker_compose"] == str(EXAMPLE) and spec["nodes"] == NODES.split(",") and spec["brokers"] == 3
    ops = read_history(run_dir / "history.jsonl", allow_torn_tail=False)
    faults = {op.f for op in ops if op.process == "nemesis"}
    assert {"start-kill", "stop-kill", "start-pause", "stop-pause", "start-partition", "stop-partition"} <= faults, faults
    # The claims rest on what the cluster reported (DescribeConfigs), as for --bootstrap-servers.
    readings = json.loads((run_dir / "cluster-config.json").read_text())["readings"]
    assert [r["when"] for r in readings] == ["after-setup", "end"]
    assert all(t["configs"]["min.insync.replicas"] == "2" for r in readings for t in r["topics"].values())
    durable = next(c for c in json.loads((run_dir / "results.json").read_text())["claims"]
                   if c["name"] == "acked-writes-durable")
    assert "reported by the external cluster" in durable["reason"] and "min.insync.replicas=2" in durable["reason"]
    assert project_objects_of(client, proc.pid) == []


@pytest.mark.slow
def test_an_interrupted_compose_run_leaves_nothing_behind(docker_image, tmp_path):
    client, _ = docker_image
    proc = subprocess.Popen(compose_run_command(tmp_path / "results", "--time-limit", "120"), cwd=PROJECT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while len([o for o in project_objects_of(client, proc.pid) if o.startswith("container")]) < 4:
            assert proc.poll() is None, "the run ended before its project was up"
            assert time.monotonic() < deadline, "the project's containers did not appear"
            time.sleep(0.5)
        time.sleep(4)  # the nodes answer, the workload and the first faults are under way
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        assert project_objects_of(client, proc.pid) == []  # the teardown's down -v, before exiting
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- a harness killed outright: the reaper and the sweep ----------------------------------

def test_the_reaper_and_the_sweep_remove_projects_whose_owner_is_gone(docker_image):
    from cluster.docker_compose import LABEL_PROJECT, _start_reaper, project_name, project_objects, sweep_stale

    client, _ = docker_image
    owner = subprocess.Popen(["sleep", "1000"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    projects = {"reaped": project_name("deadbeef0101", owner.pid), "swept": project_name("deadbeef0102", gone.pid),
                "live": project_name("deadbeef0103", os.getpid())}
    try:
        for project in projects.values():
            client.networks.create(f"{project}_default", driver="bridge", labels={LABEL_PROJECT: project})
        client.volumes.create(f"{projects['swept']}_data", labels={LABEL_PROJECT: projects["swept"]})
        removed = sweep_stale(client)
        assert f"network {projects['swept']}_default" in removed and f"volume {projects['swept']}_data" in removed
        assert project_objects(client, projects["swept"]) == []
        assert project_objects(client, projects["live"]) == [f"network {projects['live']}_default"]
        assert project_objects(client, projects["reaped"]) == [f"network {projects['reaped']}_default"]
        reaper = _start_reaper(projects["reaped"], owner.pid)
        owner.kill()
        owner.wait()
        assert reaper.wait(timeout=60) == 0
        assert project_objects(client, projects["reaped"]) == []
    finally:
        owner.kill()
        for project in projects.values():
            for network in client.networks.list(filters={"label": f"{LABEL_PROJECT}={project}"}):
                network.remove()


# -- bad input: a clear reason, the CLI's exit codes, nothing left running ----------------

def test_bad_arguments_are_refused_before_anything_starts(docker_image, tmp_path, capsys):
    from harness.testcmd import main

    broken = tmp_path / "broken.yaml"
    broken.write_text("services:\n  kafka:\n    image: x\n    bogus_key: 1\n")
    for args, reason in (
            (["--docker-compose", str(tmp_path / "missing.yaml"), "--nodes", "kafka"], "missing.yaml: no such file"),
            (["--docker-compose", str(EXAMPLE), "--nodes", "broker-0,kafka-9"],
             "has no service 'kafka-9' (its services: controller, broker-0, broker-1, broker-2)"),
            (["--docker-compose", str(broken), "--nodes", "kafka"], "Compose refuses it"),
            (["--docker-compose", str(EXAMPLE)], "--docker-compose needs --nodes"),
            (["--nodes", "broker-0"], "--nodes names services of a Compose file"),
            (["--docker-compose", str(EXAMPLE), "--nodes", "broker-0,broker-0"], "names broker-0 twice"),
            (["--docker-compose", str(EXAMPLE), "--nodes", "broker-0:http"], "the port must be a number"),
            (["--docker-compose", str(EXAMPLE), "--nodes", NODES, "--brokers", "5"], "--brokers 5 disagrees with --nodes"),
            (["--docker-compose", str(EXAMPLE), "--nodes", NODES, "--nemesis", "clock"],
             "clock cannot run on a Compose project: clock skew needs libfaketime"),
            (["--docker-compose", str(EXAMPLE), "--nodes", NODES, "--nemesis", "latency"],
             "latency cannot run on a Compose project"),
            (["--docker-compose", str(EXAMPLE), "--nodes", NODES, "--backend", "docker"], "--backend docker runs the bundled"),
            (["--docker-compose", str(EXAMPLE), "--nodes", NODES, "--sim"], "--sim runs the bundled cluster's simulation")):
        assert main([*args, "--results-dir", str(tmp_path / "results")]) == 254, args
        err = capsys.readouterr().err
        assert reason in err, (args, err)
    assert not (tmp_path / "results").exists()  # refused before any run directory


def test_unanswering_or_unreachable_nodes_or_a_failed_up_fail_the_run_naming_why_and_leave_nothing(
        docker_image, tmp_path, capsys, monkeypatch):
    from harness.testcmd import main

    client, _ = docker_image
    compose = tmp_path / "silent.yaml"
    compose.write_text(
        "version: '2.4'\n"
        "services:\n"
        "  silent:\n"
        "    image: ${LOGQUAKE_NODE_IMAGE}\n"
        "    command: [python3, -c, 'import time; time.sleep(600)']\n"
        "    init: true\n")  # so `down` stops it at once (a PID 1 python ignores SIGTERM)
    monkeypatch.setenv("LOGQUAKE_COMPOSE_STARTUP_TIMEOUT_S", "3")
    assert main(["--docker-compose", str(compose), "--nodes", "silent", "--time-limit", "5",
                 "--results-dir", str(tmp_path / "results")]) == 255
    err = capsys.readouterr().err
    assert "the nodes did not all answer Kafka ApiVersions and Metadata within 3 s: silent: " in err, err
    assert project_objects_of(client, os.getpid()) == []

    # Nodes that advertise names the host cannot resolve (a broker's --host is its service name):
    # each is identified by that name, and the run refuses before any client follows them.
    monkeypatch.setenv("LOGQUAKE_COMPOSE_STARTUP_TIMEOUT_S", "120")
    node = "    image: ${LOGQUAKE_NODE_IMAGE}\n    working_dir: /opt/logquake/src\n    init: true\n"
    compose.write_text(
        "version: '2.4'\nservices:\n"
        f"  controller:\n{node}    labels: {{org.logquake.role: controller}}\n"
        "    command: [python3, -m, cluster.controller.main, --host, controller, --port, '9093', --data-dir, /data]\n"
        f"  named:\n{node}"
        "    command: [python3, -m, cluster.runtime.broker_main, --broker-id, '0', --host, named, --port, '9092',\n"
        "              --data-dir, /data, --config, 'controller.quorum.voters=1000@controller:9093',\n"
        "              --config, offsets.topic.replication.factor=1, --config, transaction.state.log.replication.factor=1,\n"
        "              --config, transaction.state.log.min.isr=1]\n")
    assert main(["--docker-compose", str(compose), "--nodes", "named", "--time-limit", "5",
                 "--results-dir", str(tmp_path / "results")]) == 255
    err = capsys.readouterr().err
    assert "the clients run on this host and follow the addresses the nodes advertise, which it cannot reach: " \
           "named advertises named:9092" in err, err
    assert project_objects_of(client, os.getpid()) == []

    # A project Compose cannot bring up (an image nobody has): its own words, nothing left.
    compose.write_text("version: '2.4'\nservices:\n  kafka:\n    image: logquake-no-such-image:1\n")
    assert main(["--docker-compose", str(compose), "--nodes", "kafka", "--time-limit", "5",
                 "--results-dir", str(tmp_path / "results")]) == 255
    err = capsys.readouterr().err
    assert f"docker-compose up of {compose} failed" in err and "logquake-no-such-image:1" in err, err
    assert project_objects_of(client, os.getpid()) == []
