"""The quorum's messages on Kafka's real schemas (kio): builders for what a node sends and
answers, and the version table controllers serve them at. Each builder takes plain values,
so the Raft logic in raft.py never handles kio classes itself."""

from __future__ import annotations

import datetime
from typing import Any

from kio.index import EntityType
from kio.schema.errors import ErrorCode

from cluster.metadata.records import METADATA_TOPIC, METADATA_TOPIC_ID
from cluster.protocol.codec import build, payload_class, request_class, response_class
from cluster.protocol.versions import ApiKey, VersionRange

VOTE_VERSION = 2  # v2: KIP-996's pre_vote
BEGIN_QUORUM_EPOCH_VERSION = 0
END_QUORUM_EPOCH_VERSION = 0
FETCH_VERSION = 13  # by topic id, with last_fetched_epoch and the diverging epoch
FETCH_SNAPSHOT_VERSION = 0
DESCRIBE_QUORUM_VERSION = 0

# What a controller serves of the quorum's APIs (merged into its own table).
QUORUM_VERSIONS: dict[ApiKey, VersionRange] = {
    ApiKey.VOTE: VersionRange(0, 2),
    ApiKey.BEGIN_QUORUM_EPOCH: VersionRange(0, 1),
    ApiKey.END_QUORUM_EPOCH: VersionRange(0, 1),
    ApiKey.DESCRIBE_QUORUM: VersionRange(0, 2),
    ApiKey.FETCH_SNAPSHOT: VersionRange(0, 1),
    ApiKey.FETCH: VersionRange(12, 16),
}
QUORUM_API_KEYS = frozenset(k for k in QUORUM_VERSIONS if k != ApiKey.FETCH)


def _req(api_key: int, version: int, name: str) -> type:
    return payload_class(api_key, version, name, EntityType.request)


def _resp(api_key: int, version: int, name: str) -> type:
    return payload_class(api_key, version, name, EntityType.response)


def is_metadata_topic(api_version: int, topic: Any) -> bool:
    if api_version >= 13:
        return getattr(topic, "topic_id", None) == METADATA_TOPIC_ID
    return getattr(topic, "topic", None) == METADATA_TOPIC


def first_partition(body: Any) -> Any | None:
    """The request's partition 0 of the metadata topic (Vote, Begin/EndQuorumEpoch,
    DescribeQuorum all carry topics[].partitions[])."""
    for topic in getattr(body, "topics", ()):
        name = getattr(topic, "topic_name", getattr(topic, "name", None))
        if name == METADATA_TOPIC:
            for partition in topic.partitions:
                if getattr(partition, "partition_index", getattr(partition, "partition", 0)) == 0:
                    return partition
    return None


# ---- Vote -----------------------------------------------------------------------------------

