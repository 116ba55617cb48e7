"""Transaction request builders for the core tests (the versions librdkafka 2.x sends)."""

from __future__ import annotations

import datetime
import io
from typing import Any

import kio.index
from kio.serial import entity_writer

from cluster.broker.env import ClientInfo
from cluster.protocol.codec import build, decode_request
from cluster.protocol.versions import SUPPORTED_VERSIONS, ApiKey, VersionRange
from tests.cluster.broker.core_driver import CoreDriver, Pending

# The coordinator's APIs are advertised once markers are written end to end; until then the
# core tests decode them with this table (the versions librdkafka and kafka-python send).
TXN_VERSIONS = {**SUPPORTED_VERSIONS, ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 4), ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 3),
                ApiKey.END_TXN: VersionRange(0, 3), ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 3),
                ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0), ApiKey.LIST_TRANSACTIONS: VersionRange(0, 1)}

# What the single-broker core driver needs: a small __transaction_state on its one broker.
TXN_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


def call(driver: CoreDriver, api_key: int, api_version: int, wait_ms: float = 10_000, **fields: Any) -> Any:
    """CoreDriver.call, decoding with TXN_VERSIONS."""
    schema = kio.index.load_request_schema(api_key, api_version)
    buffer = io.BytesIO()
    header = schema.__header_schema__(request_api_key=api_key, request_api_version=api_version, correlation_id=1, client_id="tester")
    entity_writer(schema.__header_schema__)(buffer, header)
    entity_writer(schema)(buffer, build(schema, **fields))
    request = decode_request(buffer.getvalue(), TXN_VERSIONS)
    pending = Pending(api_key, api_version)
    driver.broker.handle(request, ClientInfo("tester", "/127.0.0.1"), pending)
    driver.run_until(lambda: pending.done, wait_ms, f"an answer to API {api_key} v{api_version}")
    return pending.body


def find_txn_coordinator(driver: CoreDriver, transactional_id: str, version: int = 3) -> Any:
    return driver.call(ApiKey.FIND_COORDINATOR, version, key=transactional_id, key_type=1)


def await_txn_coordinator(driver: CoreDriver, transactional_id: str) -> None:
    """FindCoordinator (the first creates __transaction_state) until the id's partition is loaded."""
    from kio.schema.errors import ErrorCode

    driver.run_until(lambda: find_txn_coordinator(driver, transactional_id).error_code is ErrorCode.none, 10_000, "a transaction coordinator")
    coordinator = driver.broker.txn.coordinator
    driver.run_until(lambda: coordinator.coordinator_error(transactional_id) is ErrorCode.none, 10_000, "its partition loaded")


def init_txn_producer(driver: CoreDriver, transactional_id: str, timeout_ms: int = 60_000, producer_id: int = -1, producer_epoch: int = -1,
                      version: int = 4) -> Any:
    return call(driver, ApiKey.INIT_PRODUCER_ID, version, transactional_id=transactional_id,
                       transaction_timeout=datetime.timedelta(milliseconds=timeout_ms), producer_id=producer_id, producer_epoch=producer_epoch)


def add_partitions(driver: CoreDriver, transactional_id: str, producer_id: int, producer_epoch: int, partitions: dict[str, list[int]],
                   version: int = 3) -> dict[tuple[str, int], Any]:
    topic_cls = driver.request_class(ApiKey.ADD_PARTITIONS_TO_TXN, version, "AddPartitionsToTxnTopic")
    body = call(driver, ApiKey.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=transactional_id,
                       v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=producer_epoch,
                       v3_and_below_topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in partitions.items()))
    return {(t.name, p.partition_index): p.partition_error_code for t in body.results_by_topic_v3_and_below for p in t.results_by_partition}


def add_offsets(driver: CoreDriver, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, version: int = 3) -> Any:
    return call(driver, ApiKey.ADD_OFFSETS_TO_TXN, version, transactional_id=transactional_id, producer_id=producer_id,
                       producer_epoch=producer_epoch, group_id=group_id).error_code


def end_txn(driver: CoreDriver, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool, version: int = 3) -> Any:
    return call(driver, ApiKey.END_TXN, version, transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                       committed=committed).error_code


def txn_offset_commit(driver: CoreDriver, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                      offsets: dict[tuple[str, int], int], generation_id: int = -1, member_id: str = "", version: int = 3) -> dict[tuple[str, int], Any]:
    topic_cls = driver.request_class(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestTopic")
    part_cls = driver.request_class(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(part_cls(partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                                                       committed_metadata=""))
    body = call(driver, ApiKey.TXN_OFFSET_COMMIT, version, transactional_id=transactional_id, group_id=group_id, producer_id=producer_id,
                producer_epoch=producer_epoch, generation_id=generation_id, member_id=member_id, group_instance_id=None,
                topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
    return {(t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions}
