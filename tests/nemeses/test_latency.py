"""The latency, bandwidth and flaky packages (nemeses.toxics) on a real routed cluster.

One 3-broker cluster with every link through a proxy (cluster.proxy_routing) for the module;
the packages drive its proxy server through toxiproxy-python. Checks the seeded schedule and
its targets, that a fault really lands on the named proxies (a produce through a delayed
link takes at least the delay; lower bounds only), that stop and heal remove exactly the
package's toxics, the live `primary` target, and the errors for bad options and for a
cluster without proxies.
"""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from typing import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.control import ClusterControl
from cluster.launcher import CONTROLLER_NODE_ID, LocalCluster
from cluster.proxy_routing import ProxyRouting, link_name
from harness.spec import RunSpec, SpecError
from nemeses.bandwidth import BandwidthPackage
from nemeses.base import NemesisError, NemesisOptions, build_packages, checked_options
from nemeses.flaky import FlakyPackage
from nemeses.latency import LatencyPackage
from nemeses.toxics import STREAMS
from tests.proxy.helpers import add_toxic, call

TIMEOUT_S = 30.0
CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3", "min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(brokers=3, config=CONFIG, seed=41, proxies=ProxyRouting(seed=41)) as routed:
        admin = AdminClient({"bootstrap.servers": routed.bootstrap_servers})
        admin.create_topics([NewTopic("slow", 1, 3)])["slow"].result(TIMEOUT_S)
        yield routed


@pytest.fixture
def control(cluster) -> Iterator[ClusterControl]:
    yield ClusterControl(cluster)
    call(cluster.proxies._server, "POST", "/reset")  # type: ignore[union-attr]


def toxics(cluster: LocalCluster) -> dict[str, list[str]]:
    proxies = call(cluster.proxies._server, "GET", "/proxies").json()  # type: ignore[union-attr]
    return {name: sorted(t["name"] for t in value["toxics"]) for name, value in proxies.items() if value["toxics"]}


def starts(package, seed: int, count: int) -> list[dict]:
    ops = package.schedule(random.Random(seed))
    return [op["value"] for op in (next(ops) for _ in range(2 * count)) if op["f"].startswith("start-")]


def leader(control: ClusterControl, topic: str = "slow") -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        found = control.leaders([topic])
        if found:
            return next(iter(found.values()))
        time.sleep(0.1)
    raise AssertionError("no leader")


def timed_produce_s(cluster: LocalCluster, producer: Producer) -> float:
    began = time.monotonic()
    producer.produce("slow", b"x")
    assert producer.flush(TIMEOUT_S) == 0
    return time.monotonic() - began


def test_the_schedule_is_seeded_and_its_targets_are_real_links(control):
    package = LatencyPackage(control, NemesisOptions())
    a, b, c = starts(package, 5, 40), starts(package, 5, 40), starts(package, 6, 40)
    assert a == b and a != c
    names = set(control.proxy_routing().links)
    links = control.proxy_routing().links
    seen = set()
    for value in a:
        seen.add(value["targets"])
        pairs = [tuple(pair) for pair in value["links"]]
        assert pairs and {name for name, _ in pairs} <= names and {s for _, s in pairs} <= set(STREAMS)
        assert value["toxic"] == {"type": "latency", "attributes": {"latency": 250, "jitter": 50}, "toxicity": 1.0}
        if value["targets"] == "one":
            assert all(links[name].touches(value["node"]) for name, _ in pairs)
            assert len(pairs) == 2 * sum(link.touches(value["node"]) for link in links.values())
        elif value["targets"] == "link":
            assert len({name for name, _ in pairs}) == 1 and len(pairs) == 2
        elif value["targets"] == "direction":
            assert len(pairs) == 1
        else:
            assert len(pairs) == 2 * len(names)
    assert seen == {"one", "link", "direction", "all"}
    # link_kinds narrows the candidates: only client links here.
    clients_only = LatencyPackage(control, checked_options({"link_kinds": "client", "link_targets": "link,direction"}))
    for value in starts(clients_only, 7, 20):
        assert all(links[name].kind == "client" for name, _ in value["links"])


