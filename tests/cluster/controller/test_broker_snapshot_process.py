"""Real processes: a broker restarted after a snapshot moved the controller's log start loads
the snapshot with FetchSnapshot (a restarted broker's metadata starts at offset 0), registers,
is unfenced, serves the controller's metadata and takes its part in acks=all writes again.
Before, its metadata fetch was refused OFFSET_OUT_OF_RANGE forever and it never became ready."""

from __future__ import annotations

import glob
import os

from cluster.launcher import LocalCluster
from tests.cluster.kafka_helpers import create_topic, partition_view, produce_numbered, wait_for
from tests.cluster.replication_helpers import read_partition

TOPICS = [f"s{i}" for i in range(4)]


def snapshot_end_offsets(cluster: LocalCluster) -> list[int]:
    """End offsets of the snapshots the controller holds (their file names start with it)."""
    controller = cluster.controllers[0]
    files = glob.glob(os.path.join(controller.data_dir, "**", "*.checkpoint"), recursive=True)
    return [int(os.path.basename(f).split("-")[0]) for f in files]


def test_restarted_broker_loads_the_controllers_snapshot(make_cluster) -> None:
    cluster: LocalCluster = make_cluster(brokers=3, config={"metadata.log.max.record.bytes.between.snapshots": "512",
                                                            "min.insync.replicas": "3"})
    bootstrap = cluster.bootstrap_servers
    for topic in TOPICS:
        create_topic(bootstrap, topic, 1, replication_factor=3)
    wait_for(lambda: any(end > 0 for end in snapshot_end_offsets(cluster)), 20, "a controller snapshot past offset 0")
    cluster.kill(2)
    log_size_before = os.path.getsize(cluster.brokers[2].log_path)
    cluster.start(2)  # waits until registered and unfenced: it has caught up with the metadata
    restarted = cluster.brokers[2].address
    for topic in TOPICS:
        wait_for(lambda: (v := partition_view(restarted, topic, 0)) and v == partition_view(cluster.brokers[0].address, topic, 0)
                 and len(v.isr) == 3, 30, f"broker 2 reporting {topic}-0 as broker 0 does, ISR whole")
    # min.insync.replicas=3: every acknowledged write went through the restarted broker too.
    errors = produce_numbered(bootstrap, TOPICS[0], 50, keys=5, extra={"acks": "all"})
    assert not errors, errors[:3]
    assert len(read_partition(restarted, TOPICS[0], 0)) == 50
    with open(cluster.brokers[2].log_path, "rb") as log_file:
        log_file.seek(log_size_before)
        text = log_file.read().decode(errors="replace")
    assert "loaded the controllers' snapshot" in text  # in the restarted incarnation's log
