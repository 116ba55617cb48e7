"""Every link of the bundled cluster through a Toxiproxy proxy of its own (issue 17).

A `LocalCluster(..., proxies=ProxyRouting())` puts one proxy on each directed link:

    logquake-client-b{j}       clients -> broker j          (broker j advertises it)
    logquake-b{i}-b{j}         broker i -> broker j         (replication, txn markers, ...)
    logquake-b{i}-controller   broker i -> the controller   (registration, heartbeats, metadata)

so a fault (a toxic) can hit one link, one direction of it (Toxiproxy's `upstream` stream is
source -> destination, `downstream` the answers), every link of one node, or all of them.

How traffic is steered there, per kind of link:
- clients: broker j registers the proxy's address as its `advertised.listeners`, so Metadata
  and FindCoordinator name the proxy; the cluster's bootstrap servers are the proxies too.
- broker -> broker: Kafka dials the advertised address of the inter-broker listener, one
  address per destination whatever the source. Broker i is started with logquake's own
  `inter.broker.address.overrides` (`j@HOST:PORT,...`), the proxy i -> j for every j, which
  its outbound connections dial instead of what j registered (real Kafka has no such setting).
- broker -> controller: broker i's `controller.quorum.voters` names its own proxy.

Each proxy listens on its destination's address (127.0.0.(10+j), the controller's 127.0.0.9)
on a port of its own, and sources keep binding their own address: the nftables rules of the
partition nemesis, which match source and destination addresses, cut the proxied links just
as they cut direct ones. The proxy's own leg to the destination comes from 127.0.0.1, which
partitions never cut, as clients.

The proxies run in `proxy.ProxyServer` (this process, its own event-loop thread), or on a
Toxiproxy server the caller names by URL (`toxiproxy_url`), which must reach the brokers'
addresses; `close()` deletes the proxies it created there. Either way they are created and
changed through Toxiproxy's HTTP API only, so both behave alike.

A broker's real port is known only once it listens (port 0 picks one), while its proxies
must exist before it starts (it advertises them): proxies towards a broker are created with
a placeholder upstream (port 0: connecting fails at once) and pointed at the broker as soon
as it listens (`set_node_address`). Until then nothing dials them: brokers replicate only
partitions that exist, and topics are created once every broker is ready.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CLIENT_LINK = "client"
BROKER_LINK = "broker"
CONTROLLER_LINK = "controller"
LINK_KINDS: tuple[str, ...] = (CLIENT_LINK, BROKER_LINK, CONTROLLER_LINK)
DEFAULT_PREFIX = "logquake"
API_TIMEOUT_S = 10.0
# Upstream of a proxy towards a broker that does not listen yet: dialling port 0 fails.
PLACEHOLDER_PORT = 0


class ProxyRoutingError(RuntimeError):
    """The proxies could not be created or changed; the message names the proxy and the reason."""


@dataclass(frozen=True)
class ProxyLink:
    """One directed link and the proxy on it."""

    name: str  # the proxy's name on the Toxiproxy server
    kind: str  # client, broker or controller
    source: int | None  # the source broker's id; None for clients
    dest: int  # the destination broker's id, or the controller's node id
    listen: str  # HOST:PORT the source dials

    def touches(self, node_id: int) -> bool:
        return self.source == node_id or self.dest == node_id

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "source": self.source, "dest": self.dest, "listen": self.listen}


def link_name(prefix: str, source: int | None, dest: int, controller_id: int) -> str:
    src = "client" if source is None else f"b{source}"
    dst = "controller" if dest == controller_id else f"b{dest}"
    return f"{prefix}-{src}-{dst}"


class ToxiproxyApi:
    """The few calls of Toxiproxy's HTTP API the routing needs (JSON over urllib, bounded)."""

    def __init__(self, url: str, timeout_s: float = API_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        # Never through an HTTP proxy from the environment: the server is local by design.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", "User-Agent": "logquake"})
        try:
            with self._opener.open(request, timeout=self._timeout_s) as answer:
                text = answer.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace").strip()
            raise ProxyRoutingError(f"{method} {self.url}{path}: HTTP {error.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ProxyRoutingError(f"{method} {self.url}{path}: cannot reach the Toxiproxy server: {reason}") from None
        return json.loads(text) if text.strip() else None

    def create(self, name: str, listen: str, upstream: str) -> dict[str, Any]:
        return self.call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})

    def set_upstream(self, name: str, upstream: str) -> dict[str, Any]:
        return self.call("POST", f"/proxies/{name}", {"upstream": upstream})

    def delete(self, name: str) -> None:
        self.call("DELETE", f"/proxies/{name}")

    def names(self) -> set[str]:
        return set(self.call("GET", "/proxies") or {})


