"""The API versions this broker advertises, and the names of the API keys.

librdkafka picks min(its max, our max) per API, so this table decides what every client
speaks. The ranges follow what librdkafka 2.x sends (reference/kafka-protocol.md §4) and
what kio 0.6.5 can decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_PRODUCERS = 61
    # Transactions (KIP-98, KIP-664).
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    # Node-to-controller APIs (KRaft); served by the controller, not advertised to clients.
    ALTER_PARTITION = 56
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    ALLOCATE_PRODUCER_IDS = 67
    # The metadata quorum's own APIs (KIP-595, KIP-630); served by controllers to controllers.
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    FETCH_SNAPSHOT = 59


@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


SUPPORTED_VERSIONS: dict[ApiKey, VersionRange] = {
    ApiKey.PRODUCE: VersionRange(3, 10),
    ApiKey.FETCH: VersionRange(4, 16),
    ApiKey.LIST_OFFSETS: VersionRange(1, 7),
    ApiKey.METADATA: VersionRange(0, 13),
    ApiKey.OFFSET_COMMIT: VersionRange(2, 9),
    ApiKey.OFFSET_FETCH: VersionRange(1, 9),
    ApiKey.FIND_COORDINATOR: VersionRange(0, 3),
    ApiKey.JOIN_GROUP: VersionRange(0, 6),
    ApiKey.HEARTBEAT: VersionRange(0, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 4),
    ApiKey.SYNC_GROUP: VersionRange(0, 4),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 5),
    ApiKey.LIST_GROUPS: VersionRange(0, 4),
    ApiKey.API_VERSIONS: VersionRange(0, 3),
    ApiKey.CREATE_TOPICS: VersionRange(2, 5),
    ApiKey.DELETE_TOPICS: VersionRange(1, 4),
    ApiKey.DELETE_RECORDS: VersionRange(0, 2),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(2, 4),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4),  # kio 0.6.5 has no v0 schema
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0),
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0),
    ApiKey.WRITE_TXN_MARKERS: VersionRange(1, 1),  # broker to broker; kio 0.6.5 has no v0 schema
    # Transactions (KIP-98): librdkafka 2.x sends AddPartitionsToTxn/AddOffsetsToTxn v0,
    # EndTxn v0-1, TxnOffsetCommit v0-3; kafka-python up to v3. AddPartitionsToTxn v4 is
    # KIP-890's broker-to-broker verification.
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 3),
    ApiKey.END_TXN: VersionRange(0, 3),
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0),
    ApiKey.LIST_TRANSACTIONS: VersionRange(0, 1),
}


def is_supported(api_key: int, api_version: int) -> bool:
    try:
        return api_version in SUPPORTED_VERSIONS[ApiKey(api_key)]
    except (ValueError, KeyError):
        return False


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"UNKNOWN_API_{api_key}"
