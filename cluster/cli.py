"""`logquake cluster start|stop|status`: run the bundled cluster for a person (kcat, clients).

`start` launches the controller and the brokers as detached processes (pid files and
cluster.json in the data dir) and prints the bootstrap servers; `stop` shuts the brokers
down cleanly (controlled shutdown), then the controller; `status` shows each process and,
over the Kafka protocol, every partition's leader, replicas, ISR, leader epoch, and each
replica's log end offset and high watermark.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from kio.index import EntityType

from cluster.config import parse_assignments
from cluster.control import pid_running
from cluster.launcher import CONTROLLER_COUNTS, CONTROLLER_NODE_ID, MAX_BROKERS, BrokerStartError, LocalCluster, quorum_leader
from cluster.protocol.client import ProtocolClientError, WireClient
from cluster.protocol.codec import payload_class
from cluster.protocol.versions import ApiKey
from cluster.text_table import render

STATE_FILE = "cluster.json"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_ARGUMENTS = 254
DEFAULT_PORT = 9092
DEFAULT_BROKERS = 3


@dataclass
class BrokerRecord:
    """One process of a started cluster (a broker, or the controller: CONTROLLER_NODE_ID)."""

    broker_id: int
    host: str
    port: int
    pid: int
    data_dir: str
    log_path: str

    @property
    def name(self) -> str:
        if self.broker_id == CONTROLLER_NODE_ID:
            return "controller"
        return f"controller {self.broker_id}" if self.broker_id > CONTROLLER_NODE_ID else f"broker {self.broker_id}"


@dataclass
class ReplicaOffsets:
    broker_id: int
    log_end_offset: int | None  # None: the replica did not answer
    high_watermark: int | None


@dataclass
class PartitionRow:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offsets: list[ReplicaOffsets] = field(default_factory=list)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="run the bundled Kafka-compatible cluster")
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    start = sub.add_parser("start", help="start broker processes in the background")
    start.add_argument("--brokers", type=int, default=DEFAULT_BROKERS, help=f"number of brokers, 1-{MAX_BROKERS} (default {DEFAULT_BROKERS})")
    start.add_argument("--data-dir", required=True)
    start.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on each broker's own address (default {DEFAULT_PORT})")
    start.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="broker property (repeatable)")
    start.add_argument("--controllers", type=int, default=1,
                       help="controllers: 1, or a Raft metadata quorum of 3 or 5 (node ids 1000.., on 127.0.0.9 downwards; default 1)")
    start.set_defaults(handler=_start)

    stop = sub.add_parser("stop", help="stop the brokers started with --data-dir")
    stop.add_argument("--data-dir", required=True)
    stop.set_defaults(handler=_stop)

    status = sub.add_parser("status", help="show processes and, per partition, leader, ISR, epochs, log end and high watermark")
    status.add_argument("--data-dir", required=True)
    status.set_defaults(handler=_status)


def _fail(message: str, code: int) -> int:
    print(f"logquake cluster: {message}", file=sys.stderr)
    return code


def _read_state(data_dir: str) -> list[BrokerRecord] | None:
    path = os.path.join(data_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            document = json.load(f)
        records = [BrokerRecord(**entry) for entry in document["brokers"]]
        if document.get("controllers"):
            records += [BrokerRecord(**entry) for entry in document["controllers"]]
        elif document.get("controller"):
            records.append(BrokerRecord(**document["controller"]))
        return records
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a cluster state file ({error})") from None


def _start(args: argparse.Namespace) -> int:
    if args.brokers < 1 or args.brokers > MAX_BROKERS:
        return _fail(f"--brokers {args.brokers}: must lie in 1-{MAX_BROKERS}", EXIT_BAD_ARGUMENTS)
    if args.controllers not in CONTROLLER_COUNTS:
        return _fail(f"--controllers {args.controllers}: must be one of {', '.join(map(str, CONTROLLER_COUNTS))}", EXIT_BAD_ARGUMENTS)
    try:
        config = parse_assignments(args.config)
    except ValueError as error:
        return _fail(str(error), EXIT_BAD_ARGUMENTS)
    data_dir = os.path.abspath(args.data_dir)
    try:
        existing = _read_state(data_dir)
    except ValueError as error:
        return _fail(str(error), EXIT_FAILED)
    if existing and any(pid_running(b.pid) for b in existing):
        return _fail(f"a cluster is already running from {data_dir}; stop it first", EXIT_FAILED)
    cluster = LocalCluster(args.brokers, base_dir=data_dir, config=config, port=args.port, die_with_parent=False,
                           controllers=args.controllers)
    try:
        cluster.__enter__()
    except (BrokerStartError, ValueError, OSError) as error:
        return _fail(f"start failed: {error}", EXIT_FAILED)
    records = [BrokerRecord(b.broker_id, b.host, b.port, b.pid or -1, b.data_dir, b.log_path) for b in cluster.brokers]
    controllers = [BrokerRecord(c.broker_id, c.host, c.port, c.pid or -1, c.data_dir, c.log_path) for c in cluster.controllers]
    cluster.detach()
    with open(os.path.join(data_dir, STATE_FILE), "w") as f:
        json.dump({"brokers": [asdict(r) for r in records], "controller": asdict(controllers[0]),
                   "controllers": [asdict(c) for c in controllers]}, f, indent=1)
    for record in [*records, *controllers]:
        with open(os.path.join(data_dir, _pid_file_name(record)), "w") as f:
            f.write(f"{record.pid}\n")
    print(",".join(f"{r.host}:{r.port}" for r in records))
    return EXIT_OK


def _pid_file_name(record: BrokerRecord) -> str:
    if record.broker_id == CONTROLLER_NODE_ID:
        return "controller.pid"
    return f"controller-{record.broker_id}.pid" if record.broker_id > CONTROLLER_NODE_ID else f"broker-{record.broker_id}.pid"


def _stop(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    try:
        records = _read_state(data_dir)
    except ValueError as error:
        return _fail(str(error), EXIT_FAILED)
    if records is None:
        return _fail(f"no cluster state in {data_dir}", EXIT_FAILED)
    brokers = [r for r in records if r.broker_id < CONTROLLER_NODE_ID]
    controllers = [r for r in records if r.broker_id >= CONTROLLER_NODE_ID]
    # Brokers first and side by side: each controlled shutdown needs the controller.
    with ThreadPoolExecutor(max_workers=max(1, len(brokers))) as pool:
        lines = list(pool.map(lambda r: _stop_one(data_dir, r), brokers))
    lines += [_stop_one(data_dir, r) for r in controllers]
    for line in lines:
        print(line)
    return EXIT_OK


def _stop_one(data_dir: str, record: BrokerRecord, timeout_s: float = 30.0) -> str:
    pid_file = os.path.join(data_dir, _pid_file_name(record))
    try:
        if not pid_running(record.pid):
            return f"{record.name}: not running"
        os.kill(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pid_running(record.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_running(record.pid):
            os.kill(record.pid, signal.SIGKILL)
            return f"{record.name}: killed (pid {record.pid}) after {timeout_s:.0f} s"
        return f"{record.name}: stopped (pid {record.pid})"
    finally:
        if os.path.exists(pid_file):
            os.remove(pid_file)


def _partition_rows(brokers: list[BrokerRecord]) -> list[PartitionRow]:
    """Every partition's state from the first broker that answers Metadata, then each replica's
    own log end and high watermark, asked of that replica (replica id -2, Kafka's debugging
    id, is answered by followers too)."""
    metadata = None
    errors = []
    for record in brokers:
        if not pid_running(record.pid):
            continue
        try:
            with WireClient(record.host, record.port) as client:
                metadata = client.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            break
        except (OSError, ProtocolClientError) as error:
            errors.append(f"{record.name}: {error}")
    if metadata is None:
        raise ProtocolClientError("no broker answered Metadata" + (f" ({'; '.join(errors)})" if errors else ""))
    rows = []
    for topic in sorted(metadata.topics, key=lambda t: t.name):
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            rows.append(PartitionRow(topic.name, p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes)))
    by_id = {r.broker_id: r for r in brokers}
    for broker_id, record in sorted(by_id.items()):
        mine = [row for row in rows if broker_id in row.replicas]
        if not mine:
            continue
        client = None
        try:
            if pid_running(record.pid):
                client = WireClient(record.host, record.port)
            for row in mine:
                leo = hwm = None
                if client is not None:
                    try:
                        hwm = _high_watermark(client, row.topic, row.partition)
                        leo = _log_end(client, row.topic, row.partition)
                    except (OSError, ProtocolClientError, IndexError):
                        pass
                row.offsets.append(ReplicaOffsets(broker_id, leo, hwm))
        except OSError:
            for row in mine:
                row.offsets.append(ReplicaOffsets(broker_id, None, None))
        finally:
            if client is not None:
                client.close()
    return rows


def _list_offset(client: WireClient, topic: str, partition: int, timestamp: int) -> int:
    topic_cls = payload_class(ApiKey.LIST_OFFSETS, 7, "ListOffsetsTopic", EntityType.request)
    partition_cls = payload_class(ApiKey.LIST_OFFSETS, 7, "ListOffsetsPartition", EntityType.request)
    response = client.request(
        ApiKey.LIST_OFFSETS, 7, replica_id=-2, isolation_level=0,
        topics=(topic_cls(name=topic, partitions=(partition_cls(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp),)),),
    )
    return response.topics[0].partitions[0].offset


def _log_end(client: WireClient, topic: str, partition: int) -> int:
    """The replica's own log end offset: ListOffsets(latest) as Kafka's debugging replica id
    (-2) asks it, which any replica answers, leader or follower."""
    return _list_offset(client, topic, partition, -1)


def _high_watermark(client: WireClient, topic: str, partition: int) -> int:
    """The replica's own high watermark, from a zero-wait Fetch as the debugging replica."""
    topic_cls = payload_class(ApiKey.FETCH, 12, "FetchTopic", EntityType.request)
    partition_cls = payload_class(ApiKey.FETCH, 12, "FetchPartition", EntityType.request)
    response = client.request(
        ApiKey.FETCH, 12, replica_id=-2, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1, isolation_level=0, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(topic_cls(topic=topic, partitions=(partition_cls(partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                                                 log_start_offset=-1, partition_max_bytes=1),)),),
    )
    answer = response.responses[0].partitions[0]
    if answer.error_code.value != 0:
        raise ProtocolClientError(f"Fetch: {answer.error_code.name}")
    return answer.high_watermark


