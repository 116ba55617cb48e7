"""Controller failover in the simulator: three controllers replicate the metadata log through
the Raft quorum while acks=all producers write; the active controller is killed, paused, or
cut off from everyone else, and a broker leading a partition dies meanwhile, so the next
active controller must move that leadership. Afterwards: no acknowledged write is lost, the
partition's leadership moved (a higher leader epoch, another leader), every broker is
registered and unfenced (the survivors with the session they had: the new controller gave a
grace period), and the checks over the controllers' logs and journals find nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from cluster.sim.cluster import SimCall, SimCluster
from tests.cluster.sim.sim_requests import create_topic, produce_result, read_all, send_produce

TOPIC = "t"
PARTITIONS = 3
PRODUCE_EVERY_MS = 50


class Load:
    """acks=all producers on every partition, each sending to the leader its broker's
    image names, recording what was acknowledged."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        self.in_flight: list[tuple[int, bytes, SimCall]] = []
        self.sent = 0

    def leader(self, partition: int) -> int | None:
        for broker in self.sim.running_brokers():
            state = broker.controller_client.image.partition(TOPIC, partition)
            if state is not None and state.has_leader and self.sim.is_running(state.leader):
                return state.leader
        return None

    def step(self) -> None:
        for partition in range(PARTITIONS):
            leader = self.leader(partition)
            if leader is None:
                continue
            value = f"{partition}-{self.sent}".encode()
            self.sent += 1
            self.in_flight.append((partition, value, send_produce(self.sim, leader, TOPIC, partition, [value], acks=-1, timeout_ms=2000)))
        self.collect()

    def collect(self) -> None:
        still = []
        for partition, value, call in self.in_flight:
            if not call.done:
                still.append((partition, value, call))
            elif call.result is not None and call.result.ok:
                error, offset = produce_result(call)
                if error == ErrorCode.none:
                    self.acked[partition][offset] = value
        self.in_flight = still

    def run(self, duration_ms: float) -> None:
        waited = 0.0
        while waited < duration_ms:
            self.step()
            self.sim.run_for(PRODUCE_EVERY_MS)
            waited += PRODUCE_EVERY_MS


def ready(sim: SimCluster) -> bool:
    return sim.controller is not None and all(b.controller_client.registered and not b.controller_client.fenced
                                              for b in sim.running_brokers())


def start(seed: int) -> SimCluster:
    sim = SimCluster(3, controllers=3, seed=seed, properties={"min.insync.replicas": "2"})
    sim.run_until(lambda: ready(sim), 20_000, what="an active controller and every broker unfenced")
    assert create_topic(sim, 0, TOPIC, PARTITIONS, 3).error_code == ErrorCode.none
    sim.run_until(lambda: all(b.controller_client.image.topic(TOPIC) is not None for b in sim.running_brokers()), 5_000,
                  what="the topic in every image")
    return sim


def kill_active(sim: SimCluster) -> Callable[[], None]:
    killed = sim.kill_controller()
    return lambda: sim.start_controller(killed)


def pause_active(sim: SimCluster) -> Callable[[], None]:
    assert sim.controller is not None
    paused = sim.controller.config.node_id
    sim.pause(paused)
    return lambda: sim.resume(paused)


def isolate_active(sim: SimCluster) -> Callable[[], None]:
    assert sim.controller is not None
    cut = sim.controller.config.node_id
    sim.isolate([[cut], [*(c for c in sim.controller_ids if c != cut), *sim.broker_ids, "client"]])
    return sim.heal


FAULTS = {"kill": kill_active, "pause": pause_active, "partition": isolate_active}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_active_controller_fault_under_acks_all_load(fault: str, seed: int) -> None:
    sim = start(seed)
    load = Load(sim)
    load.run(1_000)
    first = sim.controller
    assert first is not None
    first_id, first_epoch = first.config.node_id, first.epoch
    sessions = {b.config.broker_id: b.controller_client.broker_epoch for b in sim.running_brokers()}
    before = load.leader(0)
    assert before is not None
    state_before = sim.broker(before).controller_client.image.partition(TOPIC, 0)
    assert state_before is not None

    undo = FAULTS[fault](sim)
    load.run(300)
    sim.kill(before)  # its partitions need a leader from the next active controller
    load.run(6_000)
    new = sim.controller
    assert new is not None and new.config.node_id != first_id and new.epoch > first_epoch, \
        f"no new active controller after the {fault} of {first_id}"
    after = load.leader(0)
    state_after = sim.broker(after).controller_client.image.partition(TOPIC, 0) if after is not None else None
    assert state_after is not None and state_after.leader != before and state_after.leader_epoch > state_before.leader_epoch, \
        f"partition 0 leadership did not move off broker {before}: {state_after}"
    # The survivors kept their sessions through the failover: same broker epochs, unfenced.
    for broker in sim.running_brokers():
        assert broker.controller_client.broker_epoch == sessions[broker.config.broker_id]
        assert not broker.controller_client.fenced
        assert broker.controller_client.controller.node_id == new.config.node_id

    undo()
    sim.start_broker(before)
    load.run(4_000)
    sim.run_until(lambda: ready(sim) and all(call.done for _, _, call in load.in_flight), 20_000,
                  what="healed: every broker unfenced, every produce answered")
    load.collect()

    for partition, acked in load.acked.items():
        leader = load.leader(partition)
        assert leader is not None
        stored = dict(read_all(sim, leader, TOPIC, partition))
        lost = {offset: value for offset, value in acked.items() if stored.get(offset) != value}
        assert not lost, f"partition {partition}: acknowledged writes lost or changed: {sorted(lost.items())[:5]}"
    assert sum(len(a) for a in load.acked.values()) > 100
    report = sim.quorum_report()
    assert report["valid"], report["violations"]
    assert {t[0] for n in report["nodes"] for t in n["transitions"] if t[1] == "leader"} >= {first_epoch, new.epoch}
