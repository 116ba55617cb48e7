"""Broker configuration under Kafka's property names (plus a few of our own, marked).

Properties come in as strings (`--config k=v`, like server.properties). Unknown keys are
kept and ignored, as Kafka does; a known key with a bad value is an error naming the key.
Log settings (`log.*`) are parsed by the storage layer's LogConfig from the same mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster.storage.config import LogConfig


def _int(props: Mapping[str, str], key: str, default: int, minimum: int | None = None) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: not an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{key}={raw!r}: must be >= {minimum}")
    return value


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{key}={raw!r}: expected true or false")


def _probability(props: Mapping[str, str], key: str) -> float:
    raw = props.get(key)
    if raw is None:
        return 0.0
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}={raw!r}: not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{key}={raw!r}: a probability must lie in [0, 1]")
    return value


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["k=v", ...]` from the command line into a mapping; a pair without `=` is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def parse_advertised_listener(text: str) -> tuple[str, int] | None:
    """Kafka's advertised.listeners, restricted to what this broker serves: one PLAINTEXT
    listener, "PLAINTEXT://HOST:PORT". Empty: advertise the bind address (Kafka's default)."""
    text = text.strip()
    if not text:
        return None
    name, sep, address = text.partition("://")
    host, colon, port = address.rpartition(":")
    if "," in text:
        raise ValueError(f"advertised.listeners={text!r}: this broker serves one listener, PLAINTEXT://HOST:PORT")
    if not sep or name != "PLAINTEXT":
        raise ValueError(f"advertised.listeners={text!r}: expected PLAINTEXT://HOST:PORT (the only listener served)")
    try:
        if not colon or not host:
            raise ValueError
        port_number = int(port)
    except ValueError:
        raise ValueError(f"advertised.listeners={text!r}: expected PLAINTEXT://HOST:PORT") from None
    if not 1 <= port_number <= 65535:
        raise ValueError(f"advertised.listeners={text!r}: the port must lie in [1, 65535]")
    return host, port_number


def parse_address_overrides(text: str) -> dict[int, tuple[str, int]]:
    """logquake's own inter.broker.address.overrides: "ID@HOST:PORT,..." -> {ID: (HOST, PORT)}."""
    out: dict[int, tuple[str, int]] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        node, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        try:
            if not at or not colon or not host:
                raise ValueError
            node_id, port_number = int(node), int(port)
        except ValueError:
            raise ValueError(f"inter.broker.address.overrides: {item!r}: expected ID@HOST:PORT") from None
        if node_id in out:
            raise ValueError(f"inter.broker.address.overrides: node {node_id} is named twice")
        if not 1 <= port_number <= 65535:
            raise ValueError(f"inter.broker.address.overrides: {item!r}: the port must lie in [1, 65535]")
        out[node_id] = (host, port_number)
    return out


def parse_voter(text: str) -> tuple[int, str, int]:
    """One voter of KRaft's "ID@HOST:PORT,..." (the first, when several are named)."""
    return parse_voters(text)[0]


def _checked_voters(text: str) -> str:
    if text:
        parse_voters(text)  # raises naming what is wrong
    return text


def parse_voters(text: str) -> list[tuple[int, str, int]]:
    """KRaft's controller.quorum.voters, "ID@HOST:PORT,...": (node id, host, port) of every
    voter in the order named (a broker tries them in that order until it finds the leader)."""
    voters: list[tuple[int, str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        node, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not host or not node.isdigit() or not port.isdigit():
            raise ValueError(f"controller.quorum.voters={text!r}: {item!r} is not ID@HOST:PORT")
        if any(v[0] == int(node) for v in voters):
            raise ValueError(f"controller.quorum.voters={text!r}: node {int(node)} is named twice")
        voters.append((int(node), host, int(port)))
    return voters


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    host: str
    port: int
    data_dir: str
    properties: Mapping[str, str] = field(default_factory=dict)
    log: LogConfig = field(default_factory=LogConfig)
    cluster_id: str = "logquake-cluster"
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    message_max_bytes: int = 1_048_588  # message.max.bytes
    socket_request_max_bytes: int = 104_857_600  # socket.request.max.bytes
    log_flush_scheduler_interval_ms: int = 100  # log.flush.scheduler.interval.ms (Kafka: never; we poll)
    log_retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    producer_id_block_size: int = 1000  # our own: PIDs reserved per persisted block
    # Replication and the controller (KRaft names and defaults).
    # "ID@HOST:PORT" of the controller; empty: this process runs its own controller in
    # process (KRaft's combined mode, process.roles=broker,controller).
    controller_quorum_voters: str = ""  # controller.quorum.voters
    # advertised.listeners (Kafka's): the address registered with the controller and so
    # returned by Metadata and FindCoordinator; None advertises host:port. A proxy in front of
    # the broker is advertised this way, so clients reach the broker only through it.
    advertised_listener: tuple[str, int] | None = None  # advertised.listeners
    # Our own: where this broker dials each other node, by node id, instead of the address
    # that node registered. Kafka dials the advertised address of the inter-broker listener,
    # the same for every source; the bundled cluster gives each broker its own map, so that
    # each directed broker-to-broker link can pass through a proxy of its own.
    inter_broker_address_overrides: Mapping[int, tuple[str, int]] = field(default_factory=dict)  # inter.broker.address.overrides
    controller_request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    broker_heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    replica_lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    replica_fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    replica_fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    replica_fetch_max_bytes: int = 1_048_576  # replica.fetch.max.bytes
    replica_fetch_response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    replica_fetch_backoff_ms: int = 1000  # replica.fetch.backoff.ms
    replica_socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    # max.incremental.fetch.session.cache.slots (KIP-227); 0: every fetch is sessionless
    max_incremental_fetch_session_cache_slots: int = 1000
    min_insync_replicas: int = 1  # min.insync.replicas (topic configs override it)
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable (unsafe when true)
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    # The transaction coordinator (KIP-98), Kafka's names and defaults. The launchers cap the
    # replication factor and min ISR at the broker count, as they do for __consumer_offsets.
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_state_log_replication_factor: int = 3  # transaction.state.log.replication.factor
    transaction_state_log_min_isr: int = 2  # transaction.state.log.min.isr
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # Our own: how long the coordinator holds an AddPartitionsToTxn/AddOffsetsToTxn that meets
    # the previous transaction still completing, answering it once that completes instead of
    # CONCURRENT_TRANSACTIONS at once (cluster.broker.txn.parking); 0 answers as Kafka does.
    transaction_add_partitions_wait_max_ms: int = 500  # transaction.add.partitions.wait.max.ms
    # KIP-890 part 1: a partition leader verifies with the coordinator before a producer's
    # first transactional append (cluster.broker.txn.verifier); false reproduces hanging
    # transactions from late writes (KAFKA-14402).
    transaction_partition_verification_enable: bool = True  # transaction.partition.verification.enable (unsafe when false)
    # Unsafe when true: the last stable offset is the high watermark, as if no transaction were
    # open, so read_committed consumers read records of open transactions, including ones that
    # abort later (the LSO is KIP-98's rule that keeps them out).
    transaction_lso_ignore_open_transactions: bool = False  # transaction.lso.ignore.open.transactions
    # Unsafe when true: TxnOffsetCommit skips KIP-447's member id and generation checks, so a
    # zombie copier whose consumer lost its partitions still commits offsets for them.
    transaction_offset_commit_skip_generation_check: bool = False  # transaction.offset.commit.skip.generation.check
    # Our own unsafe switches, each reproducing a known Kafka data-loss mode:
    # a follower truncates its log to its high watermark when it starts following, instead of
    # finding the divergence point by leader epoch (the pre-KIP-101 behaviour).
    replica_truncate_to_high_watermark: bool = False  # replica.truncate.to.high.watermark
    # consumer fetches are served up to the log end, past the high watermark, so consumers
    # read records that are not committed and may be lost.
    fetch_read_past_high_watermark: bool = False  # fetch.read.past.high.watermark
    # Our own unsafe switch: buffer appended bytes in the process until fsync, so SIGKILL
    # behaves like power loss and drops everything after the last flush.
    log_crash_lose_unflushed: bool = False  # log.crash.lose.unflushed
    # Our own test-only fault: after appending a Produce, close the connection instead of
    # answering, with this probability (seeded RNG).
    test_drop_produce_response_probability: float = 0.0  # test.drop.produce.response.probability

    def controller_endpoint(self) -> tuple[int, str, int] | None:
        """(node id, host, port) of the first voter of controller.quorum.voters; None in
        combined mode."""
        if not self.controller_quorum_voters:
            return None
        return parse_voter(self.controller_quorum_voters)

    def controller_voters(self) -> list[tuple[int, str, int]]:
        """Every voter of controller.quorum.voters (empty in combined mode)."""
        return parse_voters(self.controller_quorum_voters) if self.controller_quorum_voters else []

    @property
    def advertised_host(self) -> str:
        return self.advertised_listener[0] if self.advertised_listener else self.host

    @property
    def advertised_port(self) -> int:
        return self.advertised_listener[1] if self.advertised_listener else self.port

    @property
    def advertised_address(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"

    @classmethod
    def from_properties(cls, broker_id: int, host: str, port: int, data_dir: str, props: Mapping[str, str]) -> BrokerConfig:
        props = dict(props)
        if broker_id < 0:
            raise ValueError(f"broker id must be >= 0, got {broker_id}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must lie in [0, 65535], got {port}")
        return cls(
            broker_id=broker_id,
            host=host,
            port=port,
            data_dir=data_dir,
            properties=props,
            log=LogConfig.from_properties(props),
            cluster_id=props.get("cluster.id", "logquake-cluster"),
            num_partitions=_int(props, "num.partitions", 1, 1),
            default_replication_factor=_int(props, "default.replication.factor", 1, 1),
            auto_create_topics_enable=_bool(props, "auto.create.topics.enable", True),
            offsets_topic_num_partitions=_int(props, "offsets.topic.num.partitions", 50, 1),
            offset_metadata_max_bytes=_int(props, "offset.metadata.max.bytes", 4096, 0),
            group_initial_rebalance_delay_ms=_int(props, "group.initial.rebalance.delay.ms", 3000, 0),
            group_min_session_timeout_ms=_int(props, "group.min.session.timeout.ms", 6000, 0),
            group_max_session_timeout_ms=_int(props, "group.max.session.timeout.ms", 1_800_000, 0),
            message_max_bytes=_int(props, "message.max.bytes", 1_048_588, 0),
            socket_request_max_bytes=_int(props, "socket.request.max.bytes", 104_857_600, 16),
            log_flush_scheduler_interval_ms=_int(props, "log.flush.scheduler.interval.ms", 100, 1),
            log_retention_check_interval_ms=_int(props, "log.retention.check.interval.ms", 300_000, 1),
            producer_id_block_size=_int(props, "producer.id.block.size", 1000, 1),
            controller_quorum_voters=_checked_voters(props.get("controller.quorum.voters", "").strip()),
            advertised_listener=parse_advertised_listener(props.get("advertised.listeners", "")),
            inter_broker_address_overrides=parse_address_overrides(props.get("inter.broker.address.overrides", "")),
            controller_request_timeout_ms=_int(props, "controller.quorum.request.timeout.ms", 2000, 1),
            broker_heartbeat_interval_ms=_int(props, "broker.heartbeat.interval.ms", 2000, 1),
            broker_session_timeout_ms=_int(props, "broker.session.timeout.ms", 9000, 1),
            replica_lag_time_max_ms=_int(props, "replica.lag.time.max.ms", 30_000, 1),
            replica_fetch_wait_max_ms=_int(props, "replica.fetch.wait.max.ms", 500, 0),
            replica_fetch_min_bytes=_int(props, "replica.fetch.min.bytes", 1, 0),
            replica_fetch_max_bytes=_int(props, "replica.fetch.max.bytes", 1_048_576, 1),
            replica_fetch_response_max_bytes=_int(props, "replica.fetch.response.max.bytes", 10_485_760, 1),
            replica_fetch_backoff_ms=_int(props, "replica.fetch.backoff.ms", 1000, 0),
            replica_socket_timeout_ms=_int(props, "replica.socket.timeout.ms", 30_000, 1),
            max_incremental_fetch_session_cache_slots=_int(props, "max.incremental.fetch.session.cache.slots", 1000, 0),
            min_insync_replicas=_int(props, "min.insync.replicas", 1, 1),
            unclean_leader_election_enable=_bool(props, "unclean.leader.election.enable", False),
            offsets_topic_replication_factor=_int(props, "offsets.topic.replication.factor", 3, 1),
            transaction_state_log_num_partitions=_int(props, "transaction.state.log.num.partitions", 50, 1),
            transaction_state_log_replication_factor=_int(props, "transaction.state.log.replication.factor", 3, 1),
            transaction_state_log_min_isr=_int(props, "transaction.state.log.min.isr", 2, 1),
            transaction_max_timeout_ms=_int(props, "transaction.max.timeout.ms", 900_000, 1),
            transactional_id_expiration_ms=_int(props, "transactional.id.expiration.ms", 604_800_000, 1),
            transaction_abort_timed_out_transaction_cleanup_interval_ms=_int(
                props, "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000, 1),
            transaction_remove_expired_transaction_cleanup_interval_ms=_int(
                props, "transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000, 1),
            transaction_add_partitions_wait_max_ms=_int(props, "transaction.add.partitions.wait.max.ms", 500, 0),
            transaction_partition_verification_enable=_bool(props, "transaction.partition.verification.enable", True),
            transaction_lso_ignore_open_transactions=_bool(props, "transaction.lso.ignore.open.transactions", False),
            transaction_offset_commit_skip_generation_check=_bool(props, "transaction.offset.commit.skip.generation.check", False),
            replica_truncate_to_high_watermark=_bool(props, "replica.truncate.to.high.watermark", False),
            fetch_read_past_high_watermark=_bool(props, "fetch.read.past.high.watermark", False),
            log_crash_lose_unflushed=_bool(props, "log.crash.lose.unflushed", False),
            test_drop_produce_response_probability=_probability(props, "test.drop.produce.response.probability"),
        )
