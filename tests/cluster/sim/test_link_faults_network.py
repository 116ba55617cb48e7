"""Link faults on the virtual network, one node and real frames: each fault kind happens and
is measurable in virtual time, within what TCP lets through (a connection's messages arrive
once and in order; loss is retransmitted; duplicates come on a connection of their own)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from cluster.broker.env import ClientInfo, OutboundResult, Reply
from cluster.protocol.codec import Request
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualClock, VirtualScheduler
from cluster.sim.link_fault import LinkFault, LinkFaultError, retransmission_delay_ms
from cluster.sim.network import NodeScheduler, SimNode, VirtualNetwork
from tests.cluster.sim.test_network import SERVER, EchoNode, api_versions_body

CLIENT = "127.0.0.1"
OTHER_CLIENT = "127.0.0.2"


class RecordingNode(EchoNode):
    """Echoes, and records each request's (connection, correlation id) in arrival order."""

    def __init__(self, scheduler: NodeScheduler) -> None:
        super().__init__(scheduler)
        self.arrivals: list[tuple[int, int]] = []

    def handle(self, request: Request, client: ClientInfo, reply: Reply) -> None:
        self.arrivals.append((client.connection_id, request.correlation_id))
        super().handle(request, client, reply)


def setup(seed: int = 3) -> tuple[VirtualScheduler, VirtualNetwork, RecordingNode]:
    scheduler = VirtualScheduler(VirtualClock())
    network = VirtualNetwork(scheduler, random.Random(seed))
    node = RecordingNode(NodeScheduler(scheduler, network, SERVER.host))
    network.add_node(SimNode(SERVER, node.handle))
    return scheduler, network, node


class Sent:
    """One request's send and answer times (virtual ns)."""

    def __init__(self, scheduler: VirtualScheduler) -> None:
        self.scheduler = scheduler
        self.sent_ns = scheduler.clock.monotonic_ns()
        self.result: OutboundResult | None = None
        self.answered_ns: int | None = None

    def done(self, result: OutboundResult) -> None:
        assert self.result is None, "answered twice"
        self.result = result
        self.answered_ns = self.scheduler.clock.monotonic_ns()

    @property
    def round_trip_ms(self) -> float:
        assert self.answered_ns is not None and self.result is not None and self.result.ok, self.result
        return (self.answered_ns - self.sent_ns) / 1e6


def send(network: VirtualNetwork, scheduler: VirtualScheduler, host: str = CLIENT, channel: str = "", timeout_ms: int = 60_000) -> Sent:
    sent = Sent(scheduler)
    network.outbound_for(host).send(SERVER.on_channel(channel) if channel else SERVER, ApiKey.API_VERSIONS, 3, api_versions_body(),
                                    sent.done, timeout_ms)
    return sent


def test_delay_adds_to_each_direction_of_a_round_trip() -> None:
    scheduler, network, _ = setup()
    plain = send(network, scheduler)
    scheduler.advance(100)
    assert 0.2 <= plain.round_trip_ms <= 2.0  # two latencies of 0.1-1 ms
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(delay_ms=40))
    one_way = send(network, scheduler)
    scheduler.advance(200)
    assert 40.2 <= one_way.round_trip_ms <= 42.0
    network.set_node_fault(SERVER.host, LinkFault(delay_ms=25))  # both directions, on top
    both = send(network, scheduler)
    scheduler.advance(200)
    assert 90.2 <= both.round_trip_ms <= 92.0
    assert network.link_fault(SERVER.host, CLIENT) == LinkFault(delay_ms=25)
    network.clear_link_faults()
    again = send(network, scheduler)
    scheduler.advance(100)
    assert again.round_trip_ms <= 2.0
    assert network.fault_stats.delayed == 1 + 2


