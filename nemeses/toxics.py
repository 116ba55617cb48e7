"""What the latency, bandwidth and flaky packages share: links as targets, and toxics on
Toxiproxy proxies through Toxiproxy's own Python client (`toxiproxy-python`).

The links are the proxies of a cluster routed through them (cluster.proxy_routing: one
proxy per directed link, client -> broker, broker -> broker, broker -> controller), on our
proxy server or a real Toxiproxy (`--toxiproxy-url`). A fault adds one toxic to each chosen
(proxy, stream): `upstream` is what the link's source sends, `downstream` the answers.

Targets (`--nemesis-option link_targets=...`), drawn by the seeded schedule among the links
whose kind is in `link_kinds` (client, broker, controller):
    one        every link into or out of one random broker, both directions
    link       one random link, both directions
    direction  one random link, one random direction
    all        every link, both directions
    primary    every link into or out of the broker leading the most tested partitions
               (ties: the lowest id), both directions: live, resolved when the fault starts

Toxics are named `logquake-<package>-<stream>`; a stop removes what its start added, and heal
removes every toxic of the package on every link (so a toxic left by an interrupted op goes
too). The package records each op's links and toxic in the history.
"""

from __future__ import annotations

import abc
import random
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cluster.control import ClusterControl, ControlError
from nemeses.base import NemesisError, NemesisOptions, alternate, live_primaries

LINK_TARGETS: tuple[str, ...] = ("one", "link", "direction", "all", "primary")
LIVE_LINK_TARGETS = frozenset({"primary"})
LINK_KINDS: tuple[str, ...] = ("client", "broker", "controller")
STREAMS: tuple[str, ...] = ("upstream", "downstream")
TOXIC_PREFIX = "logquake-"

# toxiproxy-python keeps the server's address in class attributes (APIConsumer.host/port):
# every batch of calls sets them under this lock, so two servers in one process never mix.
_client_lock = threading.Lock()


class Link:
    """A proxy as a fault target (what the package needs of cluster.proxy_routing.ProxyLink)."""

    def __init__(self, name: str, kind: str, source: int | None, dest: int) -> None:
        self.name, self.kind, self.source, self.dest = name, kind, source, dest

    def touches(self, node: int) -> bool:
        return self.source == node or self.dest == node


class ToxicClient:
    """Adds and removes toxics on the proxies of one Toxiproxy server, with toxiproxy-python."""

    def __init__(self, api_url: str) -> None:
        try:
            from toxiproxy import Toxiproxy  # noqa: F401  (fail here, naming the package, not mid-run)
        except ImportError:
            raise NemesisError("the latency, bandwidth and flaky nemeses drive the proxies with toxiproxy-python "
                               "(pip install toxiproxy-python==0.1.1)") from None
        host_port = api_url.removeprefix("http://").rstrip("/")
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise NemesisError(f"Toxiproxy API URL {api_url!r}: expected http://HOST:PORT")
        self.url = api_url
        self._host, self._port = host, int(port)

    def _run(self, action: Callable[[Any], Any]) -> Any:
        import requests
        from toxiproxy import Toxiproxy

        with _client_lock:
            client = Toxiproxy()
            client.update_api_consumer(self._host, self._port)
            try:
                return action(client)
            except requests.RequestException as error:
                raise NemesisError(f"the Toxiproxy server at {self.url} did not answer: {error}") from None

    def add(self, proxy_name: str, toxic_name: str, stream: str, toxic_type: str, attributes: dict[str, int],
            toxicity: float) -> None:
        from toxiproxy.exceptions import ProxyExists
        from toxiproxy.proxy import Proxy

        def action(client: Any) -> None:
            proxy = Proxy(name=proxy_name, upstream="", enabled=True, listen="")
            fields = dict(name=toxic_name, type=toxic_type, stream=stream, toxicity=toxicity, attributes=attributes)
            try:
                proxy.add_toxic(**fields)
            except ProxyExists:  # (Toxiproxy's 409, for a toxic too) a stale one of ours, left by an interrupted op
                proxy.destroy_toxic(toxic_name)
                proxy.add_toxic(**fields)

        self._run(action)

    def remove(self, proxy_name: str, toxic_name: str) -> bool:
        """Remove one toxic; False when it was not there (already removed, or never added)."""
        from toxiproxy.exceptions import NotFound
        from toxiproxy.proxy import Proxy

        def action(client: Any) -> bool:
            try:
                return bool(Proxy(name=proxy_name, upstream="", enabled=True, listen="").destroy_toxic(toxic_name))
            except NotFound:
                return False

        return self._run(action)

    def toxic_names(self) -> dict[str, list[str]]:
        """Every proxy's toxic names (GET /proxies)."""
        def action(client: Any) -> dict[str, list[str]]:
            from toxiproxy.api import APIConsumer

            proxies = APIConsumer.get("/proxies").json()
            return {name: [toxic["name"] for toxic in value.get("toxics", [])] for name, value in proxies.items()}

        return self._run(action)


