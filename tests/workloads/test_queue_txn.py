"""The queue workload with transactions (txn=true): its seeded generator, and its
transactional confluent-kafka client against the real bundled broker."""

import itertools
import time

import pytest
from confluent_kafka import Consumer

from harness.generator import Invocation
from workloads import queue
from workloads.clients.confluent import KeyMap, TopicCreator, consumer_config
from workloads.clients.txn import TxnCallHung, TxnQueueClient, bounded

_prefixes = itertools.count()


def fresh_prefix():
    return f"x{next(_prefixes)}t"


def ops_of(seed, thread, count, **options):
    opts = queue.QueueOptions({"txn": "true", **options}, brokers=3)
    return list(itertools.islice(queue.thread_ops(seed, thread, 5, opts), count))


# -- the generator (no cluster)

def test_txn_ops_are_seeded_and_tagged_by_their_micro_ops():
    a, b, c = ops_of(7, 0, 400), ops_of(7, 0, 400), ops_of(8, 0, 400)
    assert [(o.f, o.value, o.extra) for o in a] == [(o.f, o.value, o.extra) for o in b]
    assert [(o.f, o.value) for o in a] != [(o.f, o.value) for o in c]
    assert a[0].f == "assign"
    data_ops = [o for o in a if o.f in ("send", "poll", "txn")]
    assert {o.f for o in data_ops} == {"send", "poll", "txn"}
    for op in data_ops:
        kinds = {m[0] for m in op.value}
        assert 1 <= len(op.value) <= 4
        # Jepsen's tag-rw: all sends, all polls, or a mix.
        assert op.f == ("txn" if kinds == {"send", "poll"} else kinds.pop())
        assert all(m == ["poll"] or (m[0] == "send" and len(m) == 3) for m in op.value)
        assert ("poll_ms" in op.extra) == any(m == ["poll"] for m in op.value)
        if "abort_at" in op.extra:
            assert 0 <= op.extra["abort_at"] < len(op.value)
    assert {len(o.value) for o in data_ops} == {1, 2, 3, 4}
    # Values are unique per key across the thread's sends.
    sends = [(m[1], m[2]) for o in data_ops for m in o.value if m[0] == "send"]
    assert len(sends) == len(set(sends))


def test_abort_p_sets_how_often_an_op_carries_an_intentional_abort():
    def aborted_share(abort_p):
        ops = [o for o in ops_of(3, 1, 3000, abort_p=str(abort_p)) if o.f in ("send", "poll", "txn")]
        return sum("abort_at" in o.extra for o in ops) / len(ops)

    assert aborted_share(0) == 0
    assert aborted_share(1) == 1
    # 0.1 per micro-op over lengths uniform in 1..4: 1 - E[0.9^n] = 0.22.
    assert 0.17 < aborted_share(0.1) < 0.27
    assert all(o.extra.get("abort_at", 0) == 0 for o in ops_of(3, 1, 200, abort_p="1"))


def test_max_txn_length_bounds_the_ops_and_needs_txn():
    assert {len(o.value) for o in ops_of(1, 0, 300, max_txn_length="2") if o.f != "assign"} == {1, 2}
    with pytest.raises(ValueError, match="max_txn_length"):
        queue.QueueOptions({"max_txn_length": "3"}, brokers=3)
    assert queue.QueueOptions({}, brokers=3).max_txn_length == 1
    assert queue.QueueOptions({"txn": "true"}, brokers=3).max_txn_length == 4


def test_without_txn_the_stream_is_the_plain_queue_stream():
    opts = queue.QueueOptions({}, brokers=3)
    ops = list(itertools.islice(queue.thread_ops(7, 0, 5, opts), 300))
    assert all(len(o.value) == 1 and "abort_at" not in o.extra for o in ops if o.f in ("send", "poll"))
    assert "txn" not in {o.f for o in ops}


def test_txn_client_defaults_follow_jepsen_within_librdkafkas_rules():
    config = queue.default_client_config({"txn": "true"})
    assert config["transaction.timeout.ms"] == "1000"
    # librdkafka refuses a transactional producer whose message or socket timeout exceeds the
    # transaction's (socket: by more than 100 ms).
    assert int(config["message.timeout.ms"]) <= 1000 and int(config["socket.timeout.ms"]) <= 1100
    assert config["isolation.level"] == "read_committed"
    assert "transaction.timeout.ms" not in queue.default_client_config({})


def test_each_process_gets_its_own_transactional_id():
    from harness.spec import RunSpec

    spec = RunSpec(name="q", workload="queue", seed=1, brokers=3, concurrency=5,
                   client_config=queue.default_client_config({"txn": "true"}),
                   workload_options={"txn": "true", "topic_prefix": "pfx"})
    workload = queue.build(spec, "127.0.0.1:9")  # nothing connects until an op runs
    clients = [workload.open_client(p) for p in (3, 8)]  # process 8 succeeds retired process 3
    try:
        assert [c.transactional_id for c in clients] == ["logquake-txn-pfx-3", "logquake-txn-pfx-8"]
        assert all(isinstance(c, TxnQueueClient) for c in clients)
    finally:
        for c in clients:
            c.close()
    plain = queue.build(RunSpec(name="q", workload="queue", seed=1, brokers=3, concurrency=5,
                                client_config=queue.default_client_config({})), "127.0.0.1:9").open_client(0)
    assert not isinstance(plain, TxnQueueClient)
    plain.close()


