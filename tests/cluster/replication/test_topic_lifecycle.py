"""Replica directories follow the topic, not its name: a replica that was down while its
topic was deleted removes the old log when it learns of the deletion, and a topic re-created
under the same name never inherits the old topic's records."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from cluster.broker.replica_manager import PARTITION_METADATA_FILE
from cluster.protocol.records import Record, build_batch
from cluster.protocol.versions import ApiKey
from cluster.sim.cluster import SimCluster
from cluster.storage.config import LogConfig
from cluster.storage.log import PartitionLog
from tests.cluster.replication.scenario import TOPIC, answer, followers, leader, log_entries, produce, replica, start, wait_isr
from tests.cluster.sim.sim_requests import create_topic, read_all


def delete_topic(sim: SimCluster, broker_id: int) -> None:
    body = sim.call(broker_id, ApiKey.DELETE_TOPICS, 4, topic_names=(TOPIC,), timeout=datetime.timedelta(seconds=10))
    assert body.responses[0].error_code == ErrorCode.none, body


def test_a_replica_down_during_deletion_drops_the_old_log() -> None:
    sim = start(min_isr=1)
    lead = leader(sim)
    for i in range(3):
        assert answer(sim, produce(sim, lead, f"old-{i}".encode()))[0] == ErrorCode.none
    away = followers(sim, lead)[0]
    sim.run_for(500)
    assert replica(sim, away).log_end_offset == 3
    sim.kill(away)
    delete_topic(sim, lead)
    sim.start_broker(away)
    sim.run_until(lambda: sim.broker(away).ready, 10_000, what="the restarted broker ready")
    sim.run_for(500)
    directory = f"{sim.broker_config(away).data_dir}/{TOPIC}-0"
    assert not sim.broker(away).replicas.disk.exists(directory), "the deleted topic's log outlived the deletion"
    assert create_topic(sim, lead, TOPIC, 1, 3).error_code == ErrorCode.none
    wait_isr(sim, {0, 1, 2})
    new_leader = leader(sim)
    assert answer(sim, produce(sim, new_leader, b"new-0"))[0] == ErrorCode.none
    sim.run_until(lambda: log_entries(replica(sim, away)) == log_entries(replica(sim, new_leader)), 10_000,
                  what="the restarted replica holding the new topic's log")
    assert [v for _, v in read_all(sim, new_leader, TOPIC)] == [b"new-0"]


def test_a_log_left_by_another_topic_of_the_same_name_is_not_reused() -> None:
    sim = SimCluster(3, {"min.insync.replicas": "1"}, seed=5)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), 10_000, what="brokers ready")
    stale_broker = sim.broker(2)
    directory = f"{sim.broker_config(2).data_dir}/{TOPIC}-0"
    stale = PartitionLog.open(stale_broker.replicas.disk, directory, LogConfig(), now_ms=0)
    for i in range(3):
        stale.append(build_batch([Record(None, b"stale")], base_offset=i, timestamp_ms=0, partition_leader_epoch=0), now_ms=0)
    stale.close()
    stale_broker.replicas.disk.write_atomic(f"{directory}/{PARTITION_METADATA_FILE}", f"version: 0\ntopic_id: {uuid.uuid4()}\n".encode())
    assert create_topic(sim, 0, TOPIC, 1, 3).error_code == ErrorCode.none
    wait_isr(sim, {0, 1, 2})
    lead = leader(sim)
    assert answer(sim, produce(sim, lead, b"fresh"))[0] == ErrorCode.none
    sim.run_until(lambda: replica(sim, 2).log_end_offset == 1, 10_000, what="broker 2 copying the new topic's record")
    assert log_entries(replica(sim, 2)) == log_entries(replica(sim, lead))
    assert [v for _, v in read_all(sim, lead, TOPIC)] == [b"fresh"]