def links_of(control: ClusterControl) -> tuple[list[Link], str]:
    """The routed cluster's links and its Toxiproxy API URL; NemesisError when it has none."""
    routing = control.proxy_routing()
    if routing is None or not routing.links:
        raise NemesisError("the latency, bandwidth and flaky nemeses need the cluster's links routed through proxies "
                           "(LocalCluster(proxies=ProxyRouting()); `logquake test` does it when one of them is chosen)")
    links = [Link(link.name, link.kind, link.source, link.dest) for link in routing.links.values()]
    return sorted(links, key=lambda link: link.name), routing.api_url


def choose_links(target: str, links: Sequence[Link], kinds: Sequence[str], brokers: Sequence[int],
                 rng: random.Random) -> dict[str, Any]:
    """A fault's (proxy, stream) pairs for a static target, or the target alone for a live one."""
    if target not in LINK_TARGETS:
        raise ValueError(f"unknown link target {target!r}; known: {', '.join(LINK_TARGETS)}")
    if target in LIVE_LINK_TARGETS:
        return {"targets": target}
    eligible = [link for link in links if link.kind in kinds]
    if not eligible:
        raise NemesisError(f"no link of kinds {', '.join(kinds)} to fault")
    value: dict[str, Any] = {"targets": target}
    if target == "one":
        node = rng.choice(sorted(brokers))
        chosen = [link for link in eligible if link.touches(node)]
        value["node"] = node
        pairs = [(link.name, stream) for link in chosen for stream in STREAMS]
    elif target == "link":
        name = rng.choice(eligible).name
        pairs = [(name, stream) for stream in STREAMS]
    elif target == "direction":
        pairs = [(rng.choice(eligible).name, rng.choice(STREAMS))]
    else:
        pairs = [(link.name, stream) for link in eligible for stream in STREAMS]
    value["links"] = [list(pair) for pair in pairs]
    return value


class ToxicPackage(abc.ABC):
    """A package whose fault is one kind of toxic on the chosen links; subclasses say which
    toxic each fault adds (`draw_toxic`, seeded at schedule time)."""

    name = "toxic"
    color = "#888888"

    def __init__(self, control: ClusterControl, options: NemesisOptions, client: ToxicClient | None = None) -> None:
        self.control = control
        self.options = options
        self.links, api_url = links_of(control)
        self.client = client or ToxicClient(api_url)
        self._added: list[tuple[str, str]] = []  # (proxy, toxic name) of the fault in effect
        self._lock = threading.Lock()

    # -- the schedule -------------------------------------------------------------------

    @abc.abstractmethod
    def draw_toxic(self, rng: random.Random) -> dict[str, Any]:
        """{"type": ..., "attributes": {...}, "toxicity": p} for one fault (each package its own)."""

    def schedule(self, rng: random.Random) -> Iterator[dict]:
        def starts() -> Iterator[dict]:
            while True:
                target = rng.choice(self.options.link_targets)
                value = choose_links(target, self.links, self.options.link_kinds, self.control.broker_ids, rng)
                value["toxic"] = self.draw_toxic(rng)
                yield value

        return alternate(f"start-{self.name}", f"stop-{self.name}", starts())

    # -- performing it ------------------------------------------------------------------

    def invoke(self, f: str, value: Any) -> object:
        if f == f"start-{self.name}":
            return self.start(value)
        if f == f"stop-{self.name}":
            return {"removed": self.stop()}
        raise ValueError(f"the {self.name} nemesis has no op {f!r}")

    def toxic_name(self, stream: str) -> str:
        return f"{TOXIC_PREFIX}{self.name}-{stream}"

    def start(self, value: Any) -> dict:
        if not isinstance(value, dict) or "toxic" not in value or "targets" not in value:
            raise ValueError(f"start-{self.name} needs targets and a toxic, got {value!r}")
        extra: dict[str, Any] = {}
        pairs = [tuple(pair) for pair in value.get("links", [])]
        if value["targets"] in LIVE_LINK_TARGETS:
            try:
                leaders, extra = live_primaries(self.control, self.options.primary_topics)
            except ControlError as error:
                return {**value, "error": str(error), "links": []}
            counts = {node: list(extra["leaders"].values()).count(node) for node in leaders}
            if not counts:
                return {**value, **extra, "error": "no tested partition has a leader", "links": []}
            node = min(counts, key=lambda n: (-counts[n], n))
            extra["node"] = node
            pairs = [(link.name, stream) for link in self.links
                     if link.kind in self.options.link_kinds and link.touches(node) for stream in STREAMS]
        toxic = value["toxic"]
        with self._lock:
            self._remove_added()  # a start without its stop (an interrupted op) replaces the fault
            for proxy, stream in pairs:
                name = self.toxic_name(stream)
                self.client.add(proxy, name, stream, toxic["type"], dict(toxic["attributes"]), float(toxic["toxicity"]))
                self._added.append((proxy, name))
        return {**value, **extra, "links": [list(pair) for pair in pairs]}

    def _remove_added(self) -> int:
        removed = 0
        for proxy, name in self._added:
            removed += self.client.remove(proxy, name)
        self._added = []
        return removed

    def stop(self) -> int:
        with self._lock:
            return self._remove_added()

    def heal(self) -> None:
        """Remove every toxic of this package on every link, whoever added it."""
        with self._lock:
            self._added = []
            ours = {self.toxic_name(stream) for stream in STREAMS}
            for proxy, names in self.client.toxic_names().items():
                for name in names:
                    if name in ours:
                        self.client.remove(proxy, name)


