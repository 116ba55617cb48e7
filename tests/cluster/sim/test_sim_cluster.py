"""The whole cluster in simulation: the real controller and broker cores on a virtual clock,
crashes, pauses and partitions injected deterministically. Same seed, same run."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, read_all, req, send_produce

TOPIC = "ledger"


def wait_leader(sim: SimCluster, ask: int, *, not_: int | None = None, timeout_ms: float = 20_000) -> int:
    found: list[int] = []

    def ready() -> bool:
        info = partition_info(sim, ask, TOPIC)
        if info is not None and info.leader >= 0 and info.leader != not_:
            found.append(info.leader)
            return True
        return False

    sim.run_until(ready, timeout_ms, step_ms=50, what=f"a leader of {TOPIC}-0 other than {not_}, as broker {ask} sees it")
    return found[-1]


def wait_isr(sim: SimCluster, ask: int, isr: set[int], timeout_ms: float = 30_000) -> None:
    sim.run_until(lambda: (info := partition_info(sim, ask, TOPIC)) is not None and set(info.isr) == isr, timeout_ms, step_ms=50,
                  what=f"ISR {sorted(isr)} as broker {ask} sees it")


def produce_acked(sim: SimCluster, values: list[bytes], tries_ms: float = 20_000) -> int:
    """Produce with acks=all to whoever leads, retrying on retriable errors; base offset."""
    waited = 0.0
    while waited < tries_ms:
        leader = wait_leader(sim, next(b for b in sim.broker_ids if sim.is_running(b)))
        call = send_produce(sim, leader, TOPIC, 0, values, acks=-1)
        sim.run_until(lambda: call.done, 20_000, step_ms=1, what="a produce answer")
        if call.result is not None and call.result.ok:
            error, offset = produce_result(call)
            if error == ErrorCode.none:
                return offset
        sim.run_for(100)
        waited += 100
    raise AssertionError(f"no acks=all produce succeeded within {tries_ms} simulated ms")


def started(seed: int = 1, **props: str) -> SimCluster:
    sim = SimCluster(3, {"min.insync.replicas": "2", **props}, seed=seed)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers registered and unfenced")
    result = create_topic(sim, 0, TOPIC, 1, 3)
    assert result.error_code == ErrorCode.none, result
    wait_isr(sim, 0, {0, 1, 2})
    return sim


def test_a_replicated_topic_has_one_leader_and_every_replica_in_sync() -> None:
    sim = started()
    views = [partition_info(sim, b, TOPIC) for b in sim.broker_ids]
    assert all(v is not None for v in views)
    assert len({(v.leader, v.leader_epoch) for v in views if v}) == 1
    assert all(set(v.replicas) == {0, 1, 2} for v in views if v)


def test_leader_crash_fails_over_without_losing_acknowledged_writes() -> None:
    sim = started()
    acked = [produce_acked(sim, [f"v{i}".encode()]) for i in range(20)]
    assert acked == sorted(acked)
    old = wait_leader(sim, 0)
    sim.kill(old)
    survivor = next(b for b in sim.broker_ids if b != old)
    new = wait_leader(sim, survivor, not_=old)
    for i in range(20, 40):
        produce_acked(sim, [f"v{i}".encode()])
    sim.start_broker(old)
    wait_isr(sim, survivor, {0, 1, 2})
    values = [v for _, v in read_all(sim, new, TOPIC)]
    assert values == [f"v{i}".encode() for i in range(40)]


def test_a_paused_leader_is_fenced_and_cannot_commit_after_it_resumes() -> None:
    sim = started()
    produce_acked(sim, [b"before"])
    zombie = wait_leader(sim, 0)
    survivor = next(b for b in sim.broker_ids if b != zombie)
    sim.pause(zombie)
    new = wait_leader(sim, survivor, not_=zombie)
    sim.resume(zombie)
    call = send_produce(sim, zombie, TOPIC, 0, [b"zombie"], acks=-1)
    sim.run_until(lambda: call.done, 30_000, step_ms=1, what="the zombie's answer")
    if call.result is not None and call.result.ok:
        error, _ = produce_result(call)
        assert error != ErrorCode.none, "the fenced leader acknowledged an acks=all write"
    produce_acked(sim, [b"after"])
    values = [v for _, v in read_all(sim, wait_leader(sim, survivor), TOPIC)]
    assert b"zombie" not in values and values[0] == b"before" and values[-1] == b"after"
    assert new != zombie


def test_the_same_seed_gives_the_same_run() -> None:
    def run(seed: int) -> tuple[list[tuple[int, bytes]], int]:
        sim = started(seed)
        for i in range(10):
            produce_acked(sim, [f"v{i}".encode()])
        leader = wait_leader(sim, 0)
        sim.kill(leader)
        survivor = next(b for b in sim.broker_ids if b != leader)
        wait_leader(sim, survivor, not_=leader)
        for i in range(10, 20):
            produce_acked(sim, [f"v{i}".encode()])
        return read_all(sim, wait_leader(sim, survivor), TOPIC), sim.clock.monotonic_ns()

    assert run(7) == run(7)


def list_latest(sim: SimCluster, broker: int) -> tuple[ErrorCode, int]:
    """ListOffsets (latest) as a consumer asks it: (error, offset)."""
    part = req(ApiKey.LIST_OFFSETS, 7, "ListOffsetsPartition")(partition_index=0, current_leader_epoch=-1, timestamp=-1)
    topic = req(ApiKey.LIST_OFFSETS, 7, "ListOffsetsTopic")(name=TOPIC, partitions=(part,))
    body = sim.call(broker, ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=(topic,))
    answer = body.topics[0].partitions[0]
    return answer.error_code, int(answer.offset)


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available() -> None:
    # KIP-207. One follower stalls (so the HWM stays put); the leader takes acks=1 writes the
    # other follower copies, then dies. That follower leads with log end 20 but the HWM it
    # had as a follower, 10: "latest" would go backwards, so it is not available until the
    # HWM reaches the start of the new epoch.
    sim = started()
    for i in range(10):
        produce_acked(sim, [f"v{i}".encode()])
    old = wait_leader(sim, 0)
    stalled, heir = [b for b in sim.broker_ids if b != old]
    sim.run_until(lambda: sim.broker(heir).partition(TOPIC, 0).high_watermark == 10, 5_000, what="the heir's HWM at 10")
    sim.pause(stalled)
    call = send_produce(sim, old, TOPIC, 0, [f"w{i}".encode() for i in range(10)], acks=1)
    sim.run_until(lambda: call.done, 5_000, what="the acks=1 answer")
    assert produce_result(call) == (ErrorCode.none, 10)
    sim.run_until(lambda: sim.broker(heir).partition(TOPIC, 0).log_end_offset == 20, 5_000, what="the heir copying the writes")
    sim.kill(old)
    assert wait_leader(sim, heir, not_=old) == heir
    partition = sim.broker(heir).partition(TOPIC, 0)
    assert (partition.epoch_start_offset, partition.high_watermark) == (20, 10)
    assert list_latest(sim, heir) == (ErrorCode.offset_not_available, -1)
    sim.resume(stalled)
    sim.run_until(lambda: list_latest(sim, heir) == (ErrorCode.none, 20), 20_000, step_ms=50,
                  what="latest offset 20 once the resumed follower rejoins")