def test_jitter_reorders_across_connections_never_within_one() -> None:
    scheduler, network, node = setup()
    network.set_node_fault(SERVER.host, LinkFault(delay_ms=5, jitter_ms=80))
    for i in range(40):
        send(network, scheduler, channel=f"c{i % 4}")
        scheduler.advance(2)
    scheduler.advance(500)
    assert len(node.arrivals) == 40
    by_connection: dict[int, list[int]] = {}
    for connection, correlation in node.arrivals:
        by_connection.setdefault(connection, []).append(correlation)
    assert len(by_connection) == 4
    assert all(ids == sorted(ids) for ids in by_connection.values()), "TCP order kept on each connection"
    correlations = [c for _, c in node.arrivals]
    assert correlations != sorted(correlations), "requests on different connections overtook each other"


def test_reorder_lets_messages_skip_the_delay_and_overtake_other_connections() -> None:
    scheduler, network, node = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(delay_ms=50, reorder=0.3))
    sends = []
    for i in range(30):
        sends.append(send(network, scheduler, channel=f"c{i % 3}"))
        scheduler.advance(5)
    scheduler.advance(500)
    stats = network.fault_stats
    assert stats.reordered > 0 and stats.delayed > 0 and stats.reordered + stats.delayed == 30
    fast = [s for s in sends if s.round_trip_ms < 50]
    assert fast and len(fast) < 30  # some skipped the delay ...
    correlations = [c for _, c in node.arrivals]
    assert correlations != sorted(correlations)  # ... and overtook earlier requests
    per_connection: dict[int, list[int]] = {}
    for connection, correlation in node.arrivals:
        per_connection.setdefault(connection, []).append(correlation)
    assert all(ids == sorted(ids) for ids in per_connection.values())


def test_reorder_needs_a_delay_to_overtake() -> None:
    with pytest.raises(LinkFaultError, match="reorder .* needs delay_ms or jitter_ms"):
        LinkFault(reorder=0.5)


def test_loss_is_retransmitted_after_the_rto_and_holds_back_what_follows() -> None:
    scheduler, network, node = setup(seed=5)
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(loss=0.4))
    sends = [send(network, scheduler) for _ in range(30)]  # one connection, pipelined
    scheduler.advance(60_000)
    assert all(s.result is not None and s.result.ok for s in sends), "nothing is lost from a live connection"
    assert [c for _, c in node.arrivals] == sorted(c for _, c in node.arrivals)
    assert network.fault_stats.retransmitted > 0
    round_trips = [s.round_trip_ms for s in sends]
    # A retransmission costs at least the 200 ms minimum RTO; one that follows a lost request
    # on the connection waits for it (head-of-line blocking), so the times never decrease.
    assert max(round_trips) >= 200
    assert round_trips == sorted(round_trips)
    assert retransmission_delay_ms(3, 200) == 200 + 400 + 800


def test_total_loss_stalls_the_connection_until_the_timeout_and_a_new_one_recovers() -> None:
    scheduler, network, node = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(loss=1.0))
    first = send(network, scheduler, timeout_ms=3_000)
    scheduler.advance(2_999)
    assert first.result is None
    scheduler.advance(2)
    assert first.result is not None and "timed out" in (first.result.error or "")
    assert node.arrivals == [] and network.fault_stats.retransmitted == 4  # lost at 0, 200, 600, 1,400 ms
    scheduler.advance(10_000)
    assert network.fault_stats.retransmitted == 4  # the connection is gone: no more tries
    network.clear_link_faults()
    second = send(network, scheduler)
    scheduler.advance(100)
    assert second.result is not None and second.result.ok


def test_a_segment_lost_in_a_burst_arrives_with_the_first_retransmission_after_it() -> None:
    scheduler, network, node = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(loss=1.0))
    sent = send(network, scheduler)
    scheduler.advance(1_000)  # lost at 0, 200, 600 ms; the next try is at 1,400 ms
    network.clear_link_faults()
    scheduler.advance(399)
    assert node.arrivals == []
    scheduler.advance(10)
    assert len(node.arrivals) == 1 and 1_400 <= sent.round_trip_ms <= 1_402


