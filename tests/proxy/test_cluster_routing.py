"""The bundled cluster with every link through a proxy of its own (cluster.proxy_routing).

Three brokers and the controller, real processes; confluent-kafka as the client. Checks that
clients, replication and the controller links all pass through their proxies (metadata names
the proxies; every proxy carries a connection; a black-holed link stops exactly the traffic
it carries), that a restarted broker is found through its proxies again, that everything is
torn down, and the settings' errors.
"""

from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.config import BrokerConfig, parse_address_overrides, parse_advertised_listener
from cluster.control import ClusterControl
from cluster.launcher import CONTROLLER_NODE_ID, LocalCluster
from cluster.proxy_routing import ProxyRouting, ProxyRoutingError, link_name
from tests.proxy.helpers import add_toxic, call

CLIENT_TIMEOUT_S = 30.0
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
                 "min.insync.replicas": "3", "broker.session.timeout.ms": "6000"}


@pytest.fixture(scope="module")
def routed() -> Iterator[LocalCluster]:
    routing = ProxyRouting(seed=11)
    with LocalCluster(brokers=3, config=BROKER_CONFIG, seed=23, proxies=routing) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("routed", 1, 3)])["routed"].result(CLIENT_TIMEOUT_S)
        yield cluster


def server(cluster: LocalCluster):  # the in-process ProxyServer the routing started
    return cluster.proxies._server  # type: ignore[union-attr]


def leader_of(cluster: LocalCluster, topic: str) -> int:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while time.monotonic() < deadline:
        leaders = ClusterControl(cluster).leaders([topic])
        if leaders:
            return next(iter(leaders.values()))
        time.sleep(0.1)
    raise AssertionError(f"no leader for {topic}")


def produce(cluster: LocalCluster, values: range, flush_s: float) -> tuple[Producer, int]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "message.timeout.ms": 120_000})
    for value in values:
        producer.produce("routed", b"%d" % value)
    return producer, producer.flush(flush_s)


def test_metadata_names_the_proxies_and_every_link_carries_traffic(routed):
    proxies = routed.proxies
    assert proxies is not None
    names = set(proxies.links)
    brokers = [b.broker_id for b in routed.brokers]
    expected = ({link_name("logquake", None, j, CONTROLLER_NODE_ID) for j in brokers}
                | {link_name("logquake", i, j, CONTROLLER_NODE_ID) for i in brokers for j in brokers if i != j}
                | {link_name("logquake", i, CONTROLLER_NODE_ID, CONTROLLER_NODE_ID) for i in brokers})
    assert names == expected and len(names) == 3 + 6 + 3

    metadata = AdminClient({"bootstrap.servers": routed.bootstrap_servers}).list_topics(timeout=CLIENT_TIMEOUT_S)
    advertised = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    assert advertised == {j: proxies.client_address(j) for j in brokers}
    assert not set(advertised.values()) & {b.address for b in routed.brokers}

    producer, left = produce(routed, range(50), CLIENT_TIMEOUT_S)
    assert left == 0
    registry = server(routed).registry
    # Each proxy listens on its destination's address and points at the destination itself.
    for link in proxies.links.values():
        dest = routed.controller if link.dest == CONTROLLER_NODE_ID else routed.brokers[link.dest]
        assert link.listen.rsplit(":", 1)[0] == dest.host
        assert registry.proxies[link.name].upstream == dest.address
    # Followers fetch from the leader, heartbeats go to the controller, the producer and the
    # admin client reached the brokers: a link that carries no connection is not routed.
    leader = leader_of(routed, "routed")
    in_use = {name for name, proxy in registry.proxies.items() if proxy.connection_count > 0}
    must = ({link_name("logquake", i, leader, CONTROLLER_NODE_ID) for i in brokers if i != leader}
            | {link_name("logquake", i, CONTROLLER_NODE_ID, CONTROLLER_NODE_ID) for i in brokers}
            | {link_name("logquake", None, leader, CONTROLLER_NODE_ID)})
    assert must <= in_use, sorted(must - in_use)


