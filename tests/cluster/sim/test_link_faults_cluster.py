"""Link faults against the real broker and controller cores in simulation: duplicated
requests meet the broker's idempotence and the controller's epochs, delays between brokers
slow replication by what they add, lost segments are retransmitted, and node ids are checked."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.records import read_records
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import CONTROLLER_HOST, CONTROLLER_ID, SimCluster, broker_host
from cluster.sim.link_fault import LinkFault, LinkFaultError
from cluster.storage.batch import split_batches
from tests.cluster.sim.sim_requests import produce_result, read_all, send_produce
from tests.cluster.sim.test_sim_cluster import TOPIC, started, wait_isr, wait_leader


def init_producer_id(sim: SimCluster, broker: int) -> tuple[int, int]:
    body = sim.call(broker, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                    producer_id=-1, producer_epoch=-1)
    assert body.error_code == ErrorCode.none, body
    return int(body.producer_id), int(body.producer_epoch)


def replica_log(sim: SimCluster, broker: int) -> list[bytes]:
    """The values in `broker`'s own replica of the partition, read from its core."""
    partition = sim.broker(broker).partition(TOPIC, 0)
    assert partition is not None, f"broker {broker} has no replica of {TOPIC}-0"
    chunks = b"".join(bytes(c) for c in partition.read_for_replica(0, 1 << 24))
    return [record.value or b"" for _, batch in split_batches(chunks) for record in read_records(bytes(batch))]


def produce(sim: SimCluster, leader: int, values: list[bytes], **ids: int) -> int:
    call = send_produce(sim, leader, TOPIC, 0, values, acks=-1, **ids)
    sim.run_until(lambda: call.done, 10_000, step_ms=1, what="a produce answer")
    error, offset = produce_result(call)
    assert error == ErrorCode.none, error
    return offset


def test_duplicated_produce_requests_write_once_with_idempotence_and_twice_without() -> None:
    sim = started(seed=4)
    leader = wait_leader(sim, 0)
    producer_id, epoch = init_producer_id(sim, leader)
    sim.set_link_fault("client", leader, LinkFault(duplicate=1.0))
    offsets = [produce(sim, leader, [f"i{n}".encode()], producer_id=producer_id, producer_epoch=epoch, base_sequence=n)
               for n in range(5)]
    sim.run_for(200)
    assert sim.network.fault_stats.duplicated >= 5  # every produce reached the leader twice ...
    assert offsets == list(range(5))
    assert [v for _, v in read_all(sim, leader, TOPIC)] == [f"i{n}".encode() for n in range(5)]  # ... and was written once
    # Without a producer id the leader cannot tell a copy from a new request: the copy is
    # written too, as a real retry of a non-idempotent producer writes a duplicate.
    produce(sim, leader, [b"plain"])
    sim.run_for(200)
    assert [v for _, v in read_all(sim, leader, TOPIC)].count(b"plain") == 2


def test_duplicated_controller_and_replication_requests_leave_the_cluster_consistent() -> None:
    """Every broker's requests to the controller (heartbeats, ISR changes) and to the other
    brokers (replica fetches) duplicated, through a leader kill: the copies meet the
    controller's epochs, every replica ends with the same log and the ISR recovers."""
    sim = started(seed=6)
    for source in sim.broker_ids:
        sim.set_link_fault(source, "controller", LinkFault(duplicate=1.0))
        for destination in sim.broker_ids:
            if source != destination:
                sim.set_link_fault(source, destination, LinkFault(duplicate=0.5))
    first = wait_leader(sim, 0)
    for n in range(10):
        produce(sim, first, [f"a{n}".encode()])
    sim.kill(first)
    survivor = next(b for b in sim.broker_ids if b != first)
    second = wait_leader(sim, survivor, not_=first)
    for n in range(10):
        produce(sim, second, [f"b{n}".encode()])
    sim.start_broker(first)
    wait_isr(sim, second, {0, 1, 2})
    sim.run_for(1_000)
    logs = {b: replica_log(sim, b) for b in sim.broker_ids}
    expected = [f"a{n}".encode() for n in range(10)] + [f"b{n}".encode() for n in range(10)]
    assert all(log == expected for log in logs.values()), logs
    copies = sim.network.fault_stats.duplicated_apis
    # The restarted broker registered twice, ISR changes were proposed twice, heartbeats
    # and replica fetches came twice: the controller's epochs and the leader's fetch
    # handling took the copies.
    assert all(copies.get(api, 0) > 0 for api in (ApiKey.BROKER_REGISTRATION, ApiKey.ALTER_PARTITION, ApiKey.BROKER_HEARTBEAT,
                                                   ApiKey.FETCH)), copies


def test_a_delayed_follower_slows_acks_all_by_its_round_trip() -> None:
    sim = started(seed=2)
    leader = wait_leader(sim, 0)
    follower = next(b for b in sim.broker_ids if b != leader)
    before = sim.clock.monotonic_ns()
    produce(sim, leader, [b"fast"])
    fast_ms = (sim.clock.monotonic_ns() - before) / 1e6
    sim.set_link_fault(follower, leader, LinkFault(delay_ms=150))
    sim.set_link_fault(leader, follower, LinkFault(delay_ms=150))
    sim.run_for(1_000)  # fetches in flight before the fault have returned
    before = sim.clock.monotonic_ns()
    produce(sim, leader, [b"slow"])
    slow_ms = (sim.clock.monotonic_ns() - before) / 1e6
    # The follower needs the record (150 ms) and the leader its next fetch (150 ms).
    assert fast_ms < 150 and slow_ms >= 300, (fast_ms, slow_ms)
    assert sim.network.link_fault(broker_host(follower), broker_host(leader)) == LinkFault(delay_ms=150)
    sim.clear_link_faults()
    wait_isr(sim, leader, {0, 1, 2})


def test_heartbeats_through_a_lossy_link_to_the_controller_keep_the_broker_registered() -> None:
    """Loss is retransmitted, not dropped: at 30% loss on a broker's link to the controller
    its heartbeats arrive late (RTO 200 ms) but arrive; the broker stays unfenced."""
    sim = started(seed=9)
    sim.set_link_fault(1, CONTROLLER_ID, LinkFault(loss=0.3))
    fenced_samples = 0
    for _ in range(200):
        sim.run_for(50)
        fenced_samples += not sim.broker(1).ready
    assert sim.network.fault_stats.retransmitted > 10
    assert fenced_samples == 0
    wait_isr(sim, 0, {0, 1, 2})


def test_node_ids_are_checked() -> None:
    sim = SimCluster(2, seed=1)
    assert sim.link_host("controller") == CONTROLLER_HOST == sim.link_host(CONTROLLER_ID)
    assert sim.link_host("client") == "127.0.0.1" and sim.link_host("127.0.0.5") == "127.0.0.5"
    with pytest.raises(LinkFaultError, match=r"no broker 7; brokers: \[0, 1\]"):
        sim.set_link_fault(7, 0, LinkFault(delay_ms=1))
    with pytest.raises(LinkFaultError, match="'10.0.0.1' is not a node"):
        sim.set_node_fault("10.0.0.1", LinkFault(delay_ms=1))
    with pytest.raises(LinkFaultError, match="True is not a node"):
        sim.set_node_fault(True, LinkFault(delay_ms=1))
    with pytest.raises(LinkFaultError, match="two different hosts"):
        sim.set_link_fault(0, 0, LinkFault(delay_ms=1))