def test_tcp_gives_up_after_15_retransmissions_and_the_connection_stays_stalled() -> None:
    scheduler, network, node = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(loss=1.0))
    first = send(network, scheduler, timeout_ms=3_600_000)
    second = send(network, scheduler, timeout_ms=3_600_000)
    backoff_ms = retransmission_delay_ms(15, 200)
    assert backoff_ms == 200 * (2 ** 10 - 1) + 5 * 120_000  # doubling, capped at TCP_RTO_MAX
    scheduler.advance(backoff_ms + 1)
    stats = network.fault_stats
    assert stats.stalled == 2 and stats.retransmitted == 30
    network.clear_link_faults()
    scheduler.advance(60_000)
    assert node.arrivals == [] and first.result is None and second.result is None  # nothing more is sent


def test_loss_on_the_answers_delays_them_too() -> None:
    scheduler, network, node = setup(seed=8)
    network.set_link_fault(SERVER.host, CLIENT, LinkFault(loss=0.5))
    sends = [send(network, scheduler, channel=f"c{i}") for i in range(12)]
    scheduler.advance(60_000)
    assert len(node.arrivals) == 12
    assert all(s.result is not None and s.result.ok for s in sends)
    assert any(s.round_trip_ms >= 200 for s in sends) and any(s.round_trip_ms < 2 for s in sends)


def test_duplicate_serves_a_request_twice_and_answers_it_once() -> None:
    scheduler, network, node = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(duplicate=1.0))
    sends = [send(network, scheduler) for _ in range(5)]
    scheduler.advance(100)
    assert all(s.result is not None and s.result.ok for s in sends)  # each sender hears one answer
    served = Counter(c for _, c in node.arrivals)
    assert len(served) == 5 and set(served.values()) == {2}
    # The originals share their connection; each copy came on a connection of its own.
    assert sorted(Counter(conn for conn, _ in node.arrivals).values()) == [1, 1, 1, 1, 1, 5]
    assert network.fault_stats.duplicated == 5


def test_answers_are_never_duplicated() -> None:
    scheduler, network, node = setup()
    network.set_link_fault(SERVER.host, CLIENT, LinkFault(duplicate=1.0))
    sends = [send(network, scheduler) for _ in range(5)]
    scheduler.advance(100)
    assert all(s.result is not None and s.result.ok for s in sends) and len(node.arrivals) == 5
    assert network.fault_stats.duplicated == 0


def test_settings_from_different_tags_add_up_and_clear_separately() -> None:
    _, network, _ = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(delay_ms=10), tag="a")
    network.set_node_fault(CLIENT, LinkFault(delay_ms=5, loss=0.5), tag="b")
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(delay_ms=20), tag="a")  # replaces a's own
    assert network.link_fault(CLIENT, SERVER.host) == LinkFault(delay_ms=25, loss=0.5)
    assert network.link_fault(SERVER.host, CLIENT) == LinkFault(delay_ms=5, loss=0.5)
    assert network.link_fault(OTHER_CLIENT, SERVER.host) == LinkFault()
    network.set_node_fault(CLIENT, LinkFault(loss=0.5), tag="c")
    assert network.link_fault(CLIENT, SERVER.host).loss == pytest.approx(0.75)
    network.clear_link_faults("b")
    assert network.link_fault(CLIENT, SERVER.host) == LinkFault(delay_ms=20, loss=0.5)
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(), tag="a")  # nothing set: cleared
    network.clear_link_faults()
    assert network.link_fault(CLIENT, SERVER.host) == LinkFault()


@pytest.mark.parametrize("fields, message", [
    ({"loss": 1.5}, r"loss 1.5 must be a probability in \[0, 1\]"),
    ({"duplicate": -0.1}, "duplicate -0.1 must be a probability"),
    ({"reorder": True, "delay_ms": 1}, "reorder True must be a probability"),
    ({"delay_ms": -1}, "delay_ms -1 must be a finite number of milliseconds"),
    ({"jitter_ms": float("nan")}, "jitter_ms nan must be a finite number"),
    ({"delay_ms": "5"}, "delay_ms '5' must be"),
])
def test_bad_settings_are_refused_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises(LinkFaultError, match=message):
        LinkFault(**fields)