class ProxyRouting:
    """The proxies of one cluster: created by `plan`, re-pointed by `set_node_address`,
    deleted (or their server stopped) by `close`."""

    def __init__(self, toxiproxy_url: str | None = None, *, seed: int | None = None, prefix: str = DEFAULT_PREFIX) -> None:
        self.toxiproxy_url = toxiproxy_url
        self.seed = seed
        self.prefix = prefix
        self.links: dict[str, ProxyLink] = {}
        self._upstreams: dict[str, str] = {}
        self._server: Any = None
        self.api: ToxiproxyApi | None = None
        self._controller_id: int | None = None

    @property
    def api_url(self) -> str:
        if self.api is None:
            raise ProxyRoutingError("the proxy routing is not started")
        return self.api.url

    def start(self) -> None:
        """Start our own proxy server, or check that the named Toxiproxy answers."""
        if self.api is not None:
            return
        if self.toxiproxy_url is None:
            from proxy import ProxyServer, ProxyServerError

            try:
                self._server = ProxyServer(host="127.0.0.1", port=0, seed=self.seed).start()
            except ProxyServerError as error:
                raise ProxyRoutingError(f"cannot start the proxy server: {error}") from None
            self.api = ToxiproxyApi(self._server.url)
            return
        api = ToxiproxyApi(self.toxiproxy_url)
        taken = sorted(name for name in api.names() if name.startswith(self.prefix + "-"))
        if taken:
            raise ProxyRoutingError(f"the Toxiproxy server at {self.toxiproxy_url} already has proxies named {self.prefix}-*: "
                                    f"{', '.join(taken[:5])}{' ...' if len(taken) > 5 else ''}; another run's, or left over "
                                    "(delete them, or give this cluster another prefix)")
        self.api = api

    def plan(self, brokers: Mapping[int, str], controller: tuple[int, str, int]) -> None:
        """Create every proxy: `brokers` maps broker id -> its host; `controller` is (node id,
        host, port) of the running controller."""
        if self.api is None:
            self.start()
        controller_id, controller_host, controller_port = controller
        self._controller_id = controller_id
        wanted: list[tuple[str, int | None, int, str, str]] = []
        for dest, host in sorted(brokers.items()):
            wanted.append((CLIENT_LINK, None, dest, host, f"{host}:{PLACEHOLDER_PORT}"))
            for source in sorted(brokers):
                if source != dest:
                    wanted.append((BROKER_LINK, source, dest, host, f"{host}:{PLACEHOLDER_PORT}"))
        for source in sorted(brokers):
            wanted.append((CONTROLLER_LINK, source, controller_id, controller_host, f"{controller_host}:{controller_port}"))
        for kind, source, dest, host, upstream in wanted:
            name = link_name(self.prefix, source, dest, controller_id)
            try:
                created = self.api.create(name, f"{host}:0", upstream)  # type: ignore[union-attr]
            except ProxyRoutingError as error:
                raise ProxyRoutingError(f"cannot create the proxy {name}: {error}") from None
            self.links[name] = ProxyLink(name, kind, source, dest, str(created["listen"]))
            self._upstreams[name] = upstream

    def set_node_address(self, node_id: int, host: str, port: int) -> None:
        """Point every proxy towards `node_id` at where it listens (a no-op when they do)."""
        upstream = f"{host}:{port}"
        for link in self.links.values():
            if link.dest == node_id and self._upstreams.get(link.name) != upstream:
                self.api.set_upstream(link.name, upstream)  # type: ignore[union-attr]
                self._upstreams[link.name] = upstream

    def broker_properties(self, broker_id: int) -> dict[str, str]:
        """The settings that route broker `broker_id`'s links through the proxies."""
        client = self._link(None, broker_id)
        overrides = [f"{link.dest}@{link.listen}" for link in sorted(self.links.values(), key=lambda link: link.dest)
                     if link.kind == BROKER_LINK and link.source == broker_id]
        controller = self._link(broker_id, self._controller_id)  # type: ignore[arg-type]
        return {"advertised.listeners": f"PLAINTEXT://{client.listen}",
                "inter.broker.address.overrides": ",".join(overrides),
                "controller.quorum.voters": f"{self._controller_id}@{controller.listen}"}

    def client_address(self, broker_id: int) -> str:
        return self._link(None, broker_id).listen

    def _link(self, source: int | None, dest: int) -> ProxyLink:
        name = link_name(self.prefix, source, dest, self._controller_id)  # type: ignore[arg-type]
        link = self.links.get(name)
        if link is None:
            raise ProxyRoutingError(f"no proxy {name}: the routing was not planned for this node")
        return link

    def describe(self) -> list[dict[str, Any]]:
        return [link.to_json() | {"upstream": self._upstreams.get(link.name)} for link in self.links.values()]

    def close(self) -> None:
        """Stop our own server (every proxy and connection with it), or delete the proxies
        this routing created on the named Toxiproxy server."""
        try:
            if self._server is not None:
                self._server.stop()
            elif self.api is not None:
                errors = []
                for name in list(self.links):
                    try:
                        self.api.delete(name)
                    except ProxyRoutingError as error:
                        errors.append(str(error))
                if errors:
                    raise ProxyRoutingError("; ".join(errors))
        finally:
            self._server = None
            self.api = None
            self.links = {}
            self._upstreams = {}
