"""A broker behind the active controller's log start (a snapshot moved it) loads the snapshot
with FetchSnapshot, then follows the log from the snapshot's end, as KRaft's observers do.

Brokers keep metadata in memory only, so every restarted broker starts from offset 0: with a
small snapshot threshold the controllers' log start has moved by then, and before the fix the
broker was refused OFFSET_OUT_OF_RANGE forever."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.broker import controller_client
from cluster.metadata.image import MetadataImage
from cluster.sim.cluster import SimCluster
from tests.cluster.sim.sim_requests import create_topic, partition_info, produce_result, read_all, send_produce

# A snapshot after every ~512 bytes of new committed metadata: a few topics move the log start.
SNAPSHOT_EVERY = {"metadata.log.max.record.bytes.between.snapshots": "512"}


def start(seed: int, controllers: int, snapshots: bool = True) -> SimCluster:
    sim = SimCluster(3, seed=seed, controllers=controllers,
                     controller_properties={1000 + i: dict(SNAPSHOT_EVERY if snapshots else {}) for i in range(controllers)})
    sim.run_until(lambda: sim.controller is not None and all(
        b.controller_client.registered and not b.controller_client.fenced for b in sim.running_brokers()),
        20_000, what="a controller active and every broker unfenced")
    return sim


def same_metadata(a: MetadataImage, b: MetadataImage) -> bool:
    return ({n: (t.topic_id, dict(t.configs), dict(t.partitions)) for n, t in a.topics_by_name.items()}
            == {n: (t.topic_id, dict(t.configs), dict(t.partitions)) for n, t in b.topics_by_name.items()}
            and a.brokers == b.brokers)


def log_start(sim: SimCluster) -> int:
    active = sim.controller
    assert active is not None and active.quorum is not None
    return int(active.quorum.log.start_offset)  # type: ignore[attr-defined]


def make_topics(sim: SimCluster, names: list[str]) -> None:
    for name in names:
        assert create_topic(sim, 0, name, partitions=2, replication_factor=3).error_code == ErrorCode.none


def produce_replicated(sim: SimCluster, image: MetadataImage, broker_id: int, topic: str) -> None:
    """An acks=all write to partition 0 of `topic` through its leader reaches `broker_id`'s
    copy (the broker follows the leader its image names)."""
    state = image.partition(topic, 0)
    assert state is not None and broker_id in state.replicas
    call = send_produce(sim, state.leader, topic, 0, [b"after-snapshot"])
    sim.run_until(lambda: call.done, 10_000, what="the produce answer")
    error, base = produce_result(call)
    assert error == ErrorCode.none, error
    assert (base, b"after-snapshot") in read_all(sim, state.leader, topic, 0)
    sim.run_until(lambda: (p := sim.broker(broker_id).partition(topic, 0)) is not None and p.log_end_offset > base, 10_000,
                  what=f"broker {broker_id} replicated the write")


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 100], ids=["one-piece", "in-100-byte-pieces"])
def test_restarted_broker_loads_the_snapshot_and_follows(chunk_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_client, "SNAPSHOT_CHUNK_BYTES", chunk_bytes)
    sim = start(seed=5, controllers=3)
    make_topics(sim, [f"a{i}" for i in range(6)])
    sim.run_until(lambda: log_start(sim) > 0, 10_000, what="the active controller's log start moved by a snapshot")
    restarted = sim.restart(2)
    assert restarted.controller_client.image.next_offset == 0
    sim.run_until(lambda: restarted.controller_client.registered and not restarted.controller_client.fenced, 20_000,
                  what="the restarted broker registered and unfenced")
    active = sim.controller
    assert active is not None
    sim.run_until(lambda: same_metadata(restarted.controller_client.image, active.committed_image), 10_000,
                  what="the restarted broker's image equals the controller's")
    assert restarted.controller_client.snapshots_loaded >= 1
    assert restarted.controller_client.reloads == 0
    # Metadata after the snapshot reaches it through the log.
    make_topics(sim, ["b0"])
    sim.run_until(lambda: restarted.controller_client.image.topic("b0") is not None, 10_000, what="topic b0 on the restarted broker")
    for topic in [f"a{i}" for i in range(6)] + ["b0"]:
        assert restarted.controller_client.image.topic(topic) is not None
    # It answers Metadata with the controller's leaders and replicates new writes.
    for topic in [f"a{i}" for i in range(6)]:
        for index in range(2):
            state = active.committed_image.partition(topic, index)
            info = partition_info(sim, 2, topic, index)
            assert state is not None and info is not None and (info.leader, info.leader_epoch) == (state.leader, state.leader_epoch)
    produce_replicated(sim, active.committed_image, 2, "b0")


@pytest.mark.parametrize("snapshots", [False, True], ids=["from-offset-0", "from-a-snapshot"])
def test_broker_past_the_leaders_log_end_reloads_quietly(snapshots: bool, caplog: pytest.LogCaptureFixture) -> None:
    """A broker whose metadata position is past the committed log end (only after unsafe
    metadata loss) rebuilds its image from the controller and swaps it in once caught up,
    instead of retrying OFFSET_OUT_OF_RANGE every 100 ms."""
    sim = start(seed=7, controllers=1, snapshots=snapshots)
    make_topics(sim, ["t0", "t1"])
    broker = sim.broker(1)
    client = broker.controller_client
    active = sim.controller
    assert active is not None
    sim.run_until(lambda: same_metadata(client.image, active.committed_image), 5_000, what="broker 1 caught up")
    loaded_before = client.snapshots_loaded
    # Pretend this broker applied records the controller never committed.
    ahead = client.image.next_offset + 50
    client.image.next_offset = ahead
    client._fetch_offset = ahead  # noqa: SLF001 - the position a lost metadata log leaves behind
    sim.run_until(lambda: client.reloads >= 1 and client.image.next_offset <= active.committed_image.next_offset, 5_000,
                  what="broker 1 reloaded its metadata")
    assert same_metadata(client.image, active.committed_image)
    assert (client.snapshots_loaded > loaded_before) == snapshots
    make_topics(sim, ["t2"])
    sim.run_until(lambda: client.image.topic("t2") is not None, 5_000, what="t2 on broker 1")
    assert client.reloads == 1
    rebuild_warnings = [r for r in caplog.records if "past the active controller's committed log end" in r.getMessage()]
    assert len(rebuild_warnings) == 1
    assert not [r for r in caplog.records if "bad metadata" in r.getMessage()]
