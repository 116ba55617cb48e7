"""A real bundled cluster (broker OS processes) for the workload tests."""

import pytest

from cluster.launcher import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, base_dir=tmp_path_factory.mktemp("cluster"), seed=1) as running:
        yield running
