"""Run INSIDE a private namespace (through nemeses.net.sandbox) by test_recovery_after_heal:

    python -m tests.harness.recovery_scenario

A real 3-broker cluster (min.insync.replicas=2, one topic of 6 partitions, replication
factor 3) takes acks=all idempotent sends from client threads at a steady rate. Brokers 0
and 2 are cut from each other for PARTITION_S (longer than the ~13 s it takes TCP's
exponential backoff to push a retry past the heal), then healed. Prints one JSON line: the
ok send times, relative to the heal, and the partition's timing.

Each thread sends with one producer, waits for the acknowledgement up to 10 s, and after a
timeout continues with a fresh producer, as the harness's workers do.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.control import ClusterControl
from cluster.launcher import LocalCluster
from nemeses.net.nft import NftPartitioner

PRE_FAULT_S = 7.0
PARTITION_S = 15.0
AFTER_HEAL_S = 10.0
THREADS = 4
SEND_INTERVAL_S = 0.05  # each thread at most 20 sends/s
SEND_TIMEOUT_S = 10.0
PARTITIONS = 6
PRODUCER_CONFIG = {"acks": "all", "enable.idempotence": "true", "linger.ms": "0", "message.timeout.ms": "10000",
                   "request.timeout.ms": "3000", "reconnect.backoff.max.ms": "1000",
                   "socket.connection.setup.timeout.ms": "1000"}


def sender(bootstrap: str, thread: int, stop: threading.Event, oks: list[float]) -> None:
    producer = Producer({**PRODUCER_CONFIG, "bootstrap.servers": bootstrap})
    n = 0
    while not stop.is_set():
        report: list = []
        partition = (thread + n) % PARTITIONS
        n += 1
        producer.produce("t", value=str(n).encode(), partition=partition, on_delivery=lambda err, msg: report.append(err))
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while not report and time.monotonic() < deadline and not stop.is_set():
            producer.poll(0.05)
        if report and report[0] is None:
            oks.append(time.monotonic())
        elif not report:  # timed out: a fresh producer, as a retired process gets
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer = Producer({**PRODUCER_CONFIG, "bootstrap.servers": bootstrap})
        stop.wait(SEND_INTERVAL_S)


def main() -> dict:
    with tempfile.TemporaryDirectory(prefix="logquake-recovery-") as base, \
            LocalCluster(brokers=3, base_dir=base, config={"min.insync.replicas": "2"}) as cluster:
        control = ClusterControl(cluster)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        for future in admin.create_topics([NewTopic("t", PARTITIONS, 3)]).values():
            future.result(timeout=30)
        partitioner = NftPartitioner()
        partitioner.install()
        stop = threading.Event()
        oks: list[float] = []
        threads = [threading.Thread(target=sender, args=(cluster.bootstrap_servers, i, stop, oks), daemon=True)
                   for i in range(THREADS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(PRE_FAULT_S)
        hosts = control.hosts()
        cut_at = time.monotonic()
        partitioner.apply(blocked=[(hosts[0], hosts[2]), (hosts[2], hosts[0])])
        time.sleep(PARTITION_S)
        partitioner.heal()
        healed_at = time.monotonic()
        time.sleep(AFTER_HEAL_S)
        stop.set()
        for t in threads:
            t.join(SEND_TIMEOUT_S + 5)
        control.close()
        return {"started": started - healed_at, "cut": cut_at - healed_at, "oks": sorted(t - healed_at for t in oks),
                "after_heal_s": AFTER_HEAL_S}


if __name__ == "__main__":
    print(json.dumps(main()))
    sys.stdout.flush()
