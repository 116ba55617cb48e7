"""The set of proxies, and the operations of Toxiproxy's API on it (HTTP aside).

Every operation runs under one lock: HTTP requests are handled concurrently, and a toxic
removal waits for live connections' stages to stop, so without the lock two requests could
interleave half-done chain changes.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any

from proxy.errors import PROXY_EXISTS, PROXY_NOT_FOUND, TOXIC_NOT_FOUND, ApiError, bad_request_body, missing_field
from proxy.proxy import Proxy
from proxy.toxics import Toxic, json_text, parse_new_toxic, parse_toxic_update

log = logging.getLogger("proxy")


@dataclass
class ProxyFields:
    name: str
    listen: str
    upstream: str
    enabled: bool


class Registry:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.proxies: dict[str, Proxy] = {}
        self.lock = asyncio.Lock()

    def get(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError(PROXY_NOT_FOUND, 404)
        return proxy

    async def create(self, body: Any) -> Proxy:
        fields = _proxy_fields(body, ProxyFields("", "", "", True))
        if not fields.name:
            raise missing_field("name")
        if not fields.upstream:
            raise missing_field("upstream")
        if fields.name in self.proxies:
            raise ApiError(PROXY_EXISTS, 409)
        proxy = Proxy(fields.name, fields.listen, fields.upstream, self.rng)
        if fields.enabled:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        log.info("proxy %s created: %s -> %s%s", proxy.name, proxy.listen, proxy.upstream, "" if proxy.enabled else " (disabled)")
        return proxy

    async def populate(self, body: Any) -> tuple[list[Proxy], ApiError | None]:
        """Create or replace each proxy; a proxy whose listen and upstream are unchanged is kept."""
        if not isinstance(body, list):
            raise bad_request_body(f"cannot decode {json_text(body)[:40]} into a list of proxies")
        wanted = []
        for index, item in enumerate(body, start=1):
            fields = _proxy_fields(item, ProxyFields("", "", "", True))
            if not fields.name:
                raise missing_field(f"name at proxy {index}")
            if not fields.upstream:
                raise missing_field(f"upstream at proxy {index}")
            wanted.append(fields)
        done: list[Proxy] = []
        for fields in wanted:
            try:
                done.append(await self._add_or_replace(fields))
            except ApiError as error:
                return done, error
        return done, None

    async def _add_or_replace(self, fields: ProxyFields) -> Proxy:
        existing = self.proxies.get(fields.name)
        if existing is not None:
            if not existing.differs(fields.listen, fields.upstream):
                return existing
            await existing.stop()
            del self.proxies[fields.name]
        proxy = Proxy(fields.name, fields.listen, fields.upstream, self.rng)
        if fields.enabled:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        log.info("proxy %s populated: %s -> %s%s", proxy.name, proxy.listen, proxy.upstream, "" if proxy.enabled else " (disabled)")
        return proxy

    async def update(self, name: str, body: Any) -> Proxy:
        """Change listen/upstream (restarting the proxy, dropping its connections) or enabled."""
        proxy = self.get(name)
        fields = _proxy_fields(body, ProxyFields(proxy.name, proxy.listen, proxy.upstream, proxy.enabled))
        if proxy.differs(fields.listen, fields.upstream):
            await proxy.stop()
            proxy.listen = fields.listen
            proxy.upstream = fields.upstream
        if fields.enabled and not proxy.enabled:
            await proxy.start()
        elif not fields.enabled and proxy.enabled:
            await proxy.stop()
        log.info("proxy %s updated: %s -> %s, %s", proxy.name, proxy.listen, proxy.upstream, "enabled" if proxy.enabled else "disabled")
        return proxy

    async def delete(self, name: str) -> None:
        proxy = self.get(name)
        await proxy.stop()
        del self.proxies[name]
        log.info("proxy %s deleted", name)

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        for proxy in list(self.proxies.values()):
            await proxy.start()
            await proxy.remove_all_toxics()
        log.info("reset: every proxy enabled, every toxic removed")

    async def add_toxic(self, proxy_name: str, body: Any) -> Toxic:
        proxy = self.get(proxy_name)
        toxic = parse_new_toxic(body, {toxic.name for toxic in proxy.toxic_list()})
        proxy.add_toxic(toxic)
        log.info("proxy %s: toxic %s added: %s", proxy.name, toxic.name, toxic.to_json())
        return toxic

    def get_toxic(self, proxy_name: str, toxic_name: str) -> Toxic:
        toxic = self.get(proxy_name).find_toxic(toxic_name)
        if toxic is None:
            raise ApiError(TOXIC_NOT_FOUND, 404)
        return toxic

    async def update_toxic(self, proxy_name: str, toxic_name: str, body: Any) -> Toxic:
        proxy = self.get(proxy_name)
        toxic = self.get_toxic(proxy_name, toxic_name)
        attributes, toxicity = parse_toxic_update(toxic, body)
        await proxy.update_toxic(toxic, attributes, toxicity)
        log.info("proxy %s: toxic %s updated: %s", proxy.name, toxic.name, toxic.to_json())
        return toxic

    async def remove_toxic(self, proxy_name: str, toxic_name: str) -> None:
        proxy = self.get(proxy_name)
        await proxy.remove_toxic(self.get_toxic(proxy_name, toxic_name))
        log.info("proxy %s: toxic %s removed", proxy.name, toxic_name)

    async def close(self) -> None:
        """Stop every proxy (listeners and connections), for shutdown."""
        for proxy in list(self.proxies.values()):
            await proxy.stop()


def _proxy_fields(body: Any, defaults: ProxyFields) -> ProxyFields:
    if not isinstance(body, dict):
        raise bad_request_body(f"cannot decode {json_text(body)[:40]} into a proxy")
    values: dict[str, Any] = {}
    for key, kind, kind_name in (("name", str, "string"), ("listen", str, "string"), ("upstream", str, "string"),
                                 ("enabled", bool, "bool")):
        value = body.get(key)
        if value is None:
            values[key] = getattr(defaults, key)
        elif not isinstance(value, kind):
            raise bad_request_body(f"field {key} of a proxy must be a {kind_name}, got {json_text(value)}")
        else:
            values[key] = value
    return ProxyFields(**values)