def test_latency_on_the_leaders_client_link_delays_every_produce_until_it_stops(control, cluster):
    lead = leader(control)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    timed_produce_s(cluster, producer)  # connected and warm
    package = LatencyPackage(control, checked_options({"latency_ms": "400", "jitter_ms": "0"}))
    client_link = link_name("logquake", None, lead, CONTROLLER_NODE_ID)
    done = package.invoke("start-latency", {"targets": "direction", "links": [[client_link, "upstream"]],
                                            "toxic": {"type": "latency", "attributes": {"latency": 400, "jitter": 0},
                                                      "toxicity": 1.0}})
    assert done["links"] == [[client_link, "upstream"]]
    assert toxics(cluster) == {client_link: ["logquake-latency-upstream"]}
    # Each Produce waits 400 ms in the proxy before it reaches the leader: a lower bound.
    assert min(timed_produce_s(cluster, producer) for _ in range(3)) >= 0.4
    assert package.invoke("stop-latency", None) == {"removed": 1}
    assert toxics(cluster) == {}
    assert package.invoke("stop-latency", None) == {"removed": 0}


def test_the_primary_target_is_the_leader_of_the_most_tested_partitions_resolved_live(control, cluster):
    options = checked_options({"link_targets": "primary", "link_kinds": "controller", "latency_ms": "50"})
    package = LatencyPackage(control, NemesisOptions(**{**options.__dict__, "primary_topics": ("slow",)}))
    value = starts(package, 1, 1)[0]
    assert value == {"targets": "primary", "toxic": {"type": "latency", "attributes": {"latency": 50, "jitter": 50},
                                                      "toxicity": 1.0}}
    done = package.invoke("start-latency", value)
    node = leader(control)
    assert done["node"] == node and done["leaders"] == {"slow-0": node}
    controller_link = link_name("logquake", node, CONTROLLER_NODE_ID, CONTROLLER_NODE_ID)
    assert done["links"] == [[controller_link, "upstream"], [controller_link, "downstream"]]
    assert toxics(cluster) == {controller_link: ["logquake-latency-downstream", "logquake-latency-upstream"]}
    package.heal()
    assert toxics(cluster) == {}


def test_heal_removes_the_packages_toxics_on_every_link_and_nothing_else(control, cluster):
    server = cluster.proxies._server  # type: ignore[union-attr]
    names = sorted(control.proxy_routing().links)
    # A toxic of the package left by someone else's op, and a toxic that is not the package's.
    call(server, "POST", f"/proxies/{names[0]}/toxics",
         {"name": "logquake-flaky-upstream", "type": "timeout", "stream": "upstream", "attributes": {"timeout": 0}})
    add_toxic(server, names[1], "latency", stream="downstream", latency=1)
    package = FlakyPackage(control, NemesisOptions())
    value = next(v for v in starts(package, 3, 30) if v["targets"] == "all")
    package.invoke("start-flaky", value)
    assert len(sum(toxics(cluster).values(), [])) == 2 * len(names) + 1
    package.heal()
    assert toxics(cluster) == {names[1]: ["latency_downstream"]}
    package.heal()  # idempotent


def test_flaky_and_bandwidth_draw_their_toxics_from_the_options(control):
    flaky = FlakyPackage(control, checked_options({"flaky_kinds": "reset_peer,timeout", "flaky_toxicity_percent": "30"}))
    drawn = [value["toxic"] for value in starts(flaky, 9, 30)]
    assert {toxic["type"] for toxic in drawn} == {"reset_peer", "timeout"}
    for toxic in drawn:
        assert toxic["toxicity"] == 0.3
        low, high = (0, 2000) if toxic["type"] == "reset_peer" else (500, 3000)
        assert low <= toxic["attributes"]["timeout"] <= high
    slicer = FlakyPackage(control, checked_options({"flaky_kinds": "slicer"}))
    assert {value["toxic"]["type"] for value in starts(slicer, 1, 5)} == {"slicer"}
    bandwidth = BandwidthPackage(control, checked_options({"bandwidth_kb_per_s": "8"}))
    assert {str(value["toxic"]) for value in starts(bandwidth, 1, 5)} == {
        str({"type": "bandwidth", "attributes": {"rate": 8}, "toxicity": 1.0})}


@pytest.mark.parametrize("raw, error", [
    ({"link_targets": "everywhere"}, "unknown link_targets value 'everywhere'"),
    ({"link_kinds": ""}, "link_kinds is empty"),
    ({"flaky_kinds": "limit_data"}, "unknown flaky_kinds value 'limit_data'"),
    ({"latency_ms": "0"}, "latency_ms 0 must be an integer >= 1"),
    ({"jitter_ms": "-1"}, "jitter_ms -1 must be an integer >= 0"),
    ({"flaky_toxicity_percent": "101"}, "at most 100"),
    ({"latency_ms": "fast"}, "latency_ms 'fast' is not an integer"),
])
def test_bad_link_options_are_named(raw, error):
    with pytest.raises(NemesisError, match=error):
        checked_options(raw)