def _status(args: argparse.Namespace) -> int:
    data_dir = os.path.abspath(args.data_dir)
    try:
        records = _read_state(data_dir)
    except ValueError as error:
        return _fail(str(error), EXIT_FAILED)
    if records is None:
        return _fail(f"no cluster state in {data_dir}", EXIT_FAILED)
    alive = {record.name: pid_running(record.pid) for record in records}
    all_alive = all(alive.values())
    for line in process_lines(records, alive):
        print(line)
    brokers = [r for r in records if r.broker_id < CONTROLLER_NODE_ID]
    controllers = [r for r in records if r.broker_id >= CONTROLLER_NODE_ID]
    if len(controllers) > 1:
        leader = None
        for record in controllers:
            if pid_running(record.pid):
                try:
                    leader = quorum_leader(record.host, record.port)
                    break
                except (OSError, ProtocolClientError):
                    continue
        print(f"active controller: {'none known' if leader is None else leader}")
    try:
        rows = _partition_rows(brokers)
    except ProtocolClientError as error:
        print(f"partitions: unknown ({error})")
        return EXIT_FAILED
    print()
    for line in partition_lines(rows):
        print(line)
    return EXIT_OK if all_alive else EXIT_FAILED


def process_lines(records: list[BrokerRecord], alive: dict[str, bool]) -> list[str]:
    """One aligned line per process: name, pid, address, alive or DOWN, log."""
    return render([[record.name, f"pid {record.pid}", f"{record.host}:{record.port}", "alive" if alive[record.name] else "DOWN",
                    f"log {record.log_path}"] for record in records])


def partition_lines(rows: list[PartitionRow]) -> list[str]:
    """The partitions table, header first, in aligned columns."""
    table = [["topic", "part", "leader", "epoch", "replicas", "isr", "log end / high watermark per replica"]]
    for row in rows:
        per_replica = "  ".join(
            f"b{o.broker_id}:{'?' if o.log_end_offset is None else o.log_end_offset}/{'?' if o.high_watermark is None else o.high_watermark}"
            for o in row.offsets
        )
        table.append([row.topic, str(row.partition), "none" if row.leader < 0 else str(row.leader), str(row.leader_epoch),
                      ",".join(map(str, row.replicas)), ",".join(map(str, row.isr)), per_replica])
    return render(table, right={1, 2, 3})
