"""The delivery workload's group consumers against the real broker: what each commit mode
commits relative to what it processed, and what a crash does to that."""

import itertools

from harness.generator import Invocation, Limit, clients
from harness.history import HistoryWriter, read_history
from harness.interpreter import Interpreter
from harness.spec import RunSpec
from workloads import delivery
from workloads.clients.confluent import TopicCreator
from workloads.clients.delivery import DeliveryClient

_topics = itertools.count()


def make_client(cluster, role, topic, mode, group):
    config = {**delivery.default_client_config({"commit_mode": mode}), "group.id": group,
              "session.timeout.ms": "6000"}
    return DeliveryClient(role=role, bootstrap_servers=cluster.bootstrap_servers, client_config=config,
                          topic=topic, partitions=1, commit_mode=mode, batch_size=3, poll_ms=500,
                          topics=TopicCreator(cluster.bootstrap_servers, config, 1, 1))


def produce(cluster, topic, mode, values):
    producer = make_client(cluster, "producer", topic, mode, "unused")
    try:
        for v in values:
            assert producer.invoke(Invocation(f="send", value=[["send", 0, v]])).type == "ok"
    finally:
        producer.close()


def process_until(consumer, count, attempts=40):
    """Process ops until `count` records came back; returns the processed [offset, value]s."""
    got = []
    for _ in range(attempts):
        done = consumer.invoke(Invocation(f="process"))
        assert done.type == "ok", done
        got += [pair for _, _, pair in done.value]
        if len(got) >= count:
            break
    return got


def test_at_least_once_redelivers_what_was_processed_but_not_committed(cluster):
    topic, group = f"dl{next(_topics)}", f"g{next(_topics)}"
    produce(cluster, topic, "after", range(1, 7))
    first = make_client(cluster, "consumer", topic, "after", group)
    got = process_until(first, 3)
    assert got[:3] == [[0, 1], [1, 2], [2, 3]]
    committed = first.invoke(Invocation(f="commit"))
    assert committed.type == "ok" and committed.value == {"0": len(got)}
    more = process_until(first, 1)  # processed, never committed
    assert first.invoke(Invocation(f="crash")).type == "info"
    second = make_client(cluster, "consumer", topic, "after", group)
    try:
        again = process_until(second, 6 - len(got))
        assert again[0] == more[0]  # redelivered: a duplicate, allowed at least once
        assert [v for _, v in again][-1] == 6
    finally:
        second.close()


def test_at_most_once_commits_before_processing_so_a_crash_loses_the_batch(cluster):
    topic, group = f"dm{next(_topics)}", f"g{next(_topics)}"
    produce(cluster, topic, "before", range(1, 7))
    first = make_client(cluster, "consumer", topic, "before", group)
    committed = None
    for _ in range(40):
        committed = first.invoke(Invocation(f="commit"))
        assert committed.type == "ok", committed
        if committed.value:
            break
    batch_end = committed.value["0"]
    assert batch_end >= 1
    assert first.invoke(Invocation(f="crash")).type == "info"  # crashed before processing the batch
    second = make_client(cluster, "consumer", topic, "before", group)
    try:
        for _ in range(40):
            c = second.invoke(Invocation(f="commit"))
            if c.value:
                break
        assert c.type == "ok" and c.value
        processed = second.invoke(Invocation(f="process"))
        assert processed.type == "ok"
        offsets = [pair[0] for _, _, pair in processed.value]
        assert offsets and offsets[0] == batch_end  # offsets below batch_end are never processed
    finally:
        second.close()


def test_a_run_records_process_commit_and_crash_ops_for_the_checkers(cluster, tmp_path):
    topic, group = f"dr{next(_topics)}", f"g{next(_topics)}"
    spec = RunSpec(name="delivery-test", workload="delivery", seed=3, brokers=1, concurrency=3,
                   client_config={**delivery.default_client_config({}), "group.id": group},
                   workload_options={"topic": topic, "crash_p": "0.05", "partitions": "2"})
    workload = delivery.build(spec, cluster.bootstrap_servers)
    workload.setup()
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    interp = Interpreter(concurrency=3, open_client=workload.open_client, history=writer)
    try:
        assert interp.run(clients(Limit(120, workload.generator)))
        assert interp.run(clients(workload.final_generator))
    finally:
        interp.close()
        writer.close()
    history = read_history(path)
    ok = [op for op in history if op.type == "ok"]
    assert {op.f for op in ok} >= {"send", "process", "commit"}
    assert any(op.f == "crash" and op.type == "info" for op in history)
    commits = [op for op in ok if op.f == "commit" and op.value]
    assert commits and all(op.extra["group"] == group for op in commits)
    assert all(isinstance(k, str) and isinstance(v, int) for op in commits for k, v in op.value.items())
    # The final phase drained: every acknowledged record was processed by some consumer.
    acked = {(k, o) for op in ok if op.f == "send" for _, k, (o, _) in op.value}
    processed = {(k, o) for op in ok if op.f == "process" for _, k, (o, _) in op.value}
    assert acked and acked <= processed
