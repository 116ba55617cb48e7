"""kcat (the Debian package, its own librdkafka build) against a real broker process: metadata
listing, keyed produce over several partitions with every compression codec, consuming back
with exactly-once, in-order, contiguous-offset checks, and a consumer group that commits and
resumes from its committed offsets."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict

import pytest
from confluent_kafka import TopicPartition

from cluster.launcher import LocalCluster
from tests.cluster.conftest import TEST_BROKER_CONFIG
from tests.cluster.kafka_helpers import consumer, create_topic

KCAT = shutil.which("kcat")
KCAT_TIMEOUT_S = 60
PARTITIONS = 4
KEYS = 13

if KCAT is None:  # a missing tool is a broken machine, not a reason to skip
    raise RuntimeError("kcat is not installed: run `make test` (the Makefile's DEBS installs it) or apt-get install kcat")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(base_dir=tmp_path_factory.mktemp("kcat"), config=TEST_BROKER_CONFIG) as shared:
        yield shared


def kcat(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    """Run kcat; on a non-zero exit or a timeout fail with its stderr."""
    argv = [KCAT, "-b", bootstrap, *args]
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=KCAT_TIMEOUT_S)
    except subprocess.TimeoutExpired as timeout:
        stderr = timeout.stderr.decode(errors="replace") if isinstance(timeout.stderr, bytes) else timeout.stderr
        raise AssertionError(f"{' '.join(argv)} did not finish in {KCAT_TIMEOUT_S} s; stderr:\n{stderr}") from None
    assert done.returncode == 0, f"{' '.join(argv)} exited with {done.returncode}; stderr:\n{done.stderr}"
    return done.stdout


def keyed_lines(start: int, count: int) -> list[tuple[str, str]]:
    """(key, value) pairs; the value carries the send sequence number."""
    return [(f"k{n % KEYS}", f"k{n % KEYS}-{n}") for n in range(start, start + count)]


def produce(bootstrap: str, topic: str, messages: list[tuple[str, str]], *extra: str) -> None:
    kcat(bootstrap, "-P", "-t", topic, "-K:", *extra, stdin="".join(f"{k}:{v}\n" for k, v in messages))


def parse_consumed(output: str) -> list[tuple[int, int, str, str]]:
    records = []
    for line in output.splitlines():
        partition, offset, key, value = line.split(" ")
        records.append((int(partition), int(offset), key, value))
    return records


def check_all_back(records: list[tuple[int, int, str, str]], sent: list[tuple[str, str]], first_offsets: dict[int, int] | None = None) -> None:
    """Every sent message exactly once; per partition, offsets contiguous from the first
    expected offset and values in send order; each key in one partition."""
    values = [r[3] for r in records]
    assert sorted(values) == sorted(v for _, v in sent), f"{len(values)} consumed for {len(sent)} sent; duplicated: {len(values) - len(set(values))}, lost: {len({v for _, v in sent} - set(values))}"
    by_partition: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    partitions_of_key: dict[str, set[int]] = defaultdict(set)
    for partition, offset, key, value in records:
        assert value.startswith(key + "-"), f"key {key} came back with value {value}"
        by_partition[partition].append((offset, key, value))
        partitions_of_key[key].add(partition)
    assert all(len(p) == 1 for p in partitions_of_key.values()), f"keys spread over partitions: {dict(partitions_of_key)}"
    assert len(by_partition) > 1, "the keyed messages all landed in one partition"
    send_position = {v: i for i, (_, v) in enumerate(sent)}
    for partition, entries in by_partition.items():
        offsets = [offset for offset, _, _ in entries]
        start = (first_offsets or {}).get(partition, 0)
        assert offsets == list(range(start, start + len(offsets))), f"partition {partition}: offsets not contiguous from {start}: {offsets[:10]}..."
        positions = [send_position[value] for _, _, value in entries]
        assert positions == sorted(positions), f"partition {partition}: consumed out of send order"


CONSUME_FORMAT = "%p %o %k %s\n"


def test_metadata_listing_shows_the_broker_and_the_topic(cluster) -> None:
    create_topic(cluster.bootstrap_servers, "kcat-metadata", PARTITIONS)
    listing = kcat(cluster.bootstrap_servers, "-L", "-t", "kcat-metadata")
    broker = cluster.brokers[0]
    assert f"broker 0 at {broker.host}:{broker.port}" in listing
    assert f'topic "kcat-metadata" with {PARTITIONS} partitions' in listing
    for p in range(PARTITIONS):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in listing


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_produce_then_consume_back_exactly_once_in_order(cluster, compression) -> None:
    topic = f"kcat-roundtrip-{compression}"
    create_topic(cluster.bootstrap_servers, topic, PARTITIONS)
    first = keyed_lines(0, 2000)
    second = keyed_lines(2000, 1000)
    # Two producer runs: the second appends after the first's offsets.
    produce(cluster.bootstrap_servers, topic, first, "-z", compression, "-X", "linger.ms=20")
    produce(cluster.bootstrap_servers, topic, second, "-z", compression, "-X", "acks=all")
    output = kcat(cluster.bootstrap_servers, "-C", "-t", topic, "-e", "-o", "beginning", "-f", CONSUME_FORMAT, "-q")
    check_all_back(parse_consumed(output), first + second)


def test_consume_from_an_offset_within_a_partition(cluster) -> None:
    topic = "kcat-offsets"
    create_topic(cluster.bootstrap_servers, topic, 1)
    sent = keyed_lines(0, 500)
    produce(cluster.bootstrap_servers, topic, sent)
    output = kcat(cluster.bootstrap_servers, "-C", "-t", topic, "-p", "0", "-o", "123", "-e", "-f", CONSUME_FORMAT, "-q")
    records = parse_consumed(output)
    assert [r[1] for r in records] == list(range(123, 500))
    assert [r[3] for r in records] == [v for _, v in sent[123:]]


def test_group_consumer_commits_and_resumes_from_committed_offsets(cluster) -> None:
    topic, group = "kcat-group", "kcat-group-1"
    create_topic(cluster.bootstrap_servers, topic, PARTITIONS)
    first = keyed_lines(0, 1500)
    produce(cluster.bootstrap_servers, topic, first)
    group_args = ("-G", group, topic, "-e", "-f", CONSUME_FORMAT, "-q", "-X", "auto.offset.reset=earliest")
    check_all_back(parse_consumed(kcat(cluster.bootstrap_servers, *group_args)), first)

    # kcat's consumer auto-commits and commits on close: the group's offsets are the log end.
    checker = consumer(cluster.bootstrap_servers, group)
    try:
        committed = {tp.partition: tp.offset for tp in checker.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
        ends = {p: checker.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        checker.close()
    assert committed == ends and sum(ends.values()) == len(first)

    second = keyed_lines(1500, 700)
    produce(cluster.bootstrap_servers, topic, second)
    resumed = parse_consumed(kcat(cluster.bootstrap_servers, *group_args))
    check_all_back(resumed, second, first_offsets=committed)
