"""The link-fault nemesis packages: a seeded schedule of targets and settings, invoked on a
SimCluster (each package clears only what it set), refused for a real cluster naming --sim,
and all four on one combined schedule while an aiokafka producer writes: every
acknowledged record kept, once."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from cluster.control import ClusterControl
from cluster.sim.aio_runtime import SimAsyncio
from cluster.sim.cluster import BROKER_PORT, CLIENT_HOST, CONTROLLER_HOST, SimCluster, broker_host
from cluster.sim.link_fault import LinkFault
from harness import testcmd
from harness.cli import EXIT_BAD_ARGUMENTS
from harness.spec import SIM_ONLY_NEMESES, RunSpec, SpecError
from nemeses.base import NemesisError, build_packages
from nemeses.combined import Combined
from nemeses.link_faults import (LINK_FAULT_NAMES, LinkFaultControl, LinkFaultOptions, LinkFaultPackage, build_link_fault_packages,
                                 fault_links, link_fault_schedule)
from tests.cluster.sim.aiokafka_scenario import TOPIC, _started
from tests.cluster.sim.test_link_faults_aiokafka import Outcome, _read_back, assert_every_ack_kept_once


def first_ops(name: str, seed: int, n: int = 40, options: LinkFaultOptions | None = None) -> list[dict]:
    return list(itertools.islice(link_fault_schedule(name, [0, 1, 2], options or LinkFaultOptions(), random.Random(seed)), n))


@pytest.mark.parametrize("name", LINK_FAULT_NAMES)
def test_the_schedule_is_seeded_alternates_and_draws_valid_settings(name: str) -> None:
    ops = first_ops(name, 7)
    assert ops == first_ops(name, 7) and ops != first_ops(name, 8)
    assert [op["f"] for op in ops] == [f"start-{name}", f"stop-{name}"] * 20
    starts = [op["value"] for op in ops[::2]]
    assert json.loads(json.dumps(starts)) == starts  # history-ready
    assert {v["target"] for v in starts} == {"node", "link", "subset"}
    for value in starts:
        fault = LinkFault.from_value(value["fault"])  # valid (the constructor checks)
        field = {"link-delay": fault.delay_ms, "link-loss": fault.loss, "link-duplicate": fault.duplicate, "link-reorder": fault.reorder}[name]
        assert field > 0
        for source, destination in value.get("links", []):
            assert source != destination and {source, destination} != {"client", "controller"}
    nodes = {v["node"] for v in starts if v["target"] == "node"} | {n for v in starts for link in v.get("links", []) for n in link}
    assert nodes == {0, 1, 2, "controller", "client"}


def test_options_restrict_targets_and_nodes() -> None:
    ops = first_ops("link-delay", 3, options=LinkFaultOptions(targets=("link",), with_controller=False, with_client=False))
    assert {op["value"]["target"] for op in ops[::2]} == {"link"}
    assert {n for op in ops[::2] for link in op["value"]["links"] for n in link} == {0, 1, 2}
    with pytest.raises(NemesisError, match="unknown link fault target 'ring'; known: node, link, subset"):
        LinkFaultOptions(targets=("ring",))
    assert len(fault_links([0, 1, "controller", "client"])) == 12 - 2


def test_invoke_sets_and_clears_only_its_own_settings() -> None:
    sim = SimCluster(3, seed=1)
    assert isinstance(sim, LinkFaultControl)
    delay, loss = build_link_fault_packages(["link-delay", "link-loss"], sim)
    delay.invoke("start-link-delay", {"target": "node", "node": 1, "fault": {"delay_ms": 30.0}})
    loss.invoke("start-link-loss", {"target": "link", "links": [[1, "controller"]], "fault": {"loss": 0.5}})
    network = sim.network
    assert network.link_fault(broker_host(1), CONTROLLER_HOST) == LinkFault(delay_ms=30, loss=0.5)
    assert network.link_fault(CLIENT_HOST, broker_host(1)) == LinkFault(delay_ms=30)
    assert network.link_fault(broker_host(0), broker_host(2)) == LinkFault()
    # A new start replaces the package's previous setting.
    delay.invoke("start-link-delay", {"target": "subset", "links": [[0, 2], ["client", 0]], "fault": {"delay_ms": 5.0, "jitter_ms": 1.0}})
    assert network.link_fault(CLIENT_HOST, broker_host(1)) == LinkFault()
    assert network.link_fault(broker_host(0), broker_host(2)) == LinkFault(delay_ms=5, jitter_ms=1)
    assert delay.invoke("stop-link-delay", None) == {"cleared": True}
    assert network.link_fault(broker_host(0), broker_host(2)) == LinkFault()
    assert network.link_fault(broker_host(1), CONTROLLER_HOST) == LinkFault(loss=0.5)  # link-loss's stays
    loss.heal()
    assert network.link_fault(broker_host(1), CONTROLLER_HOST) == LinkFault()


def test_bad_ops_are_refused_naming_the_problem() -> None:
    package = LinkFaultPackage("link-loss", SimCluster(1, seed=1))
    with pytest.raises(ValueError, match="needs a value with a target"):
        package.invoke("start-link-loss", {"node": 0})
    with pytest.raises(ValueError, match=r"start-link-loss: loss 2 must be a probability in \[0, 1\]"):
        package.invoke("start-link-loss", {"target": "node", "node": 0, "fault": {"loss": 2}})
    with pytest.raises(ValueError, match="no broker 5"):
        package.invoke("start-link-loss", {"target": "link", "links": [[5, 0]], "fault": {"loss": 0.1}})
    with pytest.raises(ValueError, match="has no op 'start-kill'"):
        package.invoke("start-kill", None)
    with pytest.raises(NemesisError, match="unknown link fault 'link-flood'"):
        LinkFaultPackage("link-flood", SimCluster(1, seed=1))


def test_a_real_cluster_control_is_refused_naming_sim() -> None:
    control = ClusterControl.__new__(ClusterControl)  # the real control's interface, no cluster behind it
    with pytest.raises(NemesisError, match=r"the link-delay nemesis runs only in the simulation \(logquake test --sim\)"):
        build_link_fault_packages(["link-delay"], control)
    # The harness's own factory takes the same way for a real run.
    with pytest.raises(NemesisError, match=r"the link-loss nemesis runs only in the simulation \(logquake test --sim\)"):
        build_packages(["kill", "link-loss"], control)


def test_the_factory_builds_them_over_a_simulated_runs_control() -> None:
    class SimulatedControl:
        """A simulated run's ClusterControl carries its SimCluster as `sim`."""

        def __init__(self, sim: SimCluster) -> None:
            self.sim = sim

    sim = SimCluster(3, seed=1)
    packages = build_packages(list(LINK_FAULT_NAMES), SimulatedControl(sim))  # type: ignore[arg-type]
    assert [p.name for p in packages] == list(LINK_FAULT_NAMES)
    packages[0].invoke("start-link-delay", {"target": "node", "node": 2, "fault": {"delay_ms": 7.0}})
    assert sim.network.link_fault(CLIENT_HOST, broker_host(2)) == LinkFault(delay_ms=7)
    with pytest.raises(NemesisError, match="unknown link fault 'link-flood'"):
        build_packages(["link-flood"], SimulatedControl(sim))  # type: ignore[arg-type]


