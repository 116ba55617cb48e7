"""The eos workload: its options, its seeded generators, and its copier against a real broker
(a transaction left open by a crashed copier is fenced by the thread's next copier, and only
committed copies are visible to the read_committed verifier)."""

import itertools
import random
import time

import pytest

from checkers.eos import COPY_ID_BITS as CHECKER_COPY_ID_BITS
from confluent_kafka import TopicPartition

from harness.generator import Invocation
from workloads import eos
from workloads.clients.confluent import TopicCreator
from workloads.clients.eos import COPY_ID_BITS, EosClient

_names = itertools.count()


@pytest.mark.parametrize("options, message", [
    ({"copiers": "2"}, "unknown eos workload option(s): copiers"),
    ({"topics": "a"}, "must be two different topic names"),
    ({"topics": "a,a"}, "must be two different topic names"),
    ({"topics": "a,b c"}, "must be two different topic names"),
    ({"producers": "5"}, "leave at least one copier (concurrency=5)"),
    ({"crash_p": "1.5"}, "must be in [0, 1]"),
    ({"batch_size": "0"}, "must be ≥ 1"),
    ({"replication_factor": "4"}, "must be in [1, brokers=3]"),
    ({"txn": "maybe"}, "is not a valid bool"),
])
def test_bad_options_are_refused_with_the_reason(options, message):
    with pytest.raises(ValueError) as err:
        eos.validate_options(options, brokers=3, concurrency=5)
    assert message in str(err.value)


def test_defaults_and_client_config():
    opts = eos.EosOptions({}, brokers=3, concurrency=5)
    assert (opts.partitions, opts.replication_factor, opts.producers, opts.txn) == (4, 3, 1, True)
    assert (opts.input_topic, opts.output_topic) == ("eos-input", "eos-output")
    config = eos.default_client_config({})
    assert config["isolation.level"] == "read_committed" and config["enable.auto.commit"] == "false"
    assert int(config["message.timeout.ms"]) <= int(config["transaction.timeout.ms"]) < int(config["socket.timeout.ms"])
    assert "transaction.timeout.ms" not in eos.default_client_config({"txn": "false"})


def test_the_copy_encoding_is_the_checkers():
    assert COPY_ID_BITS == CHECKER_COPY_ID_BITS


def test_producer_values_are_unique_across_partitions():
    opts = eos.EosOptions({"producers": "2"}, brokers=3, concurrency=5)
    values = []
    for thread in (0, 1):
        ops = eos.producer_ops(7, thread, 5, opts)
        values += [next(ops).value[0][2] for _ in range(200)]
    assert len(set(values)) == len(values)
    keys = {op.value[0][1] for op in itertools.islice(eos.producer_ops(7, 0, 5, opts), 200)}
    assert keys == set(range(opts.partitions))


def test_copiers_crash_both_ways_and_seeded():
    opts = eos.EosOptions({"crash_p": "0.3"}, brokers=3, concurrency=5)
    ops = list(itertools.islice(eos.copier_ops(7, 2, opts, crashes=True), 300))
    kinds = {(op.f, op.extra.get("crash")) for op in ops}
    assert kinds == {("copy", None), ("copy", "before-commit"), ("crash", None)}
    again = list(itertools.islice(eos.copier_ops(7, 2, opts, crashes=True), 300))
    assert [(op.f, dict(op.extra)) for op in ops] == [(op.f, dict(op.extra)) for op in again]
    assert all(op.f == "copy" and not op.extra for op in itertools.islice(eos.copier_ops(7, 2, opts, crashes=False), 300))


def test_observer_waits_for_copies_and_a_quiet_round():
    observer = eos.EosObserver(copiers=2)
    from harness.generator.core import Event

    observer.observe(Event("ok", 0, "send", [["send", 1, [4, 9]]], 0))
    assert not observer.drained(dict(observer.sent))
    observer.observe(Event("ok", 1, "copy", [["poll", {"1": [[3, 8], [4, 9]]}], ["send", 5, [0, 9 << 20 | 1]]], 0))
    assert observer.copied == {1: 5} and not observer.drained({1: 4})  # no quiet round yet
    observer.observe(Event("ok", 1, "copy", [], 0))
    observer.observe(Event("fail", 2, "copy", [["poll", {"1": [[5, 10]]}]], 0))  # not committed: no effect
    observer.observe(Event("ok", 2, "copy", [], 0))
    assert observer.copied == {1: 5} and observer.drained({1: 4})


