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
from tests.cluster.controller.driver import ControllerDriver
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
    other = Controller(ControllerConfig.from_properties(1000, "127.0.0.9", 9093, "/other", {}), MemoryDisk(), clock,
                       VirtualScheduler(clock), random.Random(1))
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


def test_several_voters_without_a_quorum_refuse_to_start() -> None:
    props = {"controller.quorum.voters": "1000@127.0.0.9:9093,1001@127.0.0.8:9093"}
    clock = VirtualClock()
    controller = Controller(ControllerConfig.from_properties(1000, "127.0.0.9", 9093, "/c", props), MemoryDisk(), clock,
                            VirtualScheduler(clock), random.Random(1))
    with pytest.raises(ValueError, match="2 voters but this controller has no metadata quorum"):
        controller.start()


def test_the_single_controller_answers_in_the_handler(controller: ControllerDriver) -> None:
    """One voter on the MetadataLog path: every answer is given before the handler returns,
    with no virtual time passing, as before the quorum existed."""
    controller.start_brokers([0])
    answer = controller.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, build(request_class(ApiKey.ALLOCATE_PRODUCER_IDS, 0), broker_id=0,
                                                                    broker_epoch=controller.epochs[0]))
    assert answer.response is not None
    assert controller.result(ApiKey.ALLOCATE_PRODUCER_IDS, 0, answer).error_code == ErrorCode.none
    assert controller.controller.is_active and controller.controller.failovers == 1
