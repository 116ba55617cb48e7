"""Eligible leader replicas (KIP-966) end to end on real processes: three broker processes
and a controller process, confluent-kafka clients, real SIGSTOP / SIGKILL / SIGTERM, with
`log.crash.lose.unflushed=true` (a SIGKILL drops what the broker had not fsynced) and min ISR
2. The partition's ISR and ELR are read from the controller's metadata log.

1. Acknowledged records reach every replica; both followers are stalled past the session
   timeout: fenced, the ISR shrinks to the leader, the follower fenced last becomes eligible
   (ELR). Alone, the leader acknowledges nothing (min ISR 2). SIGKILLed, it loses the records
   (never flushed); restarted without a clean-shutdown marker it leaves the ISR and the ELR
   and is not elected, though it is the last ISR member. The eligible follower leads once
   resumed, and every acknowledged record is there. (Without ELR the restarted leader would
   be the ISR again and lead with an empty log: tests/cluster/sim/test_last_replica_standing.py.)
2. The same stall, then the lone leader stopped with SIGTERM: it writes the clean-shutdown
   marker with its broker epoch, stays eligible, and on restart (marker taken) leads again from
   the ELR while both followers are still stalled.
"""

from __future__ import annotations

import datetime
import json
import os

from confluent_kafka import Producer

from cluster.broker.clean_shutdown import MARKER_FILE
from cluster.launcher import LocalCluster
from cluster.metadata.records import METADATA_TOPIC, NO_LEADER, PartitionRecord, TopicRecord, decode_record
from cluster.protocol.client import WireClient
from cluster.protocol.codec import build
from cluster.protocol.records import read_records
from cluster.protocol.versions import ApiKey
from cluster.storage.batch import parse_header, split_batches
from tests.cluster.controller.driver import req
from tests.cluster.kafka_helpers import create_topic, wait_for
from tests.cluster.replication_helpers import FAST_FAILOVER, produce_directly, read_partition

TOPIC = "eligible"
RECORDS = 200
SETTINGS = {**FAST_FAILOVER, "min.insync.replicas": "2", "log.crash.lose.unflushed": "true", "default.replication.factor": "3"}
WAIT_S = 30  # only a hang reaches it


def partition_record(cluster: LocalCluster) -> PartitionRecord | None:
    """The partition's latest state in the controller's metadata log (Fetch v12 from 0)."""
    part = req(ApiKey.FETCH, 12, "FetchPartition")
    topic = req(ApiKey.FETCH, 12, "FetchTopic")
    fetch_partition = build(part, partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=1 << 25)
    with WireClient(cluster.controller.host, cluster.controller.port) as client:
        body = client.request(ApiKey.FETCH, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 25,
                              isolation_level=0, session_id=0, session_epoch=-1,
                              topics=(build(topic, topic=METADATA_TOPIC, partitions=(fetch_partition,)),), forgotten_topics_data=(),
                              rack_id="")
    topic_id, state = None, None
    for _, batch in split_batches(body.responses[0].partitions[0].records or b""):
        if parse_header(batch).is_control:
            continue
        for r in read_records(bytes(batch)):
            record = decode_record(r.value, f"at offset {r.offset}")
            if isinstance(record, TopicRecord) and record.name == TOPIC:
                topic_id = record.topic_id
            elif isinstance(record, PartitionRecord) and record.topic_id == topic_id and record.partition == 0:
                state = record
    return state


def _wait_state(cluster: LocalCluster, what: str, predicate) -> PartitionRecord:
    return wait_for(lambda: (p := partition_record(cluster)) is not None and predicate(p) and p, WAIT_S, what)


def _stall_followers(cluster: LocalCluster) -> tuple[int, list[int], PartitionRecord]:
    """With ISR [0, 1, 2]: SIGSTOP both followers until fenced. The leader, the followers, and
    the partition then: ISR [leader], the follower fenced last eligible."""
    full = _wait_state(cluster, "ISR of 3", lambda p: len(p.isr) == 3 and p.leader != NO_LEADER)
    leader = full.leader
    followers = [b for b in (0, 1, 2) if b != leader]
    for b in followers:
        cluster.pause(b)
    state = _wait_state(cluster, "the followers fenced", lambda p: p.isr == (leader,) and p.elr)
    assert set(state.elr) <= set(followers) and state.leader == leader, state
    return leader, followers, state


def test_fenced_followers_keep_what_a_crashed_lone_leader_lost_and_a_clean_stop_stays_eligible(make_cluster) -> None:
    cluster = make_cluster(brokers=3, config=SETTINGS)
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1, replication_factor=3)
    _wait_state(cluster, "ISR of 3", lambda p: len(p.isr) == 3)
    acked: set[str] = set()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for n in range(RECORDS):
        producer.produce(TOPIC, value=f"r{n}", partition=0,
                         on_delivery=lambda err, msg: acked.add(msg.value().decode()) if err is None else None)
    assert producer.flush(WAIT_S) == 0 and len(acked) == RECORDS

    # 1. The lone leader's crash.
    leader, followers, state = _stall_followers(cluster)
    eligible = state.elr
    host, port = cluster.brokers[leader].host, cluster.brokers[leader].port
    # Min ISR 2: alone, the leader acknowledges nothing more.
    assert produce_directly(host, port, TOPIC, 0, b"alone", acks=-1, timeout_ms=5000) == "not_enough_replicas"
    cluster.kill(leader)
    assert not os.path.exists(os.path.join(cluster.brokers[leader].data_dir, MARKER_FILE)), "a SIGKILL left a clean-shutdown marker"
    cluster.start(leader)  # ready: registered (no marker: an unclean shutdown) and unfenced
    state = partition_record(cluster)
    assert state is not None and (state.leader, state.isr, state.elr) == (NO_LEADER, (), eligible), \
        f"the crashed last ISR member must leave the ISR and ELR and not lead: {state}"
    for b in followers:
        cluster.resume(b)
    state = _wait_state(cluster, "an eligible follower leads", lambda p: p.leader != NO_LEADER)
    assert state.leader in eligible and not state.leader_recovering, state
    values = {v for _, v in read_partition(bootstrap, TOPIC, 0, idle_s=2)}
    lost = acked - values
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    assert "alone" not in values

    # 2. The lone leader's clean stop.
    leader, followers, state = _stall_followers(cluster)
    eligible = state.elr
    epoch_file = os.path.join(cluster.brokers[leader].data_dir, MARKER_FILE)
    assert cluster.stop(leader) == 0
    with open(epoch_file) as f:
        assert json.load(f)["broker_epoch"] >= 0
    state = partition_record(cluster)
    assert state is not None and state.isr == () and leader in state.elr and set(eligible) <= set(state.elr), state
    cluster.start(leader)  # registers with its previous epoch: no unclean shutdown
    assert not os.path.exists(epoch_file), "the marker is taken at start, so a later crash is not mistaken for a clean stop"
    state = _wait_state(cluster, "the cleanly stopped broker leads again", lambda p: p.leader != NO_LEADER)
    assert (state.leader, state.isr, state.leader_recovering) == (leader, (leader,), False), state
    for b in followers:
        cluster.resume(b)
    values = {v for _, v in read_partition(bootstrap, TOPIC, 0, idle_s=2)}
    assert not acked - values