def make_copier(cluster, topics, group, txn_id, batch_size=10):
    config = {**eos.default_client_config({}), "group.id": group, "session.timeout.ms": "6000"}
    return EosClient(bootstrap_servers=cluster.bootstrap_servers, client_config=config, input_topic=topics[0],
                     output_topic=topics[1], partitions=1, batch_size=batch_size, poll_ms=500,
                     topics=TopicCreator(cluster.bootstrap_servers, config, 1, 1), transactional_id=txn_id)


def copy_until(client, extra=None, attempts=40):
    for _ in range(attempts):
        done = client.invoke(Invocation(f="copy", extra=extra or {}))
        if done.type != "ok" or done.value:
            return done
    raise AssertionError("nothing to copy")


def test_a_crashed_copy_is_fenced_and_copied_again_exactly_once(cluster):
    n = next(_names)
    topics, group, txn_id = (f"ei{n}", f"eo{n}"), f"eg{n}", f"et{n}"
    producer = make_copier(cluster, topics, group, None)
    try:
        values = random.Random(n).sample(range(1, 10_000), 5)
        for v in values:
            done = producer.invoke(Invocation(f="send", value=[["send", 0, v]]))
            assert done.type == "ok", done
    finally:
        producer.close()
    first = make_copier(cluster, topics, group, txn_id)
    crashed = copy_until(first, {"crash": "before-commit"})
    assert crashed.type == "fail" and crashed.end_process and crashed.error == ["crash", "before-commit"]
    polled = crashed.value[0][1][0]
    assert [v for _, v in polled] == values
    # The next process of the thread: same transactional.id, so it fences the open transaction.
    second = make_copier(cluster, topics, group, txn_id)
    try:
        done = copy_until(second)
        assert done.type == "ok", done
        assert [v for _, v in done.value[0][1][0]] == values  # the offsets were never committed
        sends = [m for m in done.value if m[0] == "send"]
        assert [v >> COPY_ID_BITS for _, _, (_, v) in sends] == values
        assert all(k == 1 for _, k, _ in sends)  # output partition 0 is key partitions + 0
        verified = second.invoke(Invocation(f="poll"))
        assert verified.type == "ok", verified
        read = verified.value[0][1]
        assert [v for _, v in read[0]] == values
        # Only the committed copy's records: the crashed copy's were aborted by the fencing.
        committed = [[o, v] for _, _, (o, v) in sends]
        assert read[1] == committed
        crashed_sends = [[o, v] for m in crashed.value if m[0] == "send" for o, v in [m[2]]]
        assert not any(r in read[1] for r in crashed_sends)
        assert second.invoke(Invocation(f="copy")).value == []  # the group's offsets moved on
    finally:
        second.close()
        first.close()



def _final_phase(observer, limit_s):
    from harness.generator import EachThread, Observe, Seq, Stream, Synchronize

    opts = eos.EosOptions({}, brokers=3, concurrency=3)

    def thread(t):
        return None if t < 1 else Stream(eos.copier_ops(1, t, opts, crashes=False))

    return Observe(observer, Seq(eos.UntilCopied(EachThread(thread), observer, limit_s),
                                 Synchronize(eos.VerifyOnce(observer))))


def test_final_phase_copies_until_drained_then_verifies_once():
    from harness.generator import Completion, simulate

    observer = eos.EosObserver(copiers=2)
    observer.sent = {0: 1}

    def complete(invocation):
        if invocation.f == "copy" and not observer.copied:
            return Completion("ok", [["poll", {"0": [[0, 5], [1, 6]]}]]), 1_000_000
        return Completion("ok", [] if invocation.f == "copy" else [["poll", {}]]), 1_000_000

    ops = simulate(_final_phase(observer, 30), concurrency=3, complete=complete, with_nemesis=False)
    fs = [op.f for op in ops if op.type == "invoke"]
    assert fs[-1] == "poll" and fs.count("poll") == 1 and fs.count("copy") >= 3
    assert observer.verified


