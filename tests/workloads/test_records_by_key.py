"""records_by_key: how one poll's batch of librdkafka messages becomes a poll micro-op.

The messages are librdkafka's own Message objects (confluent-kafka builds them from keyword
arguments), in the order a consumer returned them in a real run (seed 2010 of the
kill,partition mix): an OffsetFetch "Not coordinator" error event, then three records."""

from confluent_kafka import KafkaError, Message

from workloads.clients.confluent import KeyMap, records_by_key

KEYS = KeyMap("t", 2)  # key 2 is topic t1, partition 0


def record(offset: int, value: int, topic: str = "t1", partition: int = 0) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=str(value).encode())


def event(code: int) -> Message:
    return Message(topic="t1", partition=0, offset=-1, value=None, error=KafkaError(code))


def test_records_after_an_error_event_are_kept_and_the_error_is_the_outcome():
    batch = [event(KafkaError.NOT_COORDINATOR), record(33, 12), record(34, 29), record(35, 42)]
    by_key, outcome = records_by_key(batch, KEYS)
    # Dropping them made the next ok poll start at offset 36: a poll-skip the cluster never made.
    assert by_key == {2: [[33, 12], [34, 29], [35, 42]]}
    assert outcome is not None and outcome.type in ("fail", "info")


def test_the_first_error_wins_and_records_on_both_sides_are_kept():
    batch = [record(1, 5), event(KafkaError.NOT_COORDINATOR), record(2, 6, partition=1),
             event(KafkaError._TIMED_OUT), record(3, 7)]
    by_key, outcome = records_by_key(batch, KEYS)
    assert by_key == {2: [[1, 5], [3, 7]], 3: [[2, 6]]}
    first, _ = records_by_key([event(KafkaError.NOT_COORDINATOR)], KEYS)
    assert outcome == records_by_key([event(KafkaError.NOT_COORDINATOR)], KEYS)[1] and first == {}


def test_end_of_partition_is_no_error_and_marks_the_key_at_its_end():
    at_end: set[int] = set()
    by_key, outcome = records_by_key([record(7, 1), event(KafkaError._PARTITION_EOF)], KEYS, at_end)
    assert (by_key, outcome, at_end) == ({2: [[7, 1]]}, None, {2})


def test_an_unparseable_value_makes_the_outcome_unknown_and_keeps_the_rest():
    batch = [record(1, 5), Message(topic="t1", partition=0, offset=2, value=b"not a number"), record(3, 7)]
    by_key, outcome = records_by_key(batch, KEYS)
    assert by_key == {2: [[1, 5], [3, 7]]}
    assert outcome is not None and outcome.type == "info" and outcome.error[0] == "unparseable-value"
