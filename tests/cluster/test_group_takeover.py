"""Two consumers in one group split the partitions; when one leaves, the other takes its
partitions over from the committed offsets: nothing below a commit is read again, nothing
above it is skipped."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException

from tests.cluster.kafka_helpers import check_exactly, consumer, create_topic, produce_numbered

MESSAGES = 30_000
PARTITIONS = 6
KEYS = 30


def _commit_consumed(c, partitions) -> None:
    try:
        c.commit(asynchronous=False)
    except KafkaException as error:
        if error.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed yet
            raise


def _poll_into(c, sink: list[tuple[int, int, str]], limit: int = 500) -> None:
    for msg in c.consume(num_messages=limit, timeout=0.2):
        if msg.error():
            raise AssertionError(f"consumer error: {msg.error()}")
        sink.append((msg.partition(), msg.offset(), msg.value().decode()))


def test_survivor_resumes_the_leavers_partitions_at_their_commits(cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "jobs", PARTITIONS)
    assert produce_numbered(bootstrap, "jobs", MESSAGES, KEYS, {"acks": "all", "enable.idempotence": True}) == []

    a = consumer(bootstrap, "workers")
    b = consumer(bootstrap, "workers")
    got_a: list[tuple[int, int, str]] = []
    got_b: list[tuple[int, int, str]] = []
    # Both commit what they consumed before giving partitions up (whichever joins first owns
    # everything until the other arrives), so a rebalance re-reads nothing.
    a.subscribe(["jobs"], on_revoke=_commit_consumed)
    b.subscribe(["jobs"], on_revoke=_commit_consumed)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _poll_into(a, got_a, 50)
            _poll_into(b, got_b, 50)
            assigned_a = {tp.partition for tp in a.assignment()}
            assigned_b = {tp.partition for tp in b.assignment()}
            if assigned_a and assigned_b and len(got_a) > 200 and len(got_b) > 200:
                break
        assert assigned_a and assigned_b, "both consumers should own partitions"
        assert assigned_a.isdisjoint(assigned_b) and assigned_a | assigned_b == set(range(PARTITIONS))

        _commit_consumed(b, None)
        b_partitions = {tp.partition for tp in b.assignment()}
        b_commits = {tp.partition: tp.offset for tp in b.committed(list(b.assignment()), timeout=10)}
        b.close()
        # A may have owned some of these partitions before B joined; only what it reads after
        # B has left is the takeover.
        takeover_start = len(got_a)
        b_read = {p: max((o for q, o, _ in got_b if q == p), default=-1) for p in b_partitions}
        for p in b_partitions:
            if b_read[p] >= 0:
                assert b_commits[p] == b_read[p] + 1, "B's commit should be just past what it read"

        deadline = time.monotonic() + 60
        while len(got_a) + len(got_b) < MESSAGES and time.monotonic() < deadline:
            _poll_into(a, got_a, 5000)
        assert {tp.partition for tp in a.assignment()} == set(range(PARTITIONS))

        checked = 0
        for p in b_partitions:
            taken_over = [o for q, o, _ in got_a[takeover_start:] if q == p]
            if b_commits[p] < 0:
                continue
            checked += 1
            after = [o for o in taken_over if o >= b_commits[p]]
            assert min(after) == b_commits[p], f"partition {p}: resumed at {min(after)}, committed {b_commits[p]}"
            assert not [o for o in taken_over if o < b_commits[p]], f"partition {p}: re-read below the commit"
        assert checked, "B should have committed progress on at least one partition"
        check_exactly([v for _, _, v in got_a + got_b], range(MESSAGES), KEYS)
    finally:
        a.close()
