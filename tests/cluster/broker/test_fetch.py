"""Fetch, ListOffsets and OffsetForLeaderEpoch through the sans-I/O core, with virtual time."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import batch, create_topic, list_offset, offset_for_leader_epoch, produce, send_fetch


def _partition(body):
    return body.responses[0].partitions[0]


def test_fetch_returns_whole_batches_and_offsets() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    produce(driver, "t", 0, batch([b"a", b"b"]))
    produce(driver, "t", 0, batch([b"c"]))
    p = _partition(send_fetch(driver, "t", 0, 1).body)
    assert p.error_code is ErrorCode.none
    assert (p.high_watermark, p.last_stable_offset, p.log_start_offset) == (3, 3, 0)
    # The batch holding offset 1 starts at 0: whole batches, the client skips what it did not ask for.
    assert p.records[:8] == (0).to_bytes(8, "big")
    assert len(p.records) == sum(len(b) for b in driver.broker.partition("t", 0).read(0, 10**6))


def test_empty_fetch_has_empty_records_not_null() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    p = _partition(send_fetch(driver, "t", 0, 0).body)
    assert p.error_code is ErrorCode.none and p.records == b""


def test_long_poll_is_woken_by_an_append() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    pending = send_fetch(driver, "t", 0, 0, max_wait_ms=500)
    assert not pending.done
    driver.scheduler.advance(100)
    assert not pending.done
    produce(driver, "t", 0, batch([b"wake"]))  # re-checked once the produce is handled
    assert pending.done and b"wake" in _partition(pending.body).records


def test_long_poll_times_out_with_an_empty_answer() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    pending = send_fetch(driver, "t", 0, 0, max_wait_ms=500)
    driver.scheduler.advance(499)
    assert not pending.done
    driver.scheduler.advance(1)
    assert pending.done and _partition(pending.body).records == b""
    produce(driver, "t", 0, batch([b"late"]))  # a completed fetch is not answered twice


def test_min_bytes_waits_for_enough_data() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    pending = send_fetch(driver, "t", 0, 0, max_wait_ms=1000, min_bytes=500)
    produce(driver, "t", 0, batch([b"small"]))
    assert not pending.done
    produce(driver, "t", 0, batch([b"x" * 600]))
    assert pending.done


def test_fetch_errors() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    produce(driver, "t", 0, batch([b"a"]))
    assert _partition(send_fetch(driver, "t", 0, 5).body).error_code is ErrorCode.offset_out_of_range
    assert _partition(send_fetch(driver, "t", 0, 0, current_leader_epoch=7).body).error_code is ErrorCode.unknown_leader_epoch
    # A restart: the controlled shutdown leaves the partition leaderless (epoch 1), and the
    # broker's return elects it again (epoch 2), as KRaft does.
    driver.restart()
    assert _partition(send_fetch(driver, "t", 0, 0, current_leader_epoch=0).body).error_code is ErrorCode.fenced_leader_epoch
    assert _partition(send_fetch(driver, "t", 0, 0, current_leader_epoch=1).body).error_code is ErrorCode.fenced_leader_epoch
    assert _partition(send_fetch(driver, "t", 0, 0, current_leader_epoch=2).body).error_code is ErrorCode.none
    missing = send_fetch(driver, "t", 0, 0, by_id=uuid.UUID(int=42)).body
    assert missing.responses[0].topic_id == uuid.UUID(int=42)
    assert _partition(missing).error_code is ErrorCode.unknown_topic_id
    assert _partition(send_fetch(driver, "nope", 0, 0, version=12).body).error_code is ErrorCode.unknown_topic_or_partition


def test_first_partition_gets_a_batch_above_the_byte_limits() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    produce(driver, "t", 0, batch([b"x" * 5000]))
    p = _partition(send_fetch(driver, "t", 0, 0, max_bytes=100, partition_max_bytes=100).body)
    assert len(p.records) > 5000


def test_list_offsets() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    produce(driver, "t", 0, batch([b"a", b"b"], timestamp_ms=1000))
    produce(driver, "t", 0, batch([b"c"], timestamp_ms=3000))
    produce(driver, "t", 0, batch([b"d"], timestamp_ms=2000))
    assert list_offset(driver, "t", 0, -1).offset == 4
    assert list_offset(driver, "t", 0, -2).offset == 0
    latest_ts = list_offset(driver, "t", 0, -3)
    assert (latest_ts.offset, latest_ts.timestamp) == (2, 3000)
    assert list_offset(driver, "t", 0, 1500).offset == 2
    assert list_offset(driver, "t", 0, 9999).offset == -1
    assert list_offset(driver, "t", 9, -1).error_code is ErrorCode.unknown_topic_or_partition


def test_offset_for_leader_epoch_uses_real_epochs() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1)
    produce(driver, "t", 0, batch([b"a", b"b"]))
    driver.restart()
    produce(driver, "t", 0, batch([b"c"]))
    old = offset_for_leader_epoch(driver, "t", 0, 0)
    assert (old.error_code, old.leader_epoch, old.end_offset) == (ErrorCode.none, 0, 2)
    # Epoch 1 (leaderless during the restart) wrote nothing: it answers epoch 0's end.
    between = offset_for_leader_epoch(driver, "t", 0, 1, current_leader_epoch=2)
    assert (between.leader_epoch, between.end_offset) == (0, 2)
    current = offset_for_leader_epoch(driver, "t", 0, 2, current_leader_epoch=2)
    assert (current.leader_epoch, current.end_offset) == (2, 3)
    assert offset_for_leader_epoch(driver, "t", 0, 2, current_leader_epoch=0).error_code is ErrorCode.fenced_leader_epoch
