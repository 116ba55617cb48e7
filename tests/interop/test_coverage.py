"""Which public calls of each client the interop matrix exercises, and why the others are not.

Every public callable of the nine client classes (dir() of each) must be listed here, either
with the interop test that calls it or with the reason it is not covered, so a client upgrade
that adds a call fails this test until someone decides about it. Calls whose API the cluster
does not advertise (ACLs, SCRAM) are shown to fail cleanly: an error naming the missing
feature, in seconds, not a hang or a dropped connection."""

from __future__ import annotations

import pathlib
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

TXN = "transactions: issue 14"
# The transaction tests live with the cluster's (three broker processes each).
TXN_TESTS = "../cluster/txn/test_txn_confluent.py::"
CTXN = TXN_TESTS + "test_committed_transactions_and_their_offsets_are_seen_and_aborted_ones_are_not"
KTXN = TXN_TESTS + "test_kafka_python_transactional_producer"
KADMIN_TXN = TXN_TESTS + "test_kafka_python_admin_lists_and_describes_transactions"
UNADVERTISED = "ACL/SCRAM API not advertised: test_unadvertised_admin_calls_fail_cleanly"
LOCAL = "client-local (no request of its own, or only configuration)"
CG = "test_confluent_groups.py::"
KG = "test_kafka_python_groups.py::"
AIO = "test_aiokafka.py::test_aiokafka_consumer_seeks_and_admin_lists_groups_offsets_and_deletes_the_topic"
DG = "test_delete_groups.py::"