def test_a_black_holed_replication_link_holds_acks_all_until_it_is_removed(routed):
    # min.insync.replicas=3: an acks=all write needs both followers; cutting one follower's
    # fetches from the leader (its own proxy, one direction) holds every acknowledgement.
    leader = leader_of(routed, "routed")
    follower = next(b.broker_id for b in routed.brokers if b.broker_id != leader)
    fetches = link_name("logquake", follower, leader, CONTROLLER_NODE_ID)
    add_toxic(server(routed), fetches, "timeout", stream="downstream", timeout=0)
    try:
        producer, left = produce(routed, range(100, 110), 3.0)
        assert left > 0, "acks=all was answered without the black-holed follower: its fetches bypass the proxy"
    finally:
        assert call(server(routed), "POST", "/reset").status == 204
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def test_a_black_holed_client_link_stops_only_that_brokers_clients(routed):
    leader = leader_of(routed, "routed")
    client_link = link_name("logquake", None, leader, CONTROLLER_NODE_ID)
    producer, left = produce(routed, range(200, 201), CLIENT_TIMEOUT_S)
    assert left == 0
    add_toxic(server(routed), client_link, "timeout", stream="upstream", timeout=0)
    try:
        for value in range(201, 206):
            producer.produce("routed", b"%d" % value)
        assert producer.flush(3.0) > 0, "the producer reached the leader past its black-holed proxy"
        # The other brokers still answer their clients through their own proxies.
        other = next(b.broker_id for b in routed.brokers if b.broker_id != leader)
        assert AdminClient({"bootstrap.servers": routed.proxies.client_address(other)}).list_topics(timeout=10).brokers
    finally:
        assert call(server(routed), "POST", "/reset").status == 204
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def test_a_restarted_broker_is_reached_through_its_proxies_again(routed):
    victim = routed.brokers[2].broker_id
    port = routed.brokers[victim].port
    routed.kill(victim)
    routed.start(victim)
    assert routed.brokers[victim].port == port
    registry = server(routed).registry
    assert registry.proxies[link_name("logquake", None, victim, CONTROLLER_NODE_ID)].upstream == routed.brokers[victim].address
    producer, left = produce(routed, range(300, 320), CLIENT_TIMEOUT_S)
    assert left == 0


def test_closing_the_cluster_closes_every_proxy(tmp_path):
    routing = ProxyRouting(seed=3)
    with LocalCluster(brokers=1, base_dir=tmp_path / "c", config=BROKER_CONFIG | {"min.insync.replicas": "1"},
                      seed=5, proxies=routing) as cluster:
        url = routing.api_url
        listens = [link.listen for link in routing.links.values()]
        assert cluster.bootstrap_servers == routing.client_address(0)
    for address in [url.removeprefix("http://"), *listens]:
        host, port = address.rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=2).close()


def test_a_named_toxiproxy_server_gets_the_proxies_and_loses_them_at_close(proxy_server, tmp_path):
    # The named server stands for a user's Toxiproxy: the routing creates its proxies there,
    # refuses to reuse names another cluster holds, and deletes only its own at the end.
    call(proxy_server, "POST", "/proxies", {"name": "users-own", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"})
    routing = ProxyRouting(proxy_server.url)
    with LocalCluster(brokers=1, base_dir=tmp_path / "c", config=BROKER_CONFIG | {"min.insync.replicas": "1"},
                      seed=5, proxies=routing) as cluster:
        assert set(call(proxy_server, "GET", "/proxies").json()) == {"users-own", *routing.links}
        with pytest.raises(ProxyRoutingError, match="already has proxies named logquake-"):
            ProxyRouting(proxy_server.url).start()
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce("auto-created", b"x")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert set(call(proxy_server, "GET", "/proxies").json()) == {"users-own"}


def test_an_unreachable_toxiproxy_server_is_named_in_the_error(tmp_path):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ProxyRoutingError, match=f"127.0.0.1:{port}.*cannot reach the Toxiproxy server"):
        with LocalCluster(brokers=1, base_dir=tmp_path / "c", proxies=ProxyRouting(f"http://127.0.0.1:{port}")):
            pass


@pytest.mark.parametrize("text, error", [
    ("127.0.0.1:9092", "expected PLAINTEXT://HOST:PORT"),
    ("SSL://127.0.0.1:9092", "expected PLAINTEXT://HOST:PORT"),
    ("PLAINTEXT://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093", "one listener"),
    ("PLAINTEXT://127.0.0.1:0", r"\[1, 65535\]"),
    ("PLAINTEXT://127.0.0.1:x", "expected PLAINTEXT://HOST:PORT"),
])
def test_bad_advertised_listeners_are_named(text, error):
    with pytest.raises(ValueError, match=f"advertised.listeners=.*{error}"):
        BrokerConfig.from_properties(0, "127.0.0.10", 0, "/tmp/x", {"advertised.listeners": text})


def test_advertised_listeners_and_overrides_parse():
    assert parse_advertised_listener("") is None
    assert parse_advertised_listener("PLAINTEXT://127.0.0.1:9092") == ("127.0.0.1", 9092)
    config = BrokerConfig.from_properties(0, "127.0.0.10", 5000, "/tmp/x", {"advertised.listeners": "PLAINTEXT://proxy:7000"})
    assert (config.advertised_host, config.advertised_port, config.advertised_address) == ("proxy", 7000, "proxy:7000")
    plain = BrokerConfig.from_properties(0, "127.0.0.10", 5000, "/tmp/x", {})
    assert plain.advertised_address == "127.0.0.10:5000"
    assert parse_address_overrides("1@127.0.0.11:7001, 2@127.0.0.12:7002") == {1: ("127.0.0.11", 7001), 2: ("127.0.0.12", 7002)}
    for bad, error in (("1@127.0.0.11", "expected ID@HOST:PORT"), ("x@h:1", "expected ID@HOST:PORT"),
                       ("1@h:1,1@h:2", "named twice"), ("1@h:0", r"\[1, 65535\]")):
        with pytest.raises(ValueError, match=f"inter.broker.address.overrides.*{error}"):
            parse_address_overrides(bad)
