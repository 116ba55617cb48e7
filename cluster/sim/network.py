"""A virtual network between in-process nodes, implementing the cores' `Outbound`.

Every request is really encoded, decoded by the receiving node's codec (against its own
version table), handled by the node's real `handle`, and its response frame decoded by the
sender, so the simulator exercises the same bytes as the process runtime. Delivery takes a
seeded latency on the shared virtual scheduler.

Connections behave like Kafka's: one per (source host, destination endpoint); the receiving
node serves one request at a time per connection, in order (as `BrokerConnection` does);
a request with no answer within its timeout fails and drops its connection, failing every
other request on it. A crashed node's connections are reset at once on both ends (the peer
sees the connection lost, as after a SIGKILL); a partition silently drops messages between
the two hosts in the blocked direction, so requests across it time out.

Besides node-to-node requests (`send`, given kio bodies), the network carries byte streams
for clients that bring their own protocol code (`connect_stream`: an unmodified Kafka client
on the simulator's asyncio loop): their request frames are decoded and served by the same
nodes, and the encoded answers come back as bytes.

Link faults (`set_link_fault` for one direction between two hosts, `set_node_fault` for every
link touching a host; settings from different `tag`s add up, see `LinkFault.plus`). Every
connection here stands for a TCP connection, and Kafka's protocol relies on what TCP
guarantees: a connection's bytes arrive complete, once and in order, or the connection
breaks. So each fault is applied as a real network under TCP would make it visible:

- delay / jitter: each message on the link arrives `delay_ms` + U[0, `jitter_ms`) later.
  A connection's messages still arrive in the order sent (TCP reassembles them; a later one
  waits behind an earlier, slower one), so jitter reorders messages only across
  connections and against other links.
- loss: a lost transmission is retransmitted by TCP after the RTO (200 ms, doubling with
  each further loss of the same segment; a SYN starts at 1 s), and everything sent after it
  on the connection waits behind it (head-of-line blocking). Nothing disappears from a live
  connection. Each try draws its loss from the link's setting at that moment, so a segment
  lost during a burst of loss gets through with the first retransmission after the burst.
  After `tcp_retries2` (15) retransmissions (a SYN: `tcp_syn_retries`, 6) the kernel gives
  up and the connection stays stalled: that takes Linux 13+ minutes, far beyond any Kafka
  request timeout, so the sender's own timeout has broken the connection first, as it would
  on a real host. A lost RST (a refused connection's answer) is not resent.
- duplicate: TCP discards a duplicated segment by its sequence number, so a network
  duplicate never reaches the application on the same connection. What a server does see
  twice is a request sent again on a fresh connection (a sender's retry whose first copy got
  through too). A duplicated request is delivered once more on a connection of its own
  from the same host, within one minimum latency of the original (before the sender could
  have acted on the original's answer), and the copy's answer is discarded by its sender.
  The server may execute the copy before or after the original, both orders a retrying
  sender produces. Only requests are duplicated (an answer cannot be: the sender of the
  request reads one answer per request on its connection), and never an acks=0 Produce
  (whose senders do not retry: a second copy could only come from a broken TCP).
- reorder: with the given probability a message skips the link's delay and jitter
  (netem's reorder), so it overtakes messages sent earlier on the link's other connections;
  on its own connection it still waits for those before it.

Delay, jitter, reorder and duplication are drawn when a message is sent: a setting applies
to messages sent after it is made, those in flight keep theirs. Loss is drawn at each try.
With no setting on a link nothing extra is drawn, so a run without link faults makes the
same draws as before they existed.
"""

from __future__ import annotations

import functools
import itertools
import logging
import struct
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster.broker.env import ClientInfo, Endpoint, OutboundResult, Reply, Response, Rng
from cluster.protocol.codec import (Request, RequestError, UnsupportedVersionError, decode_request, decode_response, encode_request,
                                    peek_header, unsupported_api_versions_response)
