"""The durable metadata log (the quorum's, with one voter): the controller's restart replays it
to the identical image, a crash loses no decision that was answered, a torn tail is cut, and
a corrupt record stops the start naming its offset."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from cluster.quorum.log import LOG_DIR_NAME
from cluster.storage.config import LogConfig
from cluster.storage.log import PartitionLog
from cluster.metadata.image import MetadataImage
from cluster.metadata.records import RemoveTopicRecord, encode_record
from cluster.protocol.records import Record, build_batch
from tests.cluster.controller.driver import DATA_DIR, SESSION_TIMEOUT_MS, ControllerDriver


def snapshot(image: MetadataImage) -> tuple:
    return (image.next_offset, image.next_producer_id, dict(image.brokers),
            {name: (t.topic_id, dict(t.configs), dict(t.partitions)) for name, t in image.topics_by_name.items()})


def busy_history(controller: ControllerDriver) -> None:
    """Registrations, topics, ISR changes, a fencing with elections, a deletion."""
    controller.start_brokers([0, 1, 2])
    controller.create_topic("a", partitions=3, replication_factor=3)
    controller.create_topic("b", partitions=2, replication_factor=2, configs={"min.insync.replicas": "2"})
    controller.create_topic("gone", partitions=1, replication_factor=1)
    state = controller.partition("a", 0)
    assert controller.alter_partition(state, [state.leader])[0] == ErrorCode.none
    controller.keep_alive([0, 1], SESSION_TIMEOUT_MS + 500)
    assert [r.error_code for r in controller.delete_topics(["gone"])] == [ErrorCode.none]


@pytest.mark.parametrize("crash", [False, True])
def test_restart_replays_to_the_identical_image(controller: ControllerDriver, crash: bool) -> None:
    busy_history(controller)
    records_before = controller.records()
    image_before = snapshot(controller.controller.image)
    controller.restart(crash=crash)
    assert controller.records() == records_before
    assert snapshot(controller.controller.image) == image_before
    # And the same image is what a broker builds by applying the fetched records in order.
    rebuilt = MetadataImage()
    for offset, record in records_before:
        rebuilt.apply(record, offset)
    assert snapshot(rebuilt) == image_before


def test_every_answered_decision_survives_a_crash(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    answer = controller.create_topic("t", partitions=2, replication_factor=2, version=7)
    assert answer.error_code == ErrorCode.none
    # Every append was fsynced before the answer: a crash now has nothing to drop.
    assert controller.disk.unflushed_bytes() == 0
    controller.restart(crash=True)
    topic = controller.controller.image.topic("t")
    assert topic is not None and topic.topic_id == answer.topic_id and topic.num_partitions == 2


def test_torn_tail_is_cut_on_start(controller: ControllerDriver) -> None:
    controller.start_brokers([0])
    controller.create_topic("t", partitions=1, replication_factor=1)
    end = controller.end_offset
    image_before = snapshot(controller.controller.image)
    # A decision being written when the power went: half its batch reached the disk unsynced.
    topic = controller.controller.image.topic("t")
    batch = build_batch([Record(None, encode_record(RemoveTopicRecord(str(topic.topic_id))))], base_offset=end, timestamp_ms=0)
    handle_path = f"{DATA_DIR}/{LOG_DIR_NAME}"
    segment = sorted(n for n in controller.disk.listdir(handle_path) if n.endswith(".log"))[-1]
    handle = controller.disk.open_append(f"{handle_path}/{segment}")
    handle.write(batch[: len(batch) // 2])
    handle.fsync()
    handle.close()
    controller.restart(crash=True)
    # Cut at `end`, where the restarted controller's new epoch begins (its leader-change
    # record, which changes no metadata, takes that offset).
    assert controller.end_offset == end + 1
    assert snapshot(controller.controller.image)[1:] == image_before[1:]
    # The log goes on from the cut: the next decision lands right after the leader change.
    assert controller.create_topic("u", partitions=1, replication_factor=1).error_code == ErrorCode.none
    assert controller.records(end)[0][0] == end + 1
    controller.restart(crash=True)
    assert controller.controller.image.topic("u") is not None


def test_corrupt_record_halts_the_restarted_controller_naming_its_offset(controller: ControllerDriver) -> None:
    controller.start_brokers([0])
    epoch = controller.controller.epoch
    controller.controller.shutdown()
    # A batch whose checksum is right but whose record is not a metadata record, in the
    # epoch that wrote the log so far (as a leader would have appended it).
    log = PartitionLog.open(controller.disk, f"{DATA_DIR}/{LOG_DIR_NAME}", LogConfig(retention_ms=None), now_ms=0)
    bad_offset = log.log_end_offset
    log.append(build_batch([Record(None, b"{\"type\": \"no-such-record\"}")], base_offset=bad_offset, timestamp_ms=0,
                           partition_leader_epoch=epoch), now_ms=0)
    log.flush()
    log.close()
    # Replaying it is a fatal fault (as in Kafka's controller): the restarted controller halts
    # through its runtime hook instead of leading with an image that is not its log's.
    from cluster.controller.core import Controller
    from cluster.controller.quorum_node import quorum_versions, raft_factory
    from tests.cluster.controller.driver import IncarnationScheduler, NoPeers

    controller.disk.crash()
    assert controller._node is not None
    controller._node.alive = False
    node = IncarnationScheduler(controller.scheduler)
    config = controller.controller.config
    rng = random.Random(controller.seed + 1)
    factory = raft_factory(config, controller.disk, controller.clock, node, random.Random(rng.getrandbits(64)), NoPeers())
    restarted = Controller(config, controller.disk, controller.clock, node, rng, factory, quorum_versions())
    halts: list[str] = []
    restarted.on_fatal = halts.append
    restarted.start()
    controller.run_until(lambda: bool(halts), 5_000, "the restarted controller halting")
    (reason,) = halts
    assert reason.startswith(f"committed metadata at offset {bad_offset} ") and "no-such-record" in reason
    assert restarted.halted == reason and not restarted.is_active


def test_producer_id_blocks_are_disjoint_across_restarts(controller: ControllerDriver) -> None:
    controller.start_brokers([0, 1])
    blocks = []
    for round_ in range(3):
        for broker_id in (0, 1):
            body = controller.allocate_producer_ids(broker_id)
            assert body.error_code == ErrorCode.none and body.producer_id_len == 1000
            blocks.append(range(body.producer_id_start, body.producer_id_start + body.producer_id_len))
        controller.restart(crash=round_ % 2 == 1)
    ids = [i for block in blocks for i in block]
    assert len(ids) == len(set(ids)) == 6000
    assert controller.allocate_producer_ids(0, epoch=controller.epochs[0] + 5).error_code == ErrorCode.stale_broker_epoch


def test_random_histories_replay_identically(make_controller) -> None:
    """Seeded random interleavings of registrations, topic creation, ISR changes, fencing and
    restarts: after each restart the image equals the one before it."""
    for seed in range(4):
        rng = random.Random(seed)
        controller = make_controller(seed=seed)
        controller.start_brokers([0, 1, 2, 3])
        live = {0, 1, 2, 3}
        for step in range(12):
            action = rng.choice(["topic", "shrink", "expire", "restart", "crash"])
            if action == "topic":
                controller.create_topic(f"t{step}", partitions=rng.randint(1, 4), replication_factor=rng.randint(1, len(live)))
            elif action == "shrink":
                topics = sorted(controller.controller.image.topics_by_name)
                if topics:
                    state = controller.partition(rng.choice(topics))
                    if state.leader in live:
                        controller.alter_partition(state, [state.leader])
            elif action == "expire" and len(live) > 1:
                live.discard(rng.choice(sorted(live)))
                controller.keep_alive(sorted(live), SESSION_TIMEOUT_MS + 500)
            else:
                before = snapshot(controller.controller.image)
                controller.restart(crash=action == "crash")
                assert snapshot(controller.controller.image) == before, (seed, step)
