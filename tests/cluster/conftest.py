"""Fixtures for tests that need real broker processes.

`make_cluster(**kwargs)` starts a LocalCluster (same arguments) in a per-test directory and
guarantees teardown; `cluster` is a ready single-broker cluster with test-friendly settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cluster.launcher import LocalCluster

# Fast group formation for tests (Kafka's 3 s delay is kept for real use), and fewer
# __consumer_offsets partitions: each costs a few fsyncs at every broker start.
TEST_BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}


@pytest.fixture
def make_cluster(tmp_path) -> Iterator[Callable[..., LocalCluster]]:
    started: list[LocalCluster] = []

    def make(**kwargs: Any) -> LocalCluster:
        kwargs.setdefault("base_dir", tmp_path / f"cluster-{len(started)}")
        kwargs["config"] = {**TEST_BROKER_CONFIG, **kwargs.get("config", {})}
        cluster = LocalCluster(**kwargs)
        started.append(cluster)
        return cluster.__enter__()

    try:
        yield make
    finally:
        for cluster in reversed(started):
            cluster.close()


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:
    return make_cluster()