from cluster.protocol.versions import ApiKey
from cluster.runtime.virtual_time import VirtualScheduler, VirtualTimer
from cluster.sim.link_fault import (NO_FAULT, TCP_RETRIES2, TCP_RTO_MAX_MS, TCP_RTO_MIN_MS, TCP_SYN_RETRIES, TCP_SYN_RTO_MS, LinkFault,
                                    LinkFaultError)

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
Handler = Callable[[Request, ClientInfo, Reply], None]


@dataclass(slots=True)
class SimNode:
    """A node that can be reached: its address, request handler and API version table."""

    endpoint: Endpoint
    handle: Handler
    versions: Mapping[Any, Any] | None = None  # None: the broker's table
    up: bool = True


@dataclass(slots=True)
class _Call:
    correlation_id: int
    api_key: int
    api_version: int
    frame: bytes
    on_done: Callable[[OutboundResult], None]
    timer: VirtualTimer | None = None
    # A stream's request: the answer frame goes to `on_frame` undecoded, the client decodes it.
    on_frame: Callable[[bytes], None] | None = None


@dataclass(slots=True)
class _Connection:
    source_host: str
    destination: Endpoint
    generation: int
    calls: deque[_Call] = field(default_factory=deque)   # sent, not yet answered
    unserved: deque[_Call] = field(default_factory=deque)  # arrived at the server, not yet dispatched
    server_busy: bool = False
    alive: bool = True
    # A stream's owner hears of a reset or a close by the server here (the TCP RST/FIN).
    on_lost: Callable[[str], None] | None = None
    # A duplicated request's own connection: it carries that one request, and its answer is
    # discarded by the sender.
    copy: bool = False
    # Closed by the client with requests still on their way (StreamConnection.close_after_sent):
    # they arrive and are served, their answers dropped; the connection ends with the last.
    half_closed: bool = False


@dataclass(slots=True)
class LinkFaultStats:
    """What the link faults did, summed over every link, for tests and reports."""

    delayed: int = 0        # messages given extra delay or jitter
    reordered: int = 0      # messages that skipped the link's delay
    retransmitted: int = 0  # transmissions lost and sent again
    stalled: int = 0        # segments lost for good (their connection stalls)
    rst_lost: int = 0       # refusals (RST) lost
    duplicated: int = 0     # request copies served
    duplicated_apis: dict[int, int] = field(default_factory=dict)  # copies served, by API key


@dataclass(slots=True)
class _ChannelOrder:
    """A connection direction's reassembly: messages are numbered as sent and handed over
    in that order."""

    next_sent: int = 0
    next_delivered: int = 0
    arrived: dict[int, Callable[[], None]] = field(default_factory=dict)  # waiting for an earlier one


@dataclass(slots=True)
class _Message:
    from_host: str
    to_host: str
    action: Callable[[], None]
    channel: object
    sequence: int  # on its channel; -1 without one
    segment: str   # "data", "syn" or "rst"
    delay_ms: float
    copy: Callable[[], None] | None  # delivers the duplicate, when the link duplicates it
    losses: int = 0


class StreamConnection:
    """One client byte-stream connection to a node (a TCP connection). `send` takes whole
    request frames (size prefix included); answers arrive, in order, at `on_frame`; a reset,
    or a close by the server, at `on_lost` (once). Messages are dropped by partitions and held
    by a paused node exactly as node-to-node traffic is."""

    def __init__(self, network: VirtualNetwork, connection: _Connection, on_frame: Callable[[bytes], None],
                 on_lost: Callable[[str], None]) -> None:
        self._network = network
        self._connection = connection
        self._on_frame = on_frame
        connection.on_lost = on_lost

    @property
    def destination(self) -> Endpoint:
        return self._connection.destination

    @property
    def alive(self) -> bool:
        return self._connection.alive

    def send(self, frame: bytes) -> None:
        self._network._send_frame(self._connection, frame, self._on_frame)

    def close(self) -> None:
        """Closed by the client: nothing is reported back to it."""
        self._network._fail(self._connection, "closed by the client", notify=False)

    def close_after_sent(self) -> None:
        """Closed by the client as a socket's close() does (a FIN after the data): what it has
        sent still reaches the node and is served; the answers are dropped. `close` instead
        drops what is in transit (as the simulation always did; aiokafka's runs keep it)."""
        connection = self._connection
        if not connection.alive:
            return
        connection.on_lost = None
        self._on_frame = _ignore_frame
        for call in connection.calls:
            call.on_frame = _ignore_frame
        if connection.calls:
            connection.half_closed = True
        else:
            self._network._fail(connection, "closed by the client", notify=False)