def test_a_cluster_without_proxies_is_refused_naming_the_reason():
    direct = ClusterControl(SimpleNamespace(brokers=[]))  # a cluster whose links are direct
    for name in ("latency", "bandwidth", "flaky"):
        with pytest.raises(NemesisError, match="need the cluster's links routed through proxies"):
            build_packages([name], direct)


@pytest.mark.parametrize("fields, error", [
    ({"nemeses": ("latency",), "toxiproxy_url": "localhost:8474"}, "is not http://HOST:PORT"),
    ({"nemeses": ("kill",), "toxiproxy_url": "http://127.0.0.1:8474"}, "only used by the latency, bandwidth, flaky"),
    ({"nemeses": ("latency", "partition"), "toxiproxy_url": "http://127.0.0.1:8474"}, "partition needs the run's private"),
])
def test_a_toxiproxy_url_the_run_cannot_use_is_refused(fields, error):
    with pytest.raises(SpecError, match=f"toxiproxy_url: .*{error}"):
        RunSpec(name="x", workload="queue", seed=1, **fields)


def test_an_external_clusters_links_are_the_servers_proxies_named_as_logquake_expects(cluster, control):
    # The module's routed cluster stands in for a user's set-up: a Kafka cluster whose brokers
    # advertise Toxiproxy proxies named in logquake's layout, plus a proxy of their own.
    from nemeses.toxics import ServerLinks

    server = cluster.proxies._server  # type: ignore[union-attr]
    call(server, "POST", "/proxies", {"name": "users-redis", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"})
    try:
        links = ServerLinks(server.url, cluster.bootstrap_servers)
        assert set(links.links) == set(cluster.proxies.links)  # type: ignore[union-attr]
        assert links.broker_ids == [0, 1, 2]
        assert {name: link.kind for name, link in links.links.items()} == {
            name: link.kind for name, link in cluster.proxies.links.items()}  # type: ignore[union-attr]
        assert links.leaders(["slow"]) == control.leaders(["slow"])
        package = LatencyPackage(links, checked_options({"link_targets": "primary", "link_kinds": "client"}))
        done = package.invoke("start-latency", starts(package, 2, 1)[0])
        node = leader(control)
        client_link = link_name("logquake", None, node, CONTROLLER_NODE_ID)
        assert done["node"] == node and done["links"] == [[client_link, "upstream"], [client_link, "downstream"]]
        assert toxics(cluster) == {client_link: ["logquake-latency-downstream", "logquake-latency-upstream"]}
        package.heal()
        assert toxics(cluster) == {}
    finally:
        call(server, "DELETE", "/proxies/users-redis")


def test_a_server_without_logquakes_layout_is_refused_naming_it():
    from nemeses.toxics import ServerLinks
    from proxy import ProxyServer

    with ProxyServer(port=0, seed=1) as server:
        call(server, "POST", "/proxies", {"name": "kafka", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"})
        with pytest.raises(NemesisError, match="no proxy named as logquake expects.*it has: kafka"):
            ServerLinks(server.url, "127.0.0.1:9")


def test_an_unreachable_server_is_named():
    from nemeses.toxics import ServerLinks

    with pytest.raises(NemesisError, match="the Toxiproxy server at http://127.0.0.1:1 did not answer"):
        ServerLinks("http://127.0.0.1:1", "127.0.0.1:9")


def test_link_faults_against_an_external_cluster_need_a_toxiproxy_url():
    with pytest.raises(SpecError, match="latency needs the cluster's links behind Toxiproxy proxies.*--toxiproxy-url"):
        RunSpec(name="x", workload="queue", seed=1, nemeses=("latency",), bootstrap_servers="127.0.0.1:9092")
    spec = RunSpec(name="x", workload="queue", seed=1, nemeses=("latency", "flaky"), bootstrap_servers="127.0.0.1:9092",
                   toxiproxy_url="http://127.0.0.1:8474")
    assert spec.external_cluster
    with pytest.raises(SpecError, match="kill needs control of the broker processes"):
        RunSpec(name="x", workload="queue", seed=1, nemeses=("latency", "kill"), bootstrap_servers="127.0.0.1:9092",
                toxiproxy_url="http://127.0.0.1:8474")


def test_link_faults_heal_before_killed_brokers_restart():
    # A broker restarted while 10 s of latency sits on its link to the controller would wait
    # out its start timeout: the link faults heal with the network, first.
    from harness.run import heal_rank

    packages = [SimpleNamespace(name=n) for n in ("kill", "flaky", "brokers-down", "latency", "bandwidth")]
    order = [p.name for p in sorted(packages, key=heal_rank)]
    assert set(order[:3]) == {"latency", "bandwidth", "flaky"} and set(order[3:]) == {"kill", "brokers-down"}
