"""DescribeConfigs through every client, on one and three brokers: a topic's effective
configs with their source (the topic's own config, the broker's static setting of the
synonym, the cluster's default), and a broker's static settings."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KPConfigResource, ConfigResourceType

from tests.interop.conftest import INTEROP_BROKER_CONFIG

TIMEOUT_S = 15
TOPIC_RETENTION_MS = "3600000"
# segment.ms comes from the broker's log.roll.hours, scaled to milliseconds.
SEGMENT_MS_FROM_BROKER = str(int(INTEROP_BROKER_CONFIG["log.roll.hours"]) * 3_600_000)


def _create(cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, 2, min(3, len(cluster.brokers)), config={"retention.ms": TOPIC_RETENTION_MS})], operation_timeout=TIMEOUT_S)
    futures[topic].result(TIMEOUT_S)


def test_confluent_describe_topic_configs_reports_value_and_source(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    seen = {name: (entry.value, entry.source) for name, entry in configs.items()}
    assert seen["retention.ms"] == (TOPIC_RETENTION_MS, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["segment.ms"] == (SEGMENT_MS_FROM_BROKER, ConfigSource.STATIC_BROKER_CONFIG.value)
    assert seen["min.insync.replicas"] == ("1", ConfigSource.DEFAULT_CONFIG.value)
    assert seen["unclean.leader.election.enable"] == ("false", ConfigSource.DEFAULT_CONFIG.value)
    assert [s.name for s in configs["segment.ms"].synonyms.values()] == ["log.roll.hours", "segment.ms"]


def test_confluent_describe_configs_of_a_missing_topic_is_unknown_topic(interop_cluster, names) -> None:
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, f"{names}-missing")
    error = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].exception(TIMEOUT_S)
    assert error is not None and error.args[0].code() == 3, error  # UNKNOWN_TOPIC_OR_PARTITION


def test_confluent_describe_broker_configs_lists_its_static_settings(interop_cluster) -> None:
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    for broker in interop_cluster.brokers:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker.broker_id))
        configs = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
        entry = configs["log.roll.hours"]
        assert (entry.value, entry.source, entry.is_read_only) == ("24", ConfigSource.STATIC_BROKER_CONFIG.value, True)


def test_kafka_python_describe_topic_configs(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        response = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True, config_filter="all")
    finally:
        admin.close()
    seen = {name: (entry["value"], entry["config_source"]) for name, entry in response["topic"][topic].items()}
    assert seen["retention.ms"] == (TOPIC_RETENTION_MS, "DYNAMIC_TOPIC_CONFIG")
    assert seen["segment.ms"] == (SEGMENT_MS_FROM_BROKER, "STATIC_BROKER_CONFIG")
    assert seen["min.insync.replicas"] == ("1", "DEFAULT_CONFIG")


def _describe(admin: AdminClient, topic: str) -> dict[str, tuple[str, int]]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    return {name: (entry.value, entry.source) for name, entry in configs.items()}


def _eventually(check, what: str, timeout_s: float = TIMEOUT_S):
    """Brokers apply a committed config change from their metadata fetch, a few ms later."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, what
            return result
        time.sleep(0.05)


def test_confluent_incremental_alter_configs_sets_and_deletes_topic_configs(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    for broker in interop_cluster.brokers:  # every broker's image has the change
        one = AdminClient({"bootstrap.servers": broker.address})
        _eventually(lambda: _describe(one, topic)["min.insync.replicas"] == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), f"broker {broker.broker_id}")
        assert _describe(one, topic)["retention.ms"] == (str(7 * 24 * 3_600_000), ConfigSource.DEFAULT_CONFIG.value)


def test_confluent_alter_configs_replaces_the_topic_configs(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"unclean.leader.election.enable": "true"})
    admin.alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    seen = _eventually(lambda: (d := _describe(admin, topic))["unclean.leader.election.enable"][0] == "true" and d, "the change is visible")
    assert seen["unclean.leader.election.enable"] == ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert seen["retention.ms"][1] == ConfigSource.DEFAULT_CONFIG.value  # replaced: the creation's retention.ms is gone


def test_confluent_alter_configs_refuses_bad_names_and_values(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    for entry in (ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("min.insync.replicas", "zero", incremental_operation=AlterConfigOpType.SET)):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        error = admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].exception(TIMEOUT_S)
        assert error is not None and error.args[0].code() == 40, error  # INVALID_CONFIG
    assert _describe(admin, topic)["min.insync.replicas"] == ("1", ConfigSource.DEFAULT_CONFIG.value)


def test_kafka_python_alter_configs(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic, configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    confluent = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    _eventually(lambda: _describe(confluent, topic)["min.insync.replicas"] == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), "the change is visible")


def test_kafka_python_reset_configs_returns_a_topic_config_to_its_default(interop_cluster, names) -> None:
    topic = f"{names}-t"
    _create(interop_cluster, topic)
    confluent = AdminClient({"bootstrap.servers": interop_cluster.bootstrap_servers})
    admin = KafkaAdminClient(bootstrap_servers=interop_cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})])
        _eventually(lambda: _describe(confluent, topic)["retention.ms"] == ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), "the change is visible")
        admin.reset_configs([KPConfigResource(ConfigResourceType.TOPIC, topic, configs=["retention.ms"])])
    finally:
        admin.close()
    _eventually(lambda: (lambda value, source: value != "7200000" and source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value)(
        *_describe(confluent, topic)["retention.ms"]), "the reset is visible")
