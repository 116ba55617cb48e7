"""Timers and wall-clock logic of the core: the flush.ms scheduler, time-based retention
(wall clock, so a skewed clock moves it), and topic deletion waking parked fetches."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver
from tests.cluster.broker.requests import batch, create_topic, list_offset, metadata, produce, send_fetch


def test_flush_interval_ms_makes_data_durable_on_the_scheduler() -> None:
    driver = CoreDriver()
    create_topic(driver, "t", 1, {"flush.ms": "1000"})
    produce(driver, "t", 0, batch([b"a"]))
    driver.scheduler.advance(1200)
    produce(driver, "t", 0, batch([b"b"]))  # not yet due for a flush
    driver.restart(crash=True)
    assert driver.broker.partition("t", 0).log_end_offset == 1


def _retention_topic(driver: CoreDriver) -> None:
    # Tiny segments so that every batch rolls a new one; retention deletes whole segments.
    create_topic(driver, "r", 1, {"retention.ms": "60000", "segment.bytes": "100"})
    now = driver.clock.wall_ms()
    for i in range(3):
        produce(driver, "r", 0, batch([b"x" * 80], timestamp_ms=now))


def test_time_retention_runs_on_the_check_interval() -> None:
    driver = CoreDriver({"log.retention.check.interval.ms": "1000"})
    _retention_topic(driver)
    driver.scheduler.advance(30_000)
    assert list_offset(driver, "r", 0, -2).offset == 0
    driver.scheduler.advance(31_000)
    start = list_offset(driver, "r", 0, -2).offset
    assert start > 0  # old segments gone (the active one always stays)
    assert send_fetch(driver, "r", 0, 0).body.responses[0].partitions[0].error_code is ErrorCode.offset_out_of_range


def test_a_wall_clock_jump_alone_triggers_retention() -> None:
    driver = CoreDriver({"log.retention.check.interval.ms": "1000"})
    _retention_topic(driver)
    driver.clock.wall_offset_ms += 120_000  # skew: wall time leaps, monotonic time does not
    driver.scheduler.advance(1000)
    assert list_offset(driver, "r", 0, -2).offset > 0


def test_delete_topic_wakes_parked_fetches_and_forgets_the_topic() -> None:
    driver = CoreDriver()
    create_topic(driver, "doomed", 1)
    parked = send_fetch(driver, "doomed", 0, 0, max_wait_ms=10_000, version=12)
    body = driver.call(ApiKey.DELETE_TOPICS, 4, topic_names=("doomed", "never-was"), timeout=datetime.timedelta(seconds=5))
    assert [(r.name, r.error_code) for r in body.responses] == [("doomed", ErrorCode.none), ("never-was", ErrorCode.unknown_topic_or_partition)]
    assert parked.done and parked.body.responses[0].partitions[0].error_code is ErrorCode.unknown_topic_or_partition
    assert metadata(driver, ["doomed"], auto_create=False).topics[0].error_code is ErrorCode.unknown_topic_or_partition
    driver.await_coordinator()  # FindCoordinator creates the offsets topic
    internal = driver.call(ApiKey.DELETE_TOPICS, 4, topic_names=("__consumer_offsets",), timeout=datetime.timedelta(seconds=5))
    assert internal.responses[0].error_code is ErrorCode.topic_deletion_disabled
    create_topic(driver, "doomed", 2)  # the name is free again
    assert len(metadata(driver, ["doomed"]).topics[0].partitions) == 2