def test_a_run_spec_may_name_them_but_not_against_an_external_cluster() -> None:
    assert SIM_ONLY_NEMESES == LINK_FAULT_NAMES
    assert RunSpec(name="t", workload="queue", seed=1, nemeses=("kill", "link-reorder")).nemeses == ("kill", "link-reorder")
    with pytest.raises(SpecError, match="link-delay needs control of the broker processes"):
        RunSpec(name="t", workload="queue", seed=1, nemeses=("link-delay",), bootstrap_servers="127.0.0.1:9092")
    with pytest.raises(SpecError, match="unknown nemesis 'link-flood'; known: .*link-delay, link-loss"):
        RunSpec(name="t", workload="queue", seed=1, nemeses=("link-flood",))


def test_all_four_on_one_combined_schedule_keep_every_acknowledged_write() -> None:
    """A combined schedule of the four packages, an op every 150 simulated ms on average,
    while an idempotent acks=all aiokafka producer writes; healed at the end."""
    sim = _started(31)
    combined = Combined(build_link_fault_packages(LINK_FAULT_NAMES, sim), quiet_probability=0.2)
    schedule = combined.schedule(random.Random(31))
    rng = random.Random(32)
    invoked: list[dict[str, Any]] = []
    records = 300
    acked: list[tuple[int, int, bytes]] = []
    bootstrap = ",".join(f"{broker_host(b)}:{BROKER_PORT}" for b in sim.broker_ids)

    async def nemesis(done: asyncio.Event) -> None:
        while not done.is_set():
            await asyncio.sleep(rng.uniform(0, 0.3))
            op = next(schedule)
            combined.invoke(op["f"], op["value"])
            invoked.append(op)
        combined.heal()

    async def produce(done: asyncio.Event) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, client_id="link-nemesis",
                                    linger_ms=5, request_timeout_ms=3_000, retry_backoff_ms=100)
        await producer.start()
        try:
            pending = []
            for i in range(records):
                value = f"v{i:05d}".encode()
                pending.append((value, await producer.send(TOPIC, value, timestamp_ms=runtime.wall_ms())))
                if i % 10 == 9:
                    await asyncio.sleep(0.1)
            for value, future in pending:
                metadata = await future
                acked.append((metadata.partition, metadata.offset, value))
        finally:
            done.set()
            await producer.stop()

    async def main() -> None:
        done = asyncio.Event()
        await asyncio.gather(nemesis(done), produce(done))

    with SimAsyncio(sim) as runtime:
        runtime.run(main(), timeout_s=600)
    assert {op["f"].split("-", 1)[1] for op in invoked if op["f"].startswith("start-")} == set(LINK_FAULT_NAMES)
    assert all(sim.network.link_fault(a, b) == LinkFault() for a in (CLIENT_HOST, CONTROLLER_HOST) for b in map(broker_host, sim.broker_ids))
    stats = sim.network.fault_stats
    assert min(stats.delayed, stats.retransmitted, stats.duplicated, stats.reordered) > 0, stats
    assert_every_ack_kept_once(Outcome(acked, _read_back(sim), stats, None, ""), records)


def test_a_real_run_of_logquake_test_refuses_them_naming_sim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert testcmd.main(["--nemesis", "kill,link-duplicate", "--seed", "1", "--results-dir", str(tmp_path)]) == EXIT_BAD_ARGUMENTS
    err = capsys.readouterr().err.strip()
    assert err == ("logquake test: --nemesis link-duplicate runs only in the simulation, whose network draws each message's "
                   "fate from the seed: add --sim")
    assert list(tmp_path.iterdir()) == []