class VirtualNetwork:
    def __init__(self, scheduler: VirtualScheduler, rng: Rng, min_latency_ms: float = 0.1, max_latency_ms: float = 1.0) -> None:
        self.scheduler = scheduler
        self._rng = rng
        self._min_latency_ms = min_latency_ms
        self._max_latency_ms = max_latency_ms
        self._nodes: dict[tuple[str, int], SimNode] = {}
        self._connections: dict[tuple[str, str, int, str], _Connection] = {}
        self._blocked: set[tuple[str, str]] = set()  # (from host, to host): messages dropped
        # Paused hosts (SIGSTOP): what arrives for them waits, in order, until they resume.
        self._held: dict[str, list[Callable[[], None]]] = {}
        self._generations = itertools.count(1)
        self._streams = itertools.count(1)
        self._orders: dict[object, _ChannelOrder] = {}  # by connection direction
        self._correlations = itertools.count(1)
        self.messages_delivered = 0
        self.messages_dropped = 0
        # Link faults by (tag, from host, to host); a node's by (tag, host). The effective
        # fault of a direction is cached until a setting changes.
        self._link_faults: dict[tuple[str, str, str], LinkFault] = {}
        self._node_faults: dict[tuple[str, str], LinkFault] = {}
        self._effective_faults: dict[tuple[str, str], LinkFault | None] = {}
        self._copies = itertools.count(1)
        self.fault_stats = LinkFaultStats()

    # ---- topology ---------------------------------------------------------------------

    def add_node(self, node: SimNode) -> None:
        self._nodes[(node.endpoint.host, node.endpoint.port)] = node

    def endpoint_at(self, host: str, port: int) -> Endpoint | None:
        """The node listening at host:port (up or not), for clients that dial addresses."""
        node = self._nodes.get((host, port))
        return node.endpoint if node is not None else None

    def has_host(self, host: str) -> bool:
        return any(h == host for h, _ in self._nodes)

    def set_handler(self, endpoint: Endpoint, handle: Handler) -> None:
        """A restarted node: same address, new core."""
        self._nodes[(endpoint.host, endpoint.port)].handle = handle

    def crash(self, host: str) -> None:
        """The process at `host` dies: it stops serving, and every connection to or from it
        is reset (both ends see it lost at once)."""
        for node in self._nodes.values():
            if node.endpoint.host == host:
                node.up = False
        for key, connection in list(self._connections.items()):
            if connection.source_host == host or connection.destination.host == host:
                self._fail(connection, f"connection to {connection.destination} reset (process crashed)", notify=connection.source_host != host)

    def revive(self, host: str) -> None:
        for node in self._nodes.values():
            if node.endpoint.host == host:
                node.up = True

    def pause(self, host: str) -> None:
        self._held.setdefault(host, [])

    def resume(self, host: str) -> None:
        for action in self._held.pop(host, []):
            action()

    def is_paused(self, host: str) -> bool:
        return host in self._held

    def hold_if_paused(self, host: str, action: Callable[[], None]) -> bool:
        """Queue `action` for when `host` resumes; False when it is not paused."""
        held = self._held.get(host)
        if held is None:
            return False
        held.append(action)
        return True

    def block(self, from_host: str, to_host: str) -> None:
        """Drop every message from `from_host` to `to_host` (one direction)."""
        self._blocked.add((from_host, to_host))

    def isolate(self, groups: list[list[str]]) -> None:
        """Partition the hosts into `groups`: no traffic between different groups."""
        for i, group in enumerate(groups):
            for j, other in enumerate(groups):
                if i != j:
                    for a in group:
                        for b in other:
                            self.block(a, b)

    def heal(self) -> None:
        self._blocked.clear()

    def is_blocked(self, from_host: str, to_host: str) -> bool:
        return (from_host, to_host) in self._blocked

    def outbound_for(self, host: str) -> VirtualOutbound:
        return VirtualOutbound(self, host)

    # ---- link faults ------------------------------------------------------------------

    def set_link_fault(self, from_host: str, to_host: str, fault: LinkFault, tag: str = "") -> None:
        """Apply `fault` to messages from `from_host` to `to_host` (one direction), replacing
        what `tag` set there before; a fault with nothing set clears it."""
        _check_hosts(from_host, to_host)
        if not isinstance(fault, LinkFault):
            raise LinkFaultError(f"a link fault must be a LinkFault, not {fault!r}")
        key = (tag, from_host, to_host)
        if fault.is_noop:
            self._link_faults.pop(key, None)
        else:
            self._link_faults[key] = fault
        self._effective_faults.clear()

    def set_node_fault(self, host: str, fault: LinkFault, tag: str = "") -> None:
        """Apply `fault` to every link touching `host`, both directions."""
        _check_hosts(host)
        if not isinstance(fault, LinkFault):
            raise LinkFaultError(f"a link fault must be a LinkFault, not {fault!r}")
        if fault.is_noop:
            self._node_faults.pop((tag, host), None)
        else:
            self._node_faults[(tag, host)] = fault
        self._effective_faults.clear()

    def clear_link_faults(self, tag: str | None = None) -> None:
        """Clear what `tag` set (every setting when None)."""
        if tag is None:
            self._link_faults.clear()
            self._node_faults.clear()
        else:
            self._link_faults = {k: f for k, f in self._link_faults.items() if k[0] != tag}
            self._node_faults = {k: f for k, f in self._node_faults.items() if k[0] != tag}
        self._effective_faults.clear()

    def link_fault(self, from_host: str, to_host: str) -> LinkFault:
        """The fault messages from `from_host` to `to_host` get now (every setting added up)."""
        return self._fault_on(from_host, to_host) or NO_FAULT

    def _fault_on(self, from_host: str, to_host: str) -> LinkFault | None:
        if not self._link_faults and not self._node_faults:
            return None
        key = (from_host, to_host)
        if key in self._effective_faults:
            return self._effective_faults[key]
        total = NO_FAULT
        # Settings add up in the order they were first made: deterministic for one script.
        for (_, src, dst), fault in self._link_faults.items():
            if src == from_host and dst == to_host:
                total = total.plus(fault)
        for (_, host), fault in self._node_faults.items():
            if host in key:
                total = total.plus(fault)
        effective = None if total.is_noop else total
        self._effective_faults[key] = effective
        return effective

    # ---- delivery ---------------------------------------------------------------------

    def _may_duplicate(self) -> bool:
        """Whether a request sent now needs its way of being duplicated: only a link fault
        duplicates (without one, none is drawn)."""
        return bool(self._link_faults or self._node_faults)

    def _latency_ms(self) -> float:
        return self._min_latency_ms + (self._max_latency_ms - self._min_latency_ms) * self._rng.random()

    def _deliver(self, from_host: str, to_host: str, action: Callable[[], None], channel: object = None, *,
                 segment: str = "data", copy: Callable[[], None] | None = None) -> None:
        """Run `action` at `to_host` after a latency; messages on one `channel` (a connection
        direction) are handed over in the order sent, as TCP reassembles a stream (one that
        arrives early waits for those before it). `segment` says how TCP treats a loss:
        "data" and "syn" are retransmitted, "rst" is not. `copy`, for requests, is how a
        copy is delivered when the link duplicates the request."""
        # The checks below are written out, not called: this runs for every message.
        if self._blocked and (from_host, to_host) in self._blocked:
            self.messages_dropped += 1
            return
        sequence = -1
        if channel is not None:
            order = self._orders.get(channel)
            if order is None:
                order = self._orders[channel] = _ChannelOrder()
            sequence = order.next_sent
            order.next_sent += 1
        delay_ms = self._min_latency_ms + (self._max_latency_ms - self._min_latency_ms) * self._rng.random()
        fault = self._fault_on(from_host, to_host) if self._link_faults or self._node_faults else None
        if fault is None:
            # No link fault: one transmission (nothing is lost), no copy; what _transmit would
            # do for it, without the message it keeps for retransmissions.
            self.scheduler.call_at_ns(self.scheduler.clock.monotonic_ns() + int(delay_ms * 1_000_000),
                                      functools.partial(self._arrive_in_order, from_host, to_host, action, channel, sequence))
            return
        delay_ms += self._path_delay_ms(fault)
        if not (copy is not None and fault.duplicate > 0 and self._rng.random() < fault.duplicate):
            copy = None
        self._transmit(_Message(from_host, to_host, action, channel, sequence, segment, delay_ms, copy))

    def _path_delay_ms(self, fault: LinkFault) -> float:
        """The extra one-way delay `fault` gives a message: none if it is reordered (it skips
        the queue), else the delay and a draw of the jitter."""
        if fault.reorder > 0 and self._rng.random() < fault.reorder:
            self.fault_stats.reordered += 1
            return 0.0
        if fault.delay_ms or fault.jitter_ms:
            self.fault_stats.delayed += 1
            return fault.delay_ms + (fault.jitter_ms * self._rng.random() if fault.jitter_ms else 0.0)
        return 0.0

    def _transmit(self, message: _Message) -> None:
        """One transmission of `message`. The loss is drawn from the link's fault at the time
        of each transmission, so a segment lost in a burst of loss gets through with the first
        retransmission after it (as TCP's would)."""
        if message.channel is not None and message.channel not in self._orders:
            return  # its connection is gone: nothing waits for it
        fault = self._fault_on(message.from_host, message.to_host) if self._link_faults or self._node_faults else None
        if fault is not None and fault.loss > 0 and self._rng.random() < fault.loss:
            if message.segment == "rst":
                self.fault_stats.rst_lost += 1  # a RST is not resent: the peer's timeout decides
                return
            syn = message.segment == "syn"
            if message.losses >= (TCP_SYN_RETRIES if syn else TCP_RETRIES2):
                # The kernel gives up; its connection is stalled for good (its hole is
                # never filled), and the sender's own request timeout has long acted.
                self.fault_stats.stalled += 1
                return
            rto_ms = min((TCP_SYN_RTO_MS if syn else TCP_RTO_MIN_MS) * 2 ** message.losses, TCP_RTO_MAX_MS)
            message.losses += 1
            self.fault_stats.retransmitted += 1
            self.scheduler.call_later(rto_ms, lambda: self._transmit(message))
            return
        arrival_ns = self.scheduler.clock.monotonic_ns() + int(message.delay_ms * 1_000_000)
        self.scheduler.call_at_ns(arrival_ns, functools.partial(self._arrive_in_order, message.from_host, message.to_host,
                                                                message.action, message.channel, message.sequence))
        if message.copy is not None:
            # The copy rides a connection of its own, so it waits for nothing; it arrives
            # within one minimum latency of the original: its sender cannot have acted on
            # the original's answer yet.
            copy = message.copy
            self.scheduler.call_at_ns(arrival_ns + int(self._min_latency_ms * self._rng.random() * 1_000_000),
                                      lambda: self._land(message.from_host, message.to_host, copy))

    def _arrive_in_order(self, from_host: str, to_host: str, action: Callable[[], None], channel: object,
                         sequence: int) -> None:
        order = self._orders.get(channel) if channel is not None else None
        if order is None:  # no stream order to keep (or its connection is gone)
            self._land(from_host, to_host, action)
            return
        order.arrived[sequence] = action
        while order.next_delivered in order.arrived:
            action = order.arrived.pop(order.next_delivered)
            order.next_delivered += 1
            self._land(from_host, to_host, action)

    def _land(self, from_host: str, to_host: str, action: Callable[[], None]) -> None:
        # A partition that began while the message was in flight drops it too.
        if self._blocked and (from_host, to_host) in self._blocked:
            self.messages_dropped += 1
            return
        self.messages_delivered += 1
        held = self._held.get(to_host) if self._held else None
        if held is None:
            action()
        else:
            held.append(action)

    def send(self, source_host: str, destination: Endpoint, api_key: int, api_version: int, body: Any,
             on_done: Callable[[OutboundResult], None], timeout_ms: int) -> None:
        correlation_id = next(self._correlations) & 0x7FFFFFFF
        try:
            frame = encode_request(api_key, api_version, correlation_id, f"sim-{source_host}", body)
        except Exception as error:  # noqa: BLE001 - reported to the caller, as the runtime does
            self.scheduler.call_later(0, lambda: on_done(OutboundResult(None, f"cannot encode request {api_key} v{api_version}: {error!r}")))
            return
        key = (source_host, destination.host, destination.port, destination.channel)
        connection = self._connections.get(key)
        node = self._nodes.get((destination.host, destination.port))
        if connection is None or not connection.alive:
            if node is None or not node.up:
                # Connection refused: the failure comes back after one round trip.
                reason = f"cannot connect to {destination}: connection refused"
                self.scheduler.call_later(self._latency_ms() * 2 + self.link_fault(source_host, destination.host).delay_ms
                                          + self.link_fault(destination.host, source_host).delay_ms,
                                          lambda: on_done(OutboundResult(None, reason)))
                return
            connection = self._connections[key] = _Connection(source_host, destination, next(self._generations))
        call = _Call(correlation_id, api_key, api_version, frame, on_done)
        call.timer = self.scheduler.call_later(timeout_ms, lambda: self._timed_out(connection, call, timeout_ms))
        connection.calls.append(call)
        generation = connection.generation
        self._deliver(source_host, destination.host, lambda: self._arrive(connection, generation, call), (generation, "request"),
                      copy=(lambda: self._arrive_copy(connection, generation, call)) if self._may_duplicate() else None)

    def connect_stream(self, source_host: str, destination: Endpoint, on_frame: Callable[[bytes], None], on_lost: Callable[[str], None],
                       on_connected: Callable[[StreamConnection], None], on_refused: Callable[[str], None]) -> None:
        """Open a byte stream from `source_host` to `destination` as TCP does: the SYN takes a
        latency there and the SYN-ACK one back. A node that is down answers with a reset
        (`on_refused` after a round trip); a partition drops either half, and then nothing
        happens at all (the client's own connect timeout decides). See `StreamConnection` for
        `on_frame` and `on_lost`."""
        # Each stream is its own connection, even to the same node (a client opens several).
        endpoint = destination.on_channel(f"stream-{next(self._streams)}")

        def syn_arrives() -> None:
            node = self._nodes.get((destination.host, destination.port))
            if node is None or not node.up:
                self._deliver(destination.host, source_host, lambda: on_refused(f"connection to {destination} refused"), segment="rst")
                return
            connection = self._connections[(source_host, endpoint.host, endpoint.port, endpoint.channel)] = \
                _Connection(source_host, endpoint, next(self._generations))
            stream = StreamConnection(self, connection, on_frame, on_lost)
            self._deliver(destination.host, source_host, lambda: on_connected(stream), (connection.generation, "response"), segment="syn")

        self._deliver(source_host, destination.host, syn_arrives, segment="syn")

    def _send_frame(self, connection: _Connection, frame: bytes, on_frame: Callable[[bytes], None]) -> None:
        if not connection.alive or connection.half_closed:
            return
        try:
            api_key, api_version, correlation_id = peek_header(frame[4:])
        except RequestError:
            api_key, api_version, correlation_id = -1, -1, -1  # the server will refuse it
        call = _Call(correlation_id, api_key, api_version, frame, _ignore_result, on_frame=on_frame)
        connection.calls.append(call)
        generation = connection.generation
        self._deliver(connection.source_host, connection.destination.host, lambda: self._arrive(connection, generation, call), (generation, "request"),
                      copy=(lambda: self._arrive_copy(connection, generation, call)) if self._may_duplicate() else None)

    def close(self, source_host: str, destination: Endpoint) -> None:
        connection = self._connections.pop((source_host, destination.host, destination.port, destination.channel), None)
        if connection is not None:
            self._fail(connection, f"connection to {destination} closed by this node", notify=True)

    def _arrive(self, connection: _Connection, generation: int, call: _Call) -> None:
        if not connection.alive or connection.generation != generation:
            return
        connection.unserved.append(call)
        self._serve_next(connection)

    def _arrive_copy(self, connection: _Connection, generation: int, call: _Call) -> None:
        """A duplicated request reaches the server on a connection of its own, while the
        original's connection lives (a crash or reset that ended it ended the copy too)."""
        if not connection.alive or connection.generation != generation:
            return
        own = _Connection(connection.source_host, connection.destination.on_channel(f"copy-{next(self._copies)}"),
                          next(self._generations), copy=True)
        own.unserved.append(_Call(call.correlation_id, call.api_key, call.api_version, call.frame, _ignore_result,
                                  on_frame=_ignore_frame if call.on_frame is not None else None))
        self._serve_next(own)

    def _serve_next(self, connection: _Connection) -> None:
        while connection.alive and not connection.server_busy and connection.unserved:
            call = connection.unserved.popleft()
            node = self._nodes.get((connection.destination.host, connection.destination.port))
            if node is None or not node.up:
                return
            try:
                request = decode_request(call.frame[4:], node.versions)
            except UnsupportedVersionError as error:
                if call.on_frame is None or error.api_key != ApiKey.API_VERSIONS:
                    self._fail(connection, f"{connection.destination} closed the connection: {error}", notify=True)
                    return
                # As the runtime's BrokerConnection: a v0 answer with error 35 and the table.
                self._on_reply(connection, connection.generation, call, Response([unsupported_api_versions_response(error.correlation_id)]))
                return
            except RequestError as error:
                log.info("sim: %s closes the connection from %s: %s", connection.destination, connection.source_host, error)
                self._fail(connection, f"{connection.destination} closed the connection: {error}", notify=True)
                return
            if connection.copy:
                if request.api_key == ApiKey.PRODUCE and getattr(request.body, "acks", -1) == 0:
                    connection.alive = False  # acks=0 senders never retry: no copy to serve
                    return
                self.fault_stats.duplicated += 1
                apis = self.fault_stats.duplicated_apis
                apis[request.api_key] = apis.get(request.api_key, 0) + 1
            connection.server_busy = True
            answered = False
            generation = connection.generation

            def reply(response: Response, call: _Call = call, generation: int = generation) -> None:
                nonlocal answered
                if answered:
                    raise RuntimeError(f"request {call.api_key} v{call.api_version} answered twice")
                answered = True
                self._on_reply(connection, generation, call, response)

            client_id = request.client_id if call.on_frame is not None else f"sim-{connection.source_host}"
            node.handle(request, ClientInfo(client_id, f"/{connection.source_host}", connection.generation), reply)

    def _on_reply(self, connection: _Connection, generation: int, call: _Call, response: Response) -> None:
        if not connection.alive or connection.generation != generation:
            return
        connection.server_busy = False
        if connection.copy:
            connection.alive = False  # its sender discards the answer and closes it
            return
        if response.chunks:
            frame = b"".join(response.chunks)  # bytes-like chunks (memoryviews of a log), joined in one copy
            self._deliver(connection.destination.host, connection.source_host, lambda: self._answer(connection, generation, call, frame), (generation, "response"))
        elif response.chunks is None and not response.close_connection:
            # acks=0: nothing comes back; the caller is told it was sent.
            self._deliver(connection.destination.host, connection.source_host, lambda: self._answer(connection, generation, call, None), (generation, "response"))
        if response.close_connection:
            reason = response.close_reason
            self._deliver(connection.destination.host, connection.source_host,
                          lambda: self._fail(connection, f"{connection.destination} closed the connection: {reason}", notify=True), (generation, "response"))
            return
        # The next request is served in its own event, never inside the handler whose work
        # produced this answer (see BrokerConnection._on_reply).
        if connection.unserved:
            self.scheduler.call_later(0, lambda: self._serve_next(connection))

    def _answer(self, connection: _Connection, generation: int, call: _Call, frame: bytes | None) -> None:
        if not connection.alive or connection.generation != generation or call not in connection.calls:
            return
        connection.calls.remove(call)
        if call.timer is not None:
            call.timer.cancel()
        if connection.half_closed and not connection.calls:
            self._fail(connection, "closed by the client", notify=False)  # its last request served
        if call.on_frame is not None:
            if frame is not None:  # acks=0: no answer on the wire
                call.on_frame(frame)
            return
        if frame is None:
            call.on_done(OutboundResult(None))
            return
        try:
            correlation_id, body = decode_response(call.api_key, call.api_version, frame[4:])
        except ValueError as error:
            call.on_done(OutboundResult(None, str(error)))
            return
        if correlation_id != call.correlation_id:
            call.on_done(OutboundResult(None, f"correlation id {correlation_id} in answer to {call.correlation_id}"))
            return
        call.on_done(OutboundResult(body))

    def _timed_out(self, connection: _Connection, call: _Call, timeout_ms: int) -> None:
        call.timer = None
        if connection.alive and call in connection.calls:
            self._fail(connection, f"request to {connection.destination} timed out after {timeout_ms} ms", notify=True)

    def _fail(self, connection: _Connection, reason: str, *, notify: bool) -> None:
        if not connection.alive:
            return
        connection.alive = False
        for direction in ("request", "response"):
            self._orders.pop((connection.generation, direction), None)
        key = (connection.source_host, connection.destination.host, connection.destination.port, connection.destination.channel)
        if self._connections.get(key) is connection:
            del self._connections[key]
        calls, connection.calls = connection.calls, deque()
        connection.unserved.clear()
        for call in calls:
            if call.timer is not None:
                call.timer.cancel()
            if notify and call.on_frame is None:
                call.on_done(OutboundResult(None, reason))
        if notify and connection.on_lost is not None:
            connection.on_lost(reason)