def test_final_phase_verifies_after_its_copy_limit_when_a_record_is_never_copied():
    from harness.generator import Completion, simulate

    observer = eos.EosObserver(copiers=2)
    observer.sent = {0: 7}  # acknowledged, but the input lost it: no copy ever reaches it

    def complete(invocation):
        return Completion("ok", [] if invocation.f == "copy" else [["poll", {}]]), 100_000_000

    ops = simulate(_final_phase(observer, 2), concurrency=3, complete=complete, with_nemesis=False)
    invokes = [op for op in ops if op.type == "invoke"]
    assert invokes[-1].f == "poll" and observer.verified
    assert invokes[-1].time_ns >= 2e9 and sum(op.f == "copy" for op in invokes) > 10


def test_without_transactions_a_crash_before_the_offset_commit_copies_twice(cluster):
    n = next(_names)
    topics, group = (f"ei{n}", f"eo{n}"), f"eg{n}"
    producer = make_copier(cluster, topics, group, None)
    second = make_copier(cluster, topics, group, None)
    try:
        for v in (1, 2, 3):
            assert producer.invoke(Invocation(f="send", value=[["send", 0, v]])).type == "ok"
        first = copy_until(producer, {"crash": "before-commit"})
        assert first.type == "ok" and first.end_process
        again = copy_until(second)
        assert again.type == "ok" and [v for _, v in again.value[0][1][0]] == [1, 2, 3]
        read = second.invoke(Invocation(f="poll"))
        assert read.type == "ok"
        assert sorted(v >> COPY_ID_BITS for _, v in read.value[0][1][1]) == [1, 1, 2, 2, 3, 3]
    finally:
        producer.close()
        second.close()


@pytest.fixture(scope="module")
def unsafe_cluster(tmp_path_factory):
    """One broker whose TxnOffsetCommit skips the group generation check (KIP-447's bug switch)."""
    from cluster.launcher import LocalCluster

    with LocalCluster(brokers=1, base_dir=tmp_path_factory.mktemp("unsafe"), seed=2,
                      config={"transaction.offset.commit.skip.generation.check": "true"}) as running:
        yield running


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "skip-generation-check"])
def test_a_stalled_copier_is_a_zombie_whose_offsets_are_fenced(request, unsafe):
    import threading

    cluster = request.getfixturevalue("unsafe_cluster" if unsafe else "cluster")
    n = next(_names)
    topics, group, options = (f"ei{n}", f"eo{n}"), f"eg{n}", {"stall_p": "0.5"}
    config = {**eos.default_client_config(options), "group.id": group}
    assert config["max.poll.interval.ms"] == "6000"

    def copier(txn_id):
        return EosClient(bootstrap_servers=cluster.bootstrap_servers, client_config=config, input_topic=topics[0],
                         output_topic=topics[1], partitions=1, batch_size=10, poll_ms=500,
                         topics=TopicCreator(cluster.bootstrap_servers, config, 1, 1), transactional_id=txn_id)

    producer, zombie, successor = copier(None), copier(f"et{n}a"), copier(f"et{n}b")
    try:
        for v in (1, 2, 3):
            assert producer.invoke(Invocation(f="send", value=[["send", 0, v]])).type == "ok"
        stalled: list = []
        thread = threading.Thread(target=lambda: stalled.append(copy_until(zombie, {"stall_s": eos.STALL_S})))
        thread.start()
        # The zombie, alone in the group, polls the three records and stalls; only then does
        # the successor join.
        for _ in range(300):
            consumer = zombie._consumer
            if consumer is not None and consumer.position([TopicPartition(topics[0], 0)])[0].offset >= 3:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the zombie never polled the records")
        # While the zombie stalls, the group moves the partition to the successor, which
        # copies the records from the last committed offsets and commits.
        copied = None
        for _ in range(60):
            done = successor.invoke(Invocation(f="copy"))
            if done.type == "ok" and done.value:
                copied = done
                break
        thread.join(60)
        assert copied is not None and [v for _, v in copied.value[0][1][0]] == [1, 2, 3]
        read = successor.invoke(Invocation(f="poll"))
        assert read.type == "ok" and stalled
        copies = sorted(v >> COPY_ID_BITS for _, v in read.value[0][1][1])
        if unsafe:
            # The zombie's stale offsets are accepted and it commits: every record twice.
            assert stalled[0].type == "ok" and copies == [1, 1, 2, 2, 3, 3]
        else:
            # Its offsets carry its old generation: refused, so its copy aborted.
            assert stalled[0].type == "fail" and copies == [1, 2, 3], stalled
    finally:
        for client in (producer, zombie, successor):
            client.close()