COVERAGE: dict[type, dict[str, str]] = {
    Producer: {
        "list_topics": "test_metadata.py::test_confluent_producer_and_consumer_list_topics_without_a_topic",
        "produce": "test_partitions.py::test_confluent_create_partitions_then_produce_to_and_consume_from_the_new_one",
        "flush": "test_partitions.py::test_confluent_create_partitions_then_produce_to_and_consume_from_the_new_one",
        "poll": CG + "test_confluent_admin_list_offsets_earliest_latest_and_by_timestamp",
        "produce_batch": CG + "test_confluent_admin_list_offsets_earliest_latest_and_by_timestamp",
        "purge": LOCAL, "close": LOCAL, "cluster_id": CG + "test_confluent_admin_describes_and_deletes_topics",
        "set_sasl_credentials": LOCAL,
        **{name: CTXN for name in ("abort_transaction", "begin_transaction", "commit_transaction", "init_transactions",
                                   "send_offsets_to_transaction")},
    },
    Consumer: {
        "list_topics": "test_metadata.py::test_confluent_producer_and_consumer_list_topics_without_a_topic",
        "assign": "test_partitions.py::test_confluent_create_partitions_then_produce_to_and_consume_from_the_new_one",
        "poll": "test_partitions.py::test_confluent_create_partitions_then_produce_to_and_consume_from_the_new_one",
        "close": LOCAL, "set_sasl_credentials": LOCAL, "consumer_group_metadata": LOCAL, "memberid": LOCAL,
        "store_offsets": LOCAL, "pause": LOCAL, "resume": LOCAL,
        **{name: CG + "test_confluent_consumer_subscribes_consumes_commits_seeks_and_reads_positions"
           for name in ("assignment", "commit", "committed", "consume", "get_watermark_offsets", "offsets_for_times", "position",
                        "seek", "subscribe", "unsubscribe", "cluster_id")},
        **{name: CG + "test_confluent_consumer_incremental_assign_and_unassign"
           for name in ("incremental_assign", "incremental_unassign", "unassign")},
    },
    AdminClient: {
        "list_topics": "test_metadata.py::test_confluent_admin_list_topics_without_a_topic",
        "create_topics": "test_metadata.py::test_confluent_admin_list_topics_without_a_topic",
        "describe_configs": "test_configs.py::test_confluent_describe_topic_configs_reports_value_and_source",
        "alter_configs": "test_configs.py::test_confluent_alter_configs_replaces_the_topic_configs",
        "incremental_alter_configs": "test_configs.py::test_confluent_incremental_alter_configs_sets_and_deletes_topic_configs",
        "create_partitions": "test_partitions.py::test_confluent_create_partitions_then_produce_to_and_consume_from_the_new_one",
        "create_acls": UNADVERTISED, "describe_acls": UNADVERTISED, "delete_acls": UNADVERTISED,
        "alter_user_scram_credentials": UNADVERTISED, "describe_user_scram_credentials": UNADVERTISED,
        "delete_records": "test_delete_records.py::test_confluent_delete_records_moves_the_log_start",
        "elect_leaders": "test_elect_and_rebalance.py::test_confluent_elect_leaders_of_led_partitions_is_election_not_needed",
        "describe_cluster": "test_cluster.py::test_confluent_describe_cluster",
        "delete_consumer_groups": DG + "test_confluent_delete_consumer_groups_and_kafka_python_delete_group_offsets",
        "delete_topics": CG + "test_confluent_admin_describes_and_deletes_topics",
        "describe_topics": CG + "test_confluent_admin_describes_and_deletes_topics",
        **{name: CG + "test_confluent_admin_lists_describes_and_alters_group_offsets"
           for name in ("describe_consumer_groups", "list_consumer_groups", "list_groups", "list_consumer_group_offsets",
                        "alter_consumer_group_offsets")},
        "list_offsets": CG + "test_confluent_admin_list_offsets_earliest_latest_and_by_timestamp",
        "cluster_id": CG + "test_confluent_admin_describes_and_deletes_topics", "poll": LOCAL, "set_sasl_credentials": LOCAL,
    },
    KafkaProducer: {
        **{name: KTXN for name in ("abort_transaction", "begin_transaction", "commit_transaction", "init_transactions")},
        "send_offsets_to_transaction": TXN, "bootstrap_connected": LOCAL, "close": LOCAL, "metrics": LOCAL,
        "max_usable_produce_magic": LOCAL,
        **{name: KG + "test_kafka_python_admin_groups_and_offsets" for name in ("flush", "partitions_for", "send")},
    },
    KafkaConsumer: {
        "topics": "test_metadata.py::test_kafka_python_list_and_describe_topics",
        "partitions_for_topic": "test_metadata.py::test_kafka_python_list_and_describe_topics",
        "close": LOCAL, "metrics": LOCAL, "bootstrap_connected": LOCAL, "pause": LOCAL, "paused": LOCAL, "resume": LOCAL,
        "subscription": LOCAL, "group_metadata": LOCAL, "highwater": LOCAL,
        **{name: KG + "test_kafka_python_assigned_consumer_seeks_and_reads_offsets"
           for name in ("assign", "assignment", "beginning_offsets", "bootstrap", "end_offsets", "offsets_for_times", "poll",
                        "position", "seek", "seek_to_beginning", "seek_to_end")},
        **{name: KG + "test_kafka_python_admin_groups_and_offsets"
           for name in ("commit", "commit_async", "committed", "subscribe", "unsubscribe")},
    },
    KafkaAdminClient: {
        "list_topics": "test_metadata.py::test_kafka_python_list_and_describe_topics",
        "describe_topics": "test_metadata.py::test_kafka_python_list_and_describe_topics",
        "describe_configs": "test_configs.py::test_kafka_python_describe_topic_configs",
        "alter_configs": "test_configs.py::test_kafka_python_alter_configs",
        "create_partitions": "test_partitions.py::test_kafka_python_create_partitions",
        "close": LOCAL, "api_versions": LOCAL, "get_broker_version_data": LOCAL,
        "create_acls": UNADVERTISED, "delete_acls": UNADVERTISED, "describe_acls": UNADVERTISED,
        "alter_user_scram_credentials": UNADVERTISED, "describe_user_scram_credentials": UNADVERTISED,
        "abort_transaction": TXN, "describe_transactions": KADMIN_TXN, "find_hanging_transactions": TXN, "list_transactions": KADMIN_TXN,
        "delete_records": "test_delete_records.py::test_kafka_python_delete_records",
        "elect_leaders": "test_elect_and_rebalance.py::test_kafka_python_elect_leaders",
        "describe_cluster": "test_cluster.py::test_kafka_python_describe_cluster",
        "delete_groups": DG + "test_kafka_python_delete_groups_and_offsets_of_an_empty_group",
        "delete_group_offsets": DG + "test_confluent_delete_consumer_groups_and_kafka_python_delete_group_offsets",
        "describe_producers": "test_confluent_producer_rules.py::test_idempotent_confluent_producers_write_each_record_once_in_order",
        **{name: "API not served (reassignment, log dirs, quorum, features, config listing): not covered"
           for name in ("alter_partition_reassignments", "list_partition_reassignments", "alter_replica_log_dirs", "describe_log_dirs",
                        "describe_metadata_quorum", "describe_features", "update_features", "list_config_resources",
                        "describe_topic_partitions")},
        **{name: KG + "test_kafka_python_admin_groups_and_offsets"
           for name in ("create_topics", "delete_topics", "describe_groups", "list_groups", "list_group_offsets",
                        "alter_group_offsets", "reset_group_offsets", "list_partition_offsets", "wait_for_topics")},
        "remove_group_members": "test_static_membership.py::test_a_restarted_static_consumer_takes_its_partition_back_without_a_rebalance",
        "reset_configs": "test_configs.py::test_kafka_python_reset_configs_returns_a_topic_config_to_its_default",
    },
    AIOKafkaProducer: {
        "start": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "send_and_wait": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "stop": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        **{name: TXN_TESTS + "test_aiokafka_transactional_producer" for name in ("abort_transaction", "begin_transaction", "transaction")},
        "commit_transaction": TXN, "send_offsets_to_transaction": TXN,
        **{name: AIO for name in ("create_batch", "flush", "partitions_for", "send", "send_batch")},
    },
    AIOKafkaConsumer: {
        "start": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "subscribe": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "getmany": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "commit": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "committed": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "end_offsets": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "assignment": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "stop": "test_aiokafka.py::test_aiokafka_produce_and_group_consume_with_commit",
        "highwater": LOCAL, "last_poll_timestamp": LOCAL, "last_stable_offset": LOCAL, "pause": LOCAL, "paused": LOCAL,
        "resume": LOCAL, "subscription": LOCAL,
        **{name: AIO for name in ("assign", "beginning_offsets", "getone", "offsets_for_times", "partitions_for_topic", "position",
                                  "seek", "seek_to_beginning", "seek_to_committed", "seek_to_end", "topics", "unsubscribe")},
    },
    AIOKafkaAdminClient: {
        "start": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "close": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "create_topics": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "list_topics": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "describe_topics": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "alter_configs": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "describe_configs": "test_aiokafka.py::test_aiokafka_admin_creates_lists_describes_and_alters_a_topic",
        "create_partitions": "test_partitions.py::test_aiokafka_create_partitions",
        "delete_records": "test_delete_records.py::test_aiokafka_delete_records",
        "describe_cluster": "test_cluster.py::test_aiokafka_describe_cluster",
        **{name: AIO for name in ("delete_topics", "describe_consumer_groups", "find_coordinator", "list_consumer_group_offsets",
                                  "list_consumer_groups")},
    },
}


