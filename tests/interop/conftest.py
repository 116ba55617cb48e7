"""Fixtures of the client interop matrix: one real bundled cluster per module and size.

`interop_cluster` is parametrised over one and three brokers and module-scoped, so every test
of a module shares the two clusters; each test then uses its own topic and group names
(`names`), so tests do not see each other's data.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from cluster.launcher import LocalCluster
from tests.cluster.conftest import TEST_BROKER_CONFIG

_SERIAL = itertools.count()
# A static broker setting that a topic config inherits (segment.ms from log.roll.hours), so
# DescribeConfigs has a STATIC_BROKER_CONFIG source to report.
INTEROP_BROKER_CONFIG = {"log.roll.hours": "24"}


@pytest.fixture(scope="module", params=[1, 3], ids=["1-broker", "3-brokers"])
def interop_cluster(request, tmp_path_factory) -> Iterator[LocalCluster]:
    brokers = request.param
    cluster = LocalCluster(brokers=brokers, base_dir=tmp_path_factory.mktemp(f"interop-{brokers}"), config={**TEST_BROKER_CONFIG, **INTEROP_BROKER_CONFIG})
    with cluster:
        yield cluster


@pytest.fixture
def names(request) -> str:
    """A prefix unique to this test and run, for its topics and groups."""
    return f"{request.node.originalname.removeprefix('test_')[:40]}-{next(_SERIAL)}"