def vote_request(candidate_id: int, voter_id: int, epoch: int, last_epoch: int, last_offset: int, pre_vote: bool) -> Any:
    v = VOTE_VERSION
    partition = build(_req(ApiKey.VOTE, v, "PartitionData"), partition_index=0, replica_epoch=epoch, replica_id=candidate_id,
                      replica_directory_id=None, voter_directory_id=None, last_offset_epoch=last_epoch, last_offset=last_offset,
                      pre_vote=pre_vote)
    topic = _req(ApiKey.VOTE, v, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(request_class(ApiKey.VOTE, v), cluster_id=None, voter_id=voter_id, topics=(topic,))


def vote_response(version: int, error: ErrorCode, leader_id: int | None, epoch: int, granted: bool) -> Any:
    partition = build(_resp(ApiKey.VOTE, version, "PartitionData"), partition_index=0, error_code=error,
                      leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch, vote_granted=granted)
    topic = _resp(ApiKey.VOTE, version, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(response_class(ApiKey.VOTE, version), error_code=ErrorCode.none, topics=(topic,))


# ---- BeginQuorumEpoch / EndQuorumEpoch --------------------------------------------------------

def begin_quorum_epoch_request(leader_id: int, epoch: int, voter_id: int) -> Any:
    v = BEGIN_QUORUM_EPOCH_VERSION
    partition = build(_req(ApiKey.BEGIN_QUORUM_EPOCH, v, "PartitionData"), partition_index=0, leader_id=leader_id, leader_epoch=epoch,
                      voter_directory_id=None)
    topic = _req(ApiKey.BEGIN_QUORUM_EPOCH, v, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(request_class(ApiKey.BEGIN_QUORUM_EPOCH, v), cluster_id=None, voter_id=voter_id, topics=(topic,),
                 leader_endpoints=())


def epoch_response(api_key: int, version: int, error: ErrorCode, leader_id: int | None, epoch: int) -> Any:
    """BeginQuorumEpoch's and EndQuorumEpoch's answers have the same shape."""
    partition = build(_resp(api_key, version, "PartitionData"), partition_index=0, error_code=error,
                      leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch)
    topic = _resp(api_key, version, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(response_class(api_key, version), error_code=ErrorCode.none, topics=(topic,))


def end_quorum_epoch_request(leader_id: int, epoch: int, preferred_successors: list[int]) -> Any:
    v = END_QUORUM_EPOCH_VERSION
    partition = build(_req(ApiKey.END_QUORUM_EPOCH, v, "PartitionData"), partition_index=0, leader_id=leader_id, leader_epoch=epoch,
                      preferred_successors=tuple(preferred_successors), preferred_candidates=())
    topic = _req(ApiKey.END_QUORUM_EPOCH, v, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(request_class(ApiKey.END_QUORUM_EPOCH, v), cluster_id=None, topics=(topic,), leader_endpoints=())


# ---- Fetch of the metadata log ---------------------------------------------------------------

def fetch_request(replica_id: int, epoch: int, fetch_offset: int, last_fetched_epoch: int, log_start_offset: int,
                  max_wait_ms: int, max_bytes: int) -> Any:
    v = FETCH_VERSION
    partition = build(_req(ApiKey.FETCH, v, "FetchPartition"), partition=0, current_leader_epoch=epoch, fetch_offset=fetch_offset,
                      last_fetched_epoch=last_fetched_epoch, log_start_offset=log_start_offset, partition_max_bytes=max_bytes)
    topic = build(_req(ApiKey.FETCH, v, "FetchTopic"), topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=(partition,))
    return build(request_class(ApiKey.FETCH, v), cluster_id=None, replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                 min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1, topics=(topic,),
                 forgotten_topics_data=(), rack_id="")


def fetch_replica_id(body: Any) -> int:
    state = getattr(body, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(body, "replica_id", -1))


def fetch_partition(api_version: int, body: Any) -> Any | None:
    """Partition 0 of the metadata topic in a Fetch request or response."""
    topics = body.topics if hasattr(body, "topics") else body.responses
    for topic in topics:
        if is_metadata_topic(api_version, topic):
            for partition in topic.partitions:
                if getattr(partition, "partition", getattr(partition, "partition_index", -1)) == 0:
                    return partition
    return None


def fetch_response(version: int, error: ErrorCode, *, high_watermark: int = -1, log_start_offset: int = -1, records: bytes = b"",
                   leader: tuple[int, int] = (-1, -1), diverging: tuple[int, int] | None = None,
                   snapshot: tuple[int, int] | None = None) -> Any:
    partition_cls = _resp(ApiKey.FETCH, version, "PartitionData")
    fields: dict[str, Any] = dict(partition_index=0, error_code=error, high_watermark=high_watermark, last_stable_offset=high_watermark,
                                  log_start_offset=log_start_offset, aborted_transactions=None, preferred_read_replica=-1,
                                  records=records,
                                  current_leader=_resp(ApiKey.FETCH, version, "LeaderIdAndEpoch")(leader_id=leader[0], leader_epoch=leader[1]))
    if diverging is not None:
        fields["diverging_epoch"] = _resp(ApiKey.FETCH, version, "EpochEndOffset")(epoch=diverging[0], end_offset=diverging[1])
    if snapshot is not None:
        fields["snapshot_id"] = _resp(ApiKey.FETCH, version, "SnapshotId")(end_offset=snapshot[0], epoch=snapshot[1])
    partition = build(partition_cls, **fields)
    topic = build(_resp(ApiKey.FETCH, version, "FetchableTopicResponse"), topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID,
                  partitions=(partition,))
    return build(response_class(ApiKey.FETCH, version), throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                 responses=(topic,))


# ---- FetchSnapshot ------------------------------------------------------------------------------

def fetch_snapshot_request(replica_id: int, epoch: int, end_offset: int, snapshot_epoch: int, position: int, max_bytes: int) -> Any:
    v = FETCH_SNAPSHOT_VERSION
    snapshot_id = _req(ApiKey.FETCH_SNAPSHOT, v, "SnapshotId")(end_offset=end_offset, epoch=snapshot_epoch)
    partition = build(_req(ApiKey.FETCH_SNAPSHOT, v, "PartitionSnapshot"), partition=0, current_leader_epoch=epoch, snapshot_id=snapshot_id,
                      position=position, replica_directory_id=None)
    topic = _req(ApiKey.FETCH_SNAPSHOT, v, "TopicSnapshot")(name=METADATA_TOPIC, partitions=(partition,))
    return build(request_class(ApiKey.FETCH_SNAPSHOT, v), cluster_id=None, replica_id=replica_id, max_bytes=max_bytes, topics=(topic,))


def fetch_snapshot_response(version: int, error: ErrorCode, *, end_offset: int = -1, snapshot_epoch: int = -1,
                            leader: tuple[int, int] = (-1, -1), size: int = 0, position: int = 0, data: bytes = b"") -> Any:
    snapshot_id = _resp(ApiKey.FETCH_SNAPSHOT, version, "SnapshotId")(end_offset=end_offset, epoch=snapshot_epoch)
    current = _resp(ApiKey.FETCH_SNAPSHOT, version, "LeaderIdAndEpoch")(leader_id=leader[0], leader_epoch=leader[1])
    partition = build(_resp(ApiKey.FETCH_SNAPSHOT, version, "PartitionSnapshot"), index=0, error_code=error, snapshot_id=snapshot_id,
                      current_leader=current, size=size, position=position, unaligned_records=data)
    topic = _resp(ApiKey.FETCH_SNAPSHOT, version, "TopicSnapshot")(name=METADATA_TOPIC, partitions=(partition,))
    return build(response_class(ApiKey.FETCH_SNAPSHOT, version), throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                 topics=(topic,))


# ---- DescribeQuorum ---------------------------------------------------------------------------------

def describe_quorum_response(version: int, error: ErrorCode, leader_id: int | None, epoch: int, high_watermark: int,
                             voters: list[tuple[int, int]]) -> Any:
    replica = _resp(ApiKey.DESCRIBE_QUORUM, version, "ReplicaState")
    partition = build(_resp(ApiKey.DESCRIBE_QUORUM, version, "PartitionData"), partition_index=0, error_code=error,
                      leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch, high_watermark=high_watermark,
                      current_voters=tuple(build(replica, replica_id=i, log_end_offset=end, replica_directory_id=None) for i, end in voters),
                      observers=())
    topic = _resp(ApiKey.DESCRIBE_QUORUM, version, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(response_class(ApiKey.DESCRIBE_QUORUM, version), error_code=ErrorCode.none, topics=(topic,), nodes=())


def describe_quorum_request() -> Any:
    v = DESCRIBE_QUORUM_VERSION
    partition = _req(ApiKey.DESCRIBE_QUORUM, v, "PartitionData")(partition_index=0)
    topic = _req(ApiKey.DESCRIBE_QUORUM, v, "TopicData")(topic_name=METADATA_TOPIC, partitions=(partition,))
    return build(request_class(ApiKey.DESCRIBE_QUORUM, v), topics=(topic,))