def test_bounded_returns_raises_or_gives_up_on_a_call_that_does_not_return(monkeypatch):
    import threading

    from workloads.clients import txn

    assert bounded(lambda: 42, 1.0, "answer") == 42
    with pytest.raises(KeyError):
        bounded(lambda: {}["missing"], 1.0, "lookup")
    monkeypatch.setattr(txn, "HANG_GRACE_S", 0.1)
    release = threading.Event()
    try:
        with pytest.raises(TxnCallHung, match="stuck"):
            bounded(lambda: release.wait(30), 0.1, "stuck")
    finally:
        release.set()


# -- the client (real broker)

def txn_client(cluster, prefix, process=0, **config):
    client_config = {**queue.default_client_config({"txn": "true"}), **config}
    topics = TopicCreator(cluster.bootstrap_servers, client_config, 2, 1)
    return TxnQueueClient(transactional_id=f"test-{prefix}-{process}", bootstrap_servers=cluster.bootstrap_servers,
                          client_config=client_config, keys=KeyMap(prefix, 2), topics=topics)


def committed_reader(cluster, prefix, keys, isolation="read_committed"):
    config = consumer_config({"group.id": f"reader-{prefix}-{isolation}", "enable.auto.commit": "false",
                              "isolation.level": isolation, "auto.offset.reset": "earliest"},
                             cluster.bootstrap_servers)
    consumer = Consumer(config)
    km = KeyMap(prefix, 2)
    consumer.assign([km.topic_partition(k, 0) for k in keys])
    return consumer, km


def read_values(consumer, km, want, deadline_s=20.0):
    """{key: [values]} read until `want` values in all (or the deadline)."""
    seen = {}
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and sum(map(len, seen.values())) < want:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.setdefault(km.key(msg.topic(), msg.partition()), []).append(int(msg.value()))
    return seen


def test_a_committed_transaction_is_ok_and_visible_and_an_aborted_one_is_fail_and_invisible(cluster):
    prefix = fresh_prefix()
    client = txn_client(cluster, prefix)
    try:
        done = client.invoke(Invocation(f="send", value=[["send", 0, 1], ["send", 1, 2]]))
        assert done.type == "ok", done
        assert [(m[1], m[2][1]) for m in done.value] == [(0, 1), (1, 2)]
        assert all(m[2][0] is not None and m[2][0] >= 0 for m in done.value)
        aborted = client.invoke(Invocation(f="send", value=[["send", 0, 3], ["send", 1, 4]], extra={"abort_at": 1}))
        assert aborted.type == "fail" and aborted.error == ["abort", "intentional"], aborted
        # What ran before the abort keeps its offset; the rest stays as invoked.
        assert aborted.value[0][:2] == ["send", 0] and aborted.value[0][2][1] == 3
        assert aborted.value[1] == ["send", 1, 4]
        assert client.invoke(Invocation(f="send", value=[["send", 0, 5]])).type == "ok"
    finally:
        client.close()
    consumer, km = committed_reader(cluster, prefix, [0, 1])
    try:
        assert read_values(consumer, km, 3) == {0: [1, 5], 1: [2]}
    finally:
        consumer.close()
    consumer, km = committed_reader(cluster, prefix, [0, 1], "read_uncommitted")
    try:
        # read_uncommitted sees the aborted record: the abort is real, not a send that never was.
        assert read_values(consumer, km, 4)[0] == [1, 3, 5]
    finally:
        consumer.close()


def test_an_aborted_poll_rolls_the_consumer_back_and_committed_polls_commit_offsets(cluster):
    prefix = fresh_prefix()
    writer = txn_client(cluster, prefix, process=0)
    reader = txn_client(cluster, prefix, process=1)
    try:
        assert writer.invoke(Invocation(f="send", value=[["send", 0, 1], ["send", 0, 2], ["send", 0, 3]])).type == "ok"
        assert reader.invoke(Invocation(f="assign", value=[0])).type == "ok"

        def poll(**extra):
            deadline = time.monotonic() + 20
            while True:
                done = reader.invoke(Invocation(f="txn", value=[["poll"], ["send", 2, 9]],
                                                extra={"poll_ms": 500, **extra}))
                if done.type != "ok" or done.value[0][1] or time.monotonic() > deadline:
                    return done

        # The poll reads, then the transaction aborts before its send.
        aborted = poll(abort_at=1)
        assert aborted.type == "fail", aborted
        first = aborted.value[0][1][0]
        assert [v for _, v in first] == [1, 2, 3][:len(first)] and first
        # Rolled back: the next poll reads the same records again, from the first one.
        again = poll()
        assert again.type == "ok", again
        assert again.value[0][1][0][0] == first[0]
        read = [v for _, v in again.value[0][1][0]]
    finally:
        writer.close()
        reader.close()
    # send_offsets_to_transaction committed the group's offset with the poll: a fresh process
    # of the same group starts after what the committed transaction read.
    fresh = txn_client(cluster, prefix, process=2)
    try:
        assert fresh.invoke(Invocation(f="assign", value=[0])).type == "ok"
        if len(read) < 3:
            done = fresh.invoke(Invocation(f="poll", value=[["poll"]], extra={"poll_ms": 2000}))
            assert done.type == "ok", done
            assert [v for _, v in done.value[0][1].get(0, [])][:1] == [read[-1] + 1]
        tp = KeyMap(prefix, 2).topic_partition(0)
        committed = fresh._consumer_().committed([tp], timeout=10)[0].offset
        assert committed == again.value[0][1][0][-1][0] + 1
    finally:
        fresh.close()
