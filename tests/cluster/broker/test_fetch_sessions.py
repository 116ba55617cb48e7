"""Incremental fetch sessions (KIP-227) on one broker core: a full fetch opens a session, an
incremental one names only what changed and is answered with only what changed, session
errors are top-level errors, a full fetch closes and replaces a session, the cache evicts
by Kafka's rules, and the follower's session handler plans requests and recovers."""

from __future__ import annotations

import datetime
import random
from typing import Any

from kio.schema.errors import ErrorCode

from cluster.broker.fetch_sessions import FetchPlan, FetchSessionCache, FetchSessionHandler, PartitionFetchState, SessionPartition, next_epoch
from cluster.protocol.versions import ApiKey
from tests.cluster.broker.core_driver import CoreDriver, Pending
from tests.cluster.broker.requests import batch, create_topic, produce, send_fetch, topic_id

VERSION = 16
TOPIC = "s"


def session_fetch(driver: CoreDriver, session_id: int, epoch: int, offsets: dict[int, int], *, forgotten: tuple[int, ...] = (),
                  max_wait_ms: int = 0) -> Pending:
    """A consumer's Fetch on `session_id` at `epoch`, naming `offsets` (partition -> fetch offset)."""
    part_cls = driver.request_class(ApiKey.FETCH, VERSION, "FetchPartition")
    topic_cls = driver.request_class(ApiKey.FETCH, VERSION, "FetchTopic")
    forgotten_cls = driver.request_class(ApiKey.FETCH, VERSION, "ForgottenTopic")
    the_id = topic_id(driver, TOPIC)
    parts = tuple(part_cls(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=1 << 20) for p, o in offsets.items())
    topics = (topic_cls(topic_id=the_id, partitions=parts),) if parts else ()
    forgets = (forgotten_cls(topic_id=the_id, partitions=forgotten),) if forgotten else ()
    return driver.send(ApiKey.FETCH, VERSION, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
                       max_bytes=50 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch, topics=topics,
                       forgotten_topics_data=forgets, rack_id="", cluster_id=None,
                       replica_state=driver.request_class(ApiKey.FETCH, VERSION, "ReplicaState")())


def answered(pending: Pending) -> Any:
    assert pending.done, "no answer yet"
    return pending.body


def partitions_of(body: Any) -> dict[int, Any]:
    return {int(p.partition_index): p for topic in body.responses for p in topic.partitions}


def started(partitions: int = 3, **props: str) -> CoreDriver:
    driver = CoreDriver(props)
    create_topic(driver, TOPIC, partitions)
    return driver


def test_a_full_fetch_opens_a_session_and_incremental_ones_carry_only_what_changed() -> None:
    driver = started()
    for p in range(3):
        produce(driver, TOPIC, p, batch([f"first-{p}".encode()]))
    full = answered(session_fetch(driver, 0, 0, {0: 0, 1: 0, 2: 0}))
    assert full.error_code is ErrorCode.none and full.session_id != 0
    assert sorted(partitions_of(full)) == [0, 1, 2]
    assert all(p.records for p in partitions_of(full).values())
    session_id = int(full.session_id)

    # The consumer read one record of each: it names the new offsets; nothing more to read,
    # the HWMs were already sent: an empty answer.
    second = answered(session_fetch(driver, session_id, 1, {0: 1, 1: 1, 2: 1}))
    assert second.error_code is ErrorCode.none and second.session_id == session_id
    assert partitions_of(second) == {}

    # One partition changes: the next fetch names nothing, and gets that partition alone.
    produce(driver, TOPIC, 1, batch([b"second"]))
    third = answered(session_fetch(driver, session_id, 2, {}))
    assert list(partitions_of(third)) == [1]
    only = partitions_of(third)[1]
    assert b"second" in bytes(only.records) and only.high_watermark == 2

    # Nothing changed since: nothing to say, even though the fetch names no partition.
    assert partitions_of(answered(session_fetch(driver, session_id, 3, {1: 2}))) == {}