def _public_calls(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


@pytest.mark.parametrize("cls", list(COVERAGE), ids=lambda c: c.__name__)
def test_every_public_call_is_covered_or_named_with_a_reason(cls) -> None:
    listed = COVERAGE[cls]
    assert sorted(_public_calls(cls) - set(listed)) == [], f"{cls.__name__}: calls neither tested nor explained"
    assert sorted(set(listed) - _public_calls(cls)) == [], f"{cls.__name__}: listed calls the client does not have"
    here = pathlib.Path(__file__).parent
    for call, where in listed.items():
        if "::" in where:
            module, test = where.split("::")
            assert f"def {test}(" in (here / module).read_text(), f"{cls.__name__}.{call}: {where} does not exist"


def test_unadvertised_admin_calls_fail_cleanly(interop_cluster) -> None:
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    started = time.monotonic()
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:u", "*", AclOperation.READ, AclPermissionType.ALLOW)
    filter_ = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)
    futures = [admin.describe_acls(filter_, request_timeout=10), *admin.create_acls([binding], request_timeout=10).values()]
    for future in futures:
        error = future.exception(15)
        assert isinstance(error, KafkaException), error
        assert error.args[0].code() == KafkaError._UNSUPPORTED_FEATURE, error
    assert time.monotonic() - started < 10
    # The connection survived: the same client still answers.
    assert admin.list_topics(timeout=10).brokers
