"""Three controller processes on the Raft metadata quorum under acks=all load: the active
controller is SIGKILLed, another takes over, and a broker leading a partition is killed
after it, so the new active controller must move that leadership. No acknowledged write is
lost, the leadership moved, every broker stays registered (the survivors keep their broker
epoch through the failover), the killed controller rejoins, and the checks over the
controllers' metadata logs and journals find nothing."""

from __future__ import annotations

import time

from cluster.launcher import LocalCluster
from cluster.controller.quorum_journal import collect_quorum_report
from tests.cluster.kafka_helpers import create_topic, partition_view, wait_for
from tests.cluster.replication_helpers import FAST_FAILOVER, ContinuousProducer, read_partition

SAFE_PRODUCER = {"acks": "all", "enable.idempotence": True, "message.timeout.ms": 60_000}
TOPIC = "ledger"


def leader_of(bootstrap: str, partition: int = 0) -> int:
    view = wait_for(lambda: (v := partition_view(bootstrap, TOPIC, partition)) and v.leader >= 0 and v, 30, f"a leader of {TOPIC}-{partition}")
    return view.leader


def test_active_controller_sigkill_under_acks_all_load(make_cluster) -> None:
    cluster: LocalCluster = make_cluster(brokers=3, controllers=3,
                                         config={**FAST_FAILOVER, "default.replication.factor": "3", "min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1, replication_factor=3)
    wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) and len(v.isr) == 3, 30, "an ISR of 3")
    first = wait_for(cluster.active_controller, 30, "an active controller")
    with ContinuousProducer(bootstrap, TOPIC, SAFE_PRODUCER) as producer:
        wait_for(lambda: len(producer.log.acks) > 200, 30, "first acknowledgements")
        cluster.kill(first)
        killed_at = time.monotonic()
        second = wait_for(lambda: (a := cluster.active_controller()) is not None and a != first and a, 30, "a new active controller")
        # Leadership keeps moving: the broker leading the partition dies under the new controller.
        old_leader = leader_of(bootstrap)
        cluster.kill(old_leader)
        wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) and v.leader not in (-1, old_leader), 30,
                 "a new partition leader chosen by the new controller")
        wait_for(lambda: producer.log.acks_after(killed_at + 1.0), 60, "acknowledgements after both kills")
        cluster.start(old_leader)  # registers with the new active controller and rejoins
        cluster.start(first)
        # Every broker registered and unfenced again: all three back in the ISR.
        wait_for(lambda: (v := partition_view(bootstrap, TOPIC, 0)) and len(v.isr) == 3, 60, "the ISR whole again")
        healed_at = time.monotonic()
        wait_for(lambda: producer.log.acks_after(healed_at), 30, "acknowledgements after the heal")
    assert producer.fatal is None, producer.fatal
    acked = producer.log.acked_values()
    stored = {value for _, value in read_partition(bootstrap, TOPIC, 0)}
    lost = acked - stored
    assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {sorted(lost)[:5]}"
    assert cluster.active_controller() in cluster.controller_ids and second != first
    cluster.close()  # the logs are read once the controllers have stopped
    report = collect_quorum_report({c.broker_id: c.data_dir for c in cluster.controllers})
    assert report["valid"], report["violations"]
    assert len(report["nodes"]) == 3 and report["partition_records"]