def _ignore_result(_: OutboundResult) -> None:
    pass


def _ignore_frame(_: bytes) -> None:
    pass


def _check_hosts(*hosts: object) -> None:
    for host in hosts:
        if not isinstance(host, str) or not host:
            raise LinkFaultError(f"a host must be a non-empty address string, not {host!r}")
    if len(hosts) == 2 and hosts[0] == hosts[1]:
        raise LinkFaultError(f"a link joins two different hosts; got {hosts[0]!r} twice")


class VirtualOutbound:
    """One node incarnation's `Outbound` on the virtual network (requests leave from `host`).
    Once `dead` (its process crashed), it sends nothing and its callbacks never run."""

    def __init__(self, network: VirtualNetwork, host: str) -> None:
        self._network = network
        self.host = host
        self.dead = False

    def send(self, destination: Endpoint, api_key: int, api_version: int, body: Any,
             on_done: Callable[[OutboundResult], None], timeout_ms: int) -> None:
        if self.dead:
            return

        def done(result: OutboundResult) -> None:
            if not self.dead:
                on_done(result)

        self._network.send(self.host, destination, api_key, api_version, body, done, timeout_ms)

    def close(self, destination: Endpoint) -> None:
        if not self.dead:
            self._network.close(self.host, destination)


class NodeScheduler:
    """One node incarnation's view of the shared virtual scheduler: `halt` (crash) cancels
    every timer it set and ignores new ones; `pause` (SIGSTOP) holds timers that come due
    until `resume`."""

    def __init__(self, scheduler: VirtualScheduler, network: VirtualNetwork, host: str) -> None:
        self._scheduler = scheduler
        self._network = network
        self._host = host
        self._timers: dict[int, VirtualTimer] = {}  # by sequence number
        self.halted = False

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> VirtualTimer:
        if self.halted:
            dead = VirtualTimer(0, -1, callback)
            dead.cancel()
            return dead
        # The timer's own sequence number, known once it is set: `fire` reaches it through
        # this list, not through the timer (a timer whose callback reaches the timer is a
        # reference cycle, left for the garbage collector).
        sequence: list[int] = []

        def fire() -> None:
            self._timers.pop(sequence[0], None)
            if self.halted:
                return
            held = self._network._held.get(self._host) if self._network._held else None
            if held is None:
                callback()
            else:  # paused: it fires when the node resumes, unless it crashed meanwhile
                held.append(lambda: None if self.halted else callback())

        timer = self._scheduler.call_later(delay_ms, fire)
        sequence.append(timer.sequence)
        self._timers[timer.sequence] = timer
        return timer

    def halt(self) -> None:
        self.halted = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
