"""`logquake cluster start|stop|status`: run the bundled cluster for a person (kcat, clients).

`start` launches detached broker processes (pid files and cluster.json in the data dir) and
prints the bootstrap servers; `stop` shuts them down cleanly; `status` shows each broker's
process and, over the Kafka protocol, each partition's log start, log end, high watermark
and leader epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass

from kio.index import EntityType

from cluster.config import parse_assignments
from cluster.launcher import MAX_BROKERS_WITHOUT_REPLICATION, BrokerStartError, LocalCluster
from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.protocol.codec import payload_class
from cluster.protocol.versions import ApiKey

STATE_FILE = "cluster.json"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_ARGUMENTS = 254
DEFAULT_PORT = 9092


@dataclass
class BrokerRecord:
    broker_id: int
    host: str
    port: int
    pid: int
    data_dir: str
    log_path: str


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="run the bundled Kafka-compatible cluster")
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    start = sub.add_parser("start", help="start broker processes in the background")
    start.add_argument("--brokers", type=int, default=1, help="number of brokers (1 until replication exists)")
    start.add_argument("--data-dir", required=True)
    start.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on each broker's own address (default {DEFAULT_PORT})")
    start.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="broker property (repeatable)")
    start.set_defaults(handler=_start)

    stop = sub.add_parser("stop", help="stop the brokers started with --data-dir")
    stop.add_argument("--data-dir", required=True)
    stop.set_defaults(handler=_stop)

    status = sub.add_parser("status", help="show brokers and partitions")
    status.add_argument("--data-dir", required=True)
    status.set_defaults(handler=_status)


def _fail(message: str, code: int) -> int:
    print(f"logquake cluster: {message}", file=sys.stderr)
    return code


def _read_state(data_dir: str) -> list[BrokerRecord] | None:
    path = os.path.join(data_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [BrokerRecord(**entry) for entry in json.load(f)["brokers"]]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


def _start(args: argparse.Namespace) -> int:
    if args.brokers < 1 or args.brokers > MAX_BROKERS_WITHOUT_REPLICATION:
        return _fail(
            f"--brokers {args.brokers}: only 1 is supported until replication lands; several brokers with "
            "independent logs would not be a cluster",
            EXIT_BAD_ARGUMENTS,
        )
    try:
        config = parse_assignments(args.config)
    except ValueError as error:
        return _fail(str(error), EXIT_BAD_ARGUMENTS)
    data_dir = os.path.abspath(args.data_dir)
    existing = _read_state(data_dir)
    if existing and any(_pid_alive(b.pid) for b in existing):
        return _fail(f"a cluster is already running from {data_dir}; stop it first", EXIT_FAILED)
    cluster = LocalCluster(args.brokers, base_dir=data_dir, config=config, port=args.port, die_with_parent=False)
    try:
        cluster.__enter__()
    except (BrokerStartError, ValueError, OSError) as error:
        return _fail(f"start failed: {error}", EXIT_FAILED)
    records = [BrokerRecord(b.broker_id, b.host, b.port, b.pid or -1, b.data_dir, b.log_path) for b in cluster.brokers]
    cluster.detach()
    with open(os.path.join(data_dir, STATE_FILE), "w") as f:
        json.dump({"brokers": [asdict(r) for r in records]}, f, indent=1)
    for record in records:
        with open(os.path.join(data_dir, f"broker-{record.broker_id}.pid"), "w") as f:
            f.write(f"{record.pid}\n")
    print(",".join(f"{r.host}:{r.port}" for r in records))
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    records = _read_state(data_dir)
    if records is None:
        return _fail(f"no cluster state in {data_dir}", EXIT_FAILED)
    for record in records:
        if not _pid_alive(record.pid):
            print(f"broker {record.broker_id}: not running")
            continue
        os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _pid_alive(record.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid_alive(record.pid):
            os.kill(record.pid, signal.SIGKILL)
            print(f"broker {record.broker_id}: killed (pid {record.pid}) after 15 s")
        else:
            print(f"broker {record.broker_id}: stopped (pid {record.pid})")
        pid_file = os.path.join(data_dir, f"broker-{record.broker_id}.pid")
        if os.path.exists(pid_file):
            os.remove(pid_file)
    return EXIT_OK


def _partition_rows(record: BrokerRecord) -> list[tuple[str, int, int, int, int, int]]:
    """(topic, partition, log start, log end, high watermark, leader epoch) over the protocol."""
    with WireClient(record.host, record.port) as client:
        metadata = client.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        rows = []
        for topic in sorted(metadata.topics, key=lambda t: t.name):
            if topic.is_internal:
                continue
            for p in sorted(topic.partitions, key=lambda p: p.partition_index):
                start, hwm = (_list_offset(client, topic.name, p.partition_index, ts) for ts in (-2, -1))
                leo = _log_end(client, topic.name, p.partition_index, p.leader_epoch)
                rows.append((topic.name, p.partition_index, start, leo, hwm, p.leader_epoch))
        return rows


def _list_offset(client: WireClient, topic: str, partition: int, timestamp: int) -> int:
    topic_cls = payload_class(ApiKey.LIST_OFFSETS, 7, "ListOffsetsTopic", EntityType.request)
    partition_cls = payload_class(ApiKey.LIST_OFFSETS, 7, "ListOffsetsPartition", EntityType.request)
    response = client.request(
        ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
        topics=(topic_cls(name=topic, partitions=(partition_cls(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp),)),),
    )
    return response.topics[0].partitions[0].offset


def _log_end(client: WireClient, topic: str, partition: int, epoch: int) -> int:
    # OffsetForLeaderEpoch for the current epoch answers the leader's log end offset.
    topic_cls = payload_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, "OffsetForLeaderTopic", EntityType.request)
    partition_cls = payload_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, "OffsetForLeaderPartition", EntityType.request)
    response = client.request(
        ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-2,
        topics=(topic_cls(topic=topic, partitions=(partition_cls(partition=partition, current_leader_epoch=epoch, leader_epoch=epoch),)),),
    )
    return response.topics[0].partitions[0].end_offset


def _status(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    records = _read_state(data_dir)
    if records is None:
        return _fail(f"no cluster state in {data_dir}", EXIT_FAILED)
    all_alive = True
    for record in records:
        alive = _pid_alive(record.pid)
        all_alive &= alive
        print(f"broker {record.broker_id}  pid {record.pid}  {record.host}:{record.port}  {'alive' if alive else 'DOWN'}  log {record.log_path}")
        if not alive:
            continue
        try:
            rows = _partition_rows(record)
        except (OSError, ProtocolClientError) as error:
            print(f"  (not answering over the protocol: {error})")
            all_alive = False
            continue
        print(f"  {'topic':<30} {'part':>4} {'log start':>10} {'LEO':>10} {'HWM':>10} {'epoch':>6}")
        for topic, partition, start, leo, hwm, epoch in rows:
            print(f"  {topic:<30} {partition:>4} {start:>10} {leo:>10} {hwm:>10} {epoch:>6}")
    return EXIT_OK if all_alive else EXIT_FAILED