def test_a_parked_incremental_fetch_wakes_on_its_partitions_and_answers_with_the_changed_one() -> None:
    driver = started()
    session_id = int(answered(session_fetch(driver, 0, 0, {0: 0, 1: 0, 2: 0})).session_id)
    parked = session_fetch(driver, session_id, 1, {}, max_wait_ms=1000)
    driver.scheduler.advance(10)
    assert not parked.done
    produce(driver, TOPIC, 2, batch([b"wake"]))
    body = answered(parked)
    assert list(partitions_of(body)) == [2] and b"wake" in bytes(partitions_of(body)[2].records)


def test_two_appends_in_one_turn_complete_a_parked_fetch_once_with_both() -> None:
    driver = started()
    parked = send_fetch(driver, TOPIC, 0, 0, max_wait_ms=1000)
    # Outside a request (as a follower's or coordinator's own appends) the re-check waits
    # for the next scheduler turn: both appends come before it, one answer has both.
    driver.broker.partition(TOPIC, 0).append_as_leader(batch([b"one"]), now_ms=driver.clock.wall_ms())
    driver.broker.partition(TOPIC, 0).append_as_leader(batch([b"two"]), now_ms=driver.clock.wall_ms())
    assert not parked.done
    driver.scheduler.advance(0)
    records = bytes(answered(parked).responses[0].partitions[0].records)
    assert b"one" in records and b"two" in records


def test_session_errors_are_top_level_and_a_full_fetch_replaces_the_session() -> None:
    driver = started()
    session_id = int(answered(session_fetch(driver, 0, 0, {0: 0, 1: 0})).session_id)
    wrong_epoch = answered(session_fetch(driver, session_id, 5, {}))
    assert wrong_epoch.error_code is ErrorCode.invalid_fetch_session_epoch and wrong_epoch.responses == ()
    unknown = answered(session_fetch(driver, session_id + 1, 1, {}))
    assert unknown.error_code is ErrorCode.fetch_session_id_not_found and unknown.responses == ()
    # The session survives a refused request: epoch 1 is still the one it expects.
    assert answered(session_fetch(driver, session_id, 1, {})).error_code is ErrorCode.none

    # (id, 0): close it and open a new one, answered in full.
    renewed = answered(session_fetch(driver, session_id, 0, {0: 0, 1: 0, 2: 0}))
    assert renewed.error_code is ErrorCode.none and renewed.session_id not in (0, session_id)
    assert sorted(partitions_of(renewed)) == [0, 1, 2]
    assert answered(session_fetch(driver, session_id, 2, {})).error_code is ErrorCode.fetch_session_id_not_found
    # (id, -1): close it and answer sessionless.
    closed = answered(session_fetch(driver, int(renewed.session_id), -1, {0: 0}))
    assert closed.error_code is ErrorCode.none and closed.session_id == 0 and list(partitions_of(closed)) == [0]
    assert len(driver.broker.fetch_sessions) == 0


def test_forgotten_partitions_leave_the_session() -> None:
    driver = started()
    session_id = int(answered(session_fetch(driver, 0, 0, {0: 0, 1: 0, 2: 0})).session_id)
    assert partitions_of(answered(session_fetch(driver, session_id, 1, {}, forgotten=(1,)))) == {}
    produce(driver, TOPIC, 1, batch([b"unwatched"]))
    assert partitions_of(answered(session_fetch(driver, session_id, 2, {}))) == {}
    produce(driver, TOPIC, 0, batch([b"watched"]))
    assert list(partitions_of(answered(session_fetch(driver, session_id, 3, {})))) == [0]


def test_sessionless_fetches_work_as_before() -> None:
    driver = started()
    produce(driver, TOPIC, 0, batch([b"plain"]))
    body = answered(send_fetch(driver, TOPIC, 0, 0))
    assert body.session_id == 0 and b"plain" in bytes(body.responses[0].partitions[0].records)
    assert len(driver.broker.fetch_sessions) == 0


