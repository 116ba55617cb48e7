"""confluent-kafka through the proxy to a real one-broker bundled cluster.

A Kafka client only bootstraps through the address it is given: the metadata it gets back
names the broker's advertised address, and every later request goes there. A broker that
advertises its own address (the default) is reached directly after the bootstrap; one whose
`advertised.listeners` names the proxy is reached through it only, so a toxic on the proxy
hits every request (the cluster-wide form, a proxy per link, is tests/proxy/test_cluster_routing.py).
"""

from __future__ import annotations

from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.launcher import LocalCluster
from tests.proxy.helpers import add_toxic, call, create_proxy

MESSAGES = 200
CLIENT_TIMEOUT_S = 30.0
# Fast group formation and few offsets partitions, as the cluster tests use.
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


@pytest.fixture
def kafka(tmp_path) -> Iterator[LocalCluster]:
    with LocalCluster(brokers=1, base_dir=tmp_path / "cluster", config=BROKER_CONFIG, seed=17) as cluster:
        yield cluster


def produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": int(CLIENT_TIMEOUT_S * 1000)})
    failures: list[str] = []
    for value in values:
        producer.produce(topic, str(value).encode(), on_delivery=lambda err, _msg: err and failures.append(str(err)))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert failures == []


def read_all(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "proxy-readers", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[int] = []
        misses = 0
        while len(values) < count and misses < 30:
            message = consumer.poll(1.0)
            if message is None:
                misses += 1
                continue
            assert message.error() is None, message.error()
            values.append(int(message.value()))
        return values
    finally:
        consumer.close()


def test_producer_and_consumer_bootstrap_through_the_proxy(proxy_server, kafka):
    listen = create_proxy(proxy_server, "kafka", kafka.bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": listen})
    admin.create_topics([NewTopic("through-proxy", 1, 1)])["through-proxy"].result(CLIENT_TIMEOUT_S)

    produce(listen, "through-proxy", range(MESSAGES))
    assert read_all(listen, "through-proxy", MESSAGES) == list(range(MESSAGES))

    # With the proxy down, a client given only the proxy's address cannot bootstrap.
    assert call(proxy_server, "POST", "/proxies/kafka", {"enabled": False}).status == 200
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": listen}).list_topics(timeout=3)


def test_after_bootstrap_clients_talk_to_the_advertised_broker(proxy_server, kafka):
    listen = create_proxy(proxy_server, "kafka", kafka.bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": listen})
    admin.create_topics([NewTopic("bypass", 1, 1)])["bypass"].result(CLIENT_TIMEOUT_S)
    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    advertised = {f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    assert advertised == {kafka.bootstrap_servers} and listen not in advertised

    producer = Producer({"bootstrap.servers": listen, "acks": "all"})
    producer.produce("bypass", b"-1")
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    # Black-hole the proxy both ways: the producer's traffic no longer passes through it.
    add_toxic(proxy_server, "kafka", "timeout", stream="upstream", timeout=0)
    add_toxic(proxy_server, "kafka", "timeout", stream="downstream", timeout=0)
    for value in range(10):
        producer.produce("bypass", b"%d" % value)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert read_all(kafka.bootstrap_servers, "bypass", 11) == list(range(-1, 10))


def test_a_broker_advertising_the_proxy_is_reached_only_through_it(proxy_server, tmp_path):
    # The proxy exists before the broker (which advertises it); its upstream is set once the
    # broker listens, as cluster.proxy_routing does.
    listen = create_proxy(proxy_server, "kafka", "127.0.0.10:0")
    config = {**BROKER_CONFIG, "advertised.listeners": f"PLAINTEXT://{listen}"}
    with LocalCluster(brokers=1, base_dir=tmp_path / "cluster", config=config, seed=17) as kafka:
        assert call(proxy_server, "POST", "/proxies/kafka", {"upstream": kafka.bootstrap_servers}).status == 200
        admin = AdminClient({"bootstrap.servers": listen})
        admin.create_topics([NewTopic("through", 1, 1)])["through"].result(CLIENT_TIMEOUT_S)
        metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
        assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == {listen}

        producer = Producer({"bootstrap.servers": listen, "acks": "all", "message.timeout.ms": 60_000})
        producer.produce("through", b"-1")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        # Black-hole the proxy both ways: nothing is delivered while it holds, everything after.
        add_toxic(proxy_server, "kafka", "timeout", stream="upstream", timeout=0)
        add_toxic(proxy_server, "kafka", "timeout", stream="downstream", timeout=0)
        for value in range(10):
            producer.produce("through", b"%d" % value)
        assert producer.flush(3.0) > 0, "the producer delivered past a black-holed proxy: it bypasses it"
        assert call(proxy_server, "POST", "/reset").status == 204
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        assert read_all(listen, "through", 11) == list(range(-1, 10))