def check_link_options(options: NemesisOptions) -> None:
    """NemesisError naming a bad link option (called by NemesisOptions)."""
    for name, chosen, known in (("link_targets", options.link_targets, LINK_TARGETS),
                                ("link_kinds", options.link_kinds, LINK_KINDS),
                                ("flaky_kinds", options.flaky_kinds, FLAKY_KINDS)):
        if not chosen:
            raise NemesisError(f"{name} is empty; choose from: {', '.join(known)}")
        for value in chosen:
            if value not in known:
                raise NemesisError(f"unknown {name} value {value!r}; known: {', '.join(known)}")
    for name, value, low in (("latency_ms", options.latency_ms, 1), ("jitter_ms", options.jitter_ms, 0),
                             ("bandwidth_kb_per_s", options.bandwidth_kb_per_s, 0),
                             ("flaky_toxicity_percent", options.flaky_toxicity_percent, 1)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
            raise NemesisError(f"{name} {value!r} must be an integer >= {low}")
    if options.flaky_toxicity_percent > 100:
        raise NemesisError(f"flaky_toxicity_percent {options.flaky_toxicity_percent!r} must be at most 100")


FLAKY_KINDS: tuple[str, ...] = ("reset_peer", "timeout", "slicer")


# -- a user's Toxiproxy in front of an external cluster ------------------------------------

# The layout logquake reads from a Toxiproxy server in front of an external cluster: the same
# names the bundled cluster's routing creates, with Kafka broker ids.
LAYOUT_RE = re.compile(r"^logquake-(?:client|b(\d+))-(?:b(\d+)|(controller))$")


class ServerLinks:
    """The nemeses' door for an external cluster behind a user's Toxiproxy (`--bootstrap-servers`
    with `--toxiproxy-url`): its links are the server's proxies named as the bundled cluster's
    (`logquake-client-b<id>`, `logquake-b<i>-b<j>`, `logquake-b<i>-controller`, any subset);
    other proxies on the server are left alone. `leaders` reads the cluster's metadata with a
    Kafka client, for the live `primary` target."""

    CONTROLLER_ID = -1  # the controller has no broker id here; only names tell it apart

    def __init__(self, api_url: str, bootstrap_servers: str, client_config: dict[str, str] | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self._bootstrap_servers = bootstrap_servers
        self._client_config = dict(client_config or {})
        names = ToxicClient(self.api_url).toxic_names()
        self.links: dict[str, Link] = {}
        for name in sorted(names):
            match = LAYOUT_RE.match(name)
            if match is None:
                continue
            source = None if match.group(1) is None else int(match.group(1))
            dest = self.CONTROLLER_ID if match.group(3) else int(match.group(2))
            kind = "client" if source is None else ("controller" if match.group(3) else "broker")
            self.links[name] = Link(name, kind, source, dest)
        if not self.links:
            raise NemesisError(f"the Toxiproxy server at {self.api_url} has no proxy named as logquake expects "
                               "(logquake-client-b<id>, logquake-b<i>-b<j>, logquake-b<i>-controller; README: Faults on "
                               f"the cluster's links); it has: {', '.join(sorted(names)) or 'no proxy'}")

    @property
    def broker_ids(self) -> list[int]:
        return sorted({node for link in self.links.values() for node in (link.source, link.dest)
                       if node is not None and node != self.CONTROLLER_ID})

    def proxy_routing(self) -> ServerLinks:
        return self

    def leaders(self, topics: Sequence[str] | None = None) -> dict[Any, int]:
        from confluent_kafka.admin import AdminClient

        from cluster.control import TopicPartition

        wanted = set(topics) if topics is not None else None
        try:
            metadata = AdminClient({**self._client_config, "bootstrap.servers": self._bootstrap_servers}).list_topics(timeout=5)
        except Exception as error:  # noqa: BLE001 - librdkafka's KafkaException, reported as the control API does
            raise ControlError(f"cannot read the cluster's metadata: {error}") from None
        return {TopicPartition(topic.topic, partition.id): partition.leader
                for topic in metadata.topics.values() if wanted is None or topic.topic in wanted
                for partition in topic.partitions.values() if partition.leader >= 0}