def test_a_full_cache_answers_sessionless_and_evicts_by_kafkas_rules() -> None:
    driver = started(**{"max.incremental.fetch.session.cache.slots": "1"})
    first = int(answered(session_fetch(driver, 0, 0, {0: 0})).session_id)
    # Not larger than the one there: no session, a sessionless answer.
    refused = answered(session_fetch(driver, 0, 0, {1: 0}))
    assert refused.error_code is ErrorCode.none and refused.session_id == 0 and list(partitions_of(refused)) == [1]
    # Larger: it takes the slot, and the evicted session's fetcher learns so.
    larger = int(answered(session_fetch(driver, 0, 0, {0: 0, 1: 0})).session_id)
    assert larger != 0 and driver.broker.fetch_sessions.evictions == 1
    assert answered(session_fetch(driver, first, 1, {})).error_code is ErrorCode.fetch_session_id_not_found
    # Unused for the eviction time: anyone may take its slot.
    driver.scheduler.advance(driver.broker.fetch_sessions.eviction_ms)
    assert answered(session_fetch(driver, 0, 0, {2: 0})).session_id not in (0, larger)


def test_a_cache_of_zero_slots_makes_every_fetch_sessionless() -> None:
    driver = started(**{"max.incremental.fetch.session.cache.slots": "0"})
    assert answered(session_fetch(driver, 0, 0, {0: 0})).session_id == 0


def _entry(partition: int, size: int = 1) -> list[SessionPartition]:
    return [SessionPartition(("t", i), "t", i, 0, -1, 1, -1, -1) for i in range(partition, partition + size)]


def test_a_followers_session_evicts_a_consumers_of_any_size() -> None:
    cache = FetchSessionCache(1, random.Random(1))
    consumer = cache.create(-1, True, _entry(0, 5), now_ms=0)
    assert consumer is not None
    follower = cache.create(2, True, _entry(0, 1), now_ms=1)
    assert follower is not None and cache.get(consumer.session_id) is None and not consumer.stamp.active
    assert cache.create(-1, True, _entry(0, 50), now_ms=2) is None  # a consumer never evicts a follower


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(2**31 - 1) == 1


def _state(offset: int) -> PartitionFetchState:
    return PartitionFetchState(offset, 0, 1 << 20, 3, 3)


def test_the_followers_handler_sends_only_changes_and_starts_over_after_any_error() -> None:
    handler = FetchSessionHandler()
    wanted = {("t", 0): _state(0), ("t", 1): _state(0)}
    full = handler.build(wanted)
    assert (full.session_id, full.epoch, full.send) == (0, 0, [("t", 0), ("t", 1)])
    assert handler.handle_response(full, 0, 77)
    incremental = handler.build({("t", 0): _state(5), ("t", 1): _state(0)})
    assert (incremental.session_id, incremental.epoch, incremental.send, incremental.forget) == (77, 1, [("t", 0)], [])
    assert handler.handle_response(incremental, 0, 77)
    dropped = handler.build({("t", 0): _state(5)})
    assert (dropped.epoch, dropped.send, dropped.forget) == (2, [], [("t", 1)])
    # An answer from another session is not ours: start over, closing ours.
    assert not handler.handle_response(dropped, 0, 78)
    assert _plan_ids(handler.build({("t", 0): _state(5)})) == (77, 0)
    # The epoch refused: start over, closing ours; the session unknown: start afresh.
    assert handler.handle_response(handler.build({("t", 0): _state(5)}), 0, 77)
    assert not handler.handle_response(handler.build({("t", 0): _state(5)}), ErrorCode.invalid_fetch_session_epoch.value, 0)
    assert _plan_ids(handler.build({("t", 0): _state(5)})) == (77, 0)
    assert handler.handle_response(handler.build({("t", 0): _state(5)}), 0, 77)
    assert not handler.handle_response(handler.build({("t", 0): _state(5)}), ErrorCode.fetch_session_id_not_found.value, 0)
    assert _plan_ids(handler.build({("t", 0): _state(5)})) == (0, 0)
    # A lost answer: the leader may have moved on; start over.
    assert handler.handle_response(handler.build({("t", 0): _state(5)}), 0, 90)
    handler.handle_error()
    assert _plan_ids(handler.build({("t", 0): _state(5)})) == (90, 0)
    # A leader that made no session (its cache full): stay sessionless, ask again next time.
    assert handler.handle_response(handler.build({("t", 0): _state(5)}), 0, 0)
    assert _plan_ids(handler.build({("t", 0): _state(5)})) == (0, 0)


def _plan_ids(plan: FetchPlan) -> tuple[int, int]:
    return plan.session_id, plan.epoch
