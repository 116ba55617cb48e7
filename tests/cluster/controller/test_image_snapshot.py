"""The controller's snapshot of its metadata image (QuorumListener.snapshot/load_snapshot):
the image a busy history built comes back identical from its bytes, the bytes are canonical,
a controller that loads a snapshot decides from it, and damaged bytes are refused by name."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from cluster.controller.config import ControllerConfig
from cluster.controller.core import Controller
from cluster.controller.image_snapshot import SnapshotError, copy_image, decode_image, encode_image
from cluster.metadata.image import MetadataImage
from cluster.protocol.codec import build, request_class
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.storage.disk import MemoryDisk
from cluster.controller.quorum_node import raft_factory
from tests.cluster.controller.driver import ControllerDriver, NoPeers
from tests.cluster.controller.test_metadata_log import busy_history, snapshot


def test_a_busy_image_round_trips_through_its_snapshot(controller: ControllerDriver) -> None:
    busy_history(controller)
    image = controller.controller.image
    data = encode_image(image)
    assert snapshot(decode_image(data)) == snapshot(image)
    # Canonical: the same image gives the same bytes, and so does one rebuilt from the log.
    rebuilt = MetadataImage()
    for offset, record in controller.records():
        rebuilt.apply(record, offset)
    assert encode_image(rebuilt) == data
    # A copy is independent of the original.
    copied = copy_image(image)
    copied.brokers.clear()
    assert image.brokers


def test_the_listener_snapshot_is_the_committed_image_and_loads_into_another_controller(controller: ControllerDriver) -> None:
    busy_history(controller)
    end_offset, data = controller.controller.snapshot()
    assert end_offset == controller.end_offset == controller.controller.image.next_offset
    clock = VirtualClock()
    config, disk, scheduler = ControllerConfig.from_properties(1000, "127.0.0.9", 9093, "/other", {}), MemoryDisk(), VirtualScheduler(clock)
    other = Controller(config, disk, clock, scheduler, random.Random(1), raft_factory(config, disk, clock, scheduler, random.Random(2), NoPeers()))
    other.load_snapshot(end_offset, data)
    assert snapshot(other.image) == snapshot(controller.controller.image)
    assert other.committed_image is other.image
    with pytest.raises(ValueError, match="ends at"):
        other.load_snapshot(end_offset + 1, data)


@pytest.mark.parametrize("data, problem", [(b"not json", "not JSON"), (b'{"version": 9}', "format 9"),
                                           (b'{"version": 1, "next_offset": 3}', "damaged")])
def test_damaged_snapshots_are_refused_naming_why(data: bytes, problem: str) -> None:
    with pytest.raises(SnapshotError, match=problem):
        decode_image(data)


def test_controller_quorum_voters_must_name_the_controller() -> None:
    props = {"controller.quorum.voters": "1000@127.0.0.9:9093,1001@127.0.0.8:9093"}
    config = ControllerConfig.from_properties(1001, "127.0.0.8", 9093, "/c", props)
    assert config.quorum_voters == props["controller.quorum.voters"]
    with pytest.raises(ValueError, match="does not name this controller"):
        ControllerConfig.from_properties(1002, "127.0.0.7", 9093, "/c", props)
    with pytest.raises(ValueError, match="not ID@HOST:PORT"):
        ControllerConfig.from_properties(1000, "127.0.0.9", 9093, "/c", {"controller.quorum.voters": "1000@nowhere"})


def test_answers_wait_for_the_commit_and_are_refused_when_leadership_ends_first(controller: ControllerDriver) -> None:
    """A decision is answered once the quorum has committed it (after the append's own
    event, even for a single voter), and NOT_CONTROLLER if the controller stops leading
    before that: the broker then asks the next active controller."""
    controller.start_brokers([0])
    body = build(request_class(ApiKey.ALLOCATE_PRODUCER_IDS, 0), broker_id=0, broker_epoch=controller.epochs[0])
    answer = controller.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, body)
    assert answer.response is None  # appended, not yet committed
    controller.run_until(lambda: answer.response is not None, 1_000, "the committed answer")
    assert controller.result(ApiKey.ALLOCATE_PRODUCER_IDS, 0, answer).error_code == ErrorCode.none
    pending = controller.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, body)
    assert pending.response is None
    controller.controller.shutdown()  # resigns before the commit
    refused = controller.result(ApiKey.ALLOCATE_PRODUCER_IDS, 0, pending)
    assert refused.error_code == ErrorCode.not_controller and refused.producer_id_start == -1
    assert not controller.controller.is_active