def test_bad_links_are_refused() -> None:
    _, network, _ = setup()
    with pytest.raises(LinkFaultError, match="two different hosts"):
        network.set_link_fault(CLIENT, CLIENT, LinkFault(delay_ms=1))
    with pytest.raises(LinkFaultError, match="must be a LinkFault"):
        network.set_node_fault(CLIENT, {"delay_ms": 1})  # type: ignore[arg-type]
    with pytest.raises(LinkFaultError, match="unknown link fault field.*'delay'"):
        LinkFault.from_value({"delay": 5})
    assert LinkFault.from_value({"delay_ms": 5, "reorder": 0.1}) == LinkFault(delay_ms=5, reorder=0.1)


def test_same_seed_same_faulty_schedule() -> None:
    def trace(seed: int) -> list[tuple[int, int, int]]:
        scheduler, network, node = setup(seed)
        network.set_node_fault(SERVER.host, LinkFault(delay_ms=3, jitter_ms=20, loss=0.2, duplicate=0.3, reorder=0.2))
        sends = []
        for i in range(40):
            sends.append(send(network, scheduler, host=(CLIENT, OTHER_CLIENT)[i % 2], channel=f"c{i % 3}"))
            scheduler.advance(1)
        scheduler.advance(30_000)
        return [(s.sent_ns, s.answered_ns or -1, i) for i, s in enumerate(sends)] + [(c, k, -1) for c, k in node.arrivals]

    assert trace(21) == trace(21)
    assert trace(21) != trace(22)


def test_no_fault_set_draws_nothing_extra() -> None:
    """A run without link faults keeps the latencies it had before they existed (seeded runs
    and their recorded findings replay unchanged)."""
    def arrivals(set_and_clear: bool) -> list[int]:
        scheduler, network, _ = setup(9)
        if set_and_clear:
            network.set_link_fault(CLIENT, SERVER.host, LinkFault(loss=0.5))
            network.clear_link_faults()
        sends = [send(network, scheduler, channel=f"c{i}") for i in range(10)]
        scheduler.advance(100)
        return [s.answered_ns or -1 for s in sends]

    assert arrivals(False) == arrivals(True)



def test_a_lost_syn_is_retried_after_one_second_then_two() -> None:
    scheduler, network, _ = setup()
    network.set_link_fault(CLIENT, SERVER.host, LinkFault(loss=1.0))
    connected_ns: list[int] = []
    network.connect_stream(CLIENT, SERVER, on_frame=lambda _: None, on_lost=lambda _: None,
                           on_connected=lambda _: connected_ns.append(scheduler.clock.monotonic_ns()), on_refused=lambda _: None)
    scheduler.advance(2_500)  # tries at 0 and 1,000 ms lost; the next is at 3,000 ms
    network.clear_link_faults()
    scheduler.advance(499)
    assert connected_ns == []
    scheduler.advance(10)
    assert len(connected_ns) == 1 and 3_000 <= connected_ns[0] / 1e6 <= 3_002


def test_a_lost_refusal_is_not_resent() -> None:
    scheduler, network, _ = setup()
    network.crash(SERVER.host)
    network.set_link_fault(SERVER.host, CLIENT, LinkFault(loss=1.0))
    refused: list[str] = []
    network.connect_stream(CLIENT, SERVER, on_frame=lambda _: None, on_lost=lambda _: None, on_connected=lambda _: None,
                           on_refused=refused.append)
    scheduler.advance(10_000)
    assert refused == [] and network.fault_stats.rst_lost == 1  # the client's own connect timeout decides
    network.clear_link_faults()
    network.connect_stream(CLIENT, SERVER, on_frame=lambda _: None, on_lost=lambda _: None, on_connected=lambda _: None,
                           on_refused=refused.append)
    scheduler.advance(10)
    assert len(refused) == 1
