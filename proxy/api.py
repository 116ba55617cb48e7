"""Toxiproxy's HTTP API: its routes, status codes, JSON bodies and error bodies.

| route | answers |
|---|---|
| GET /proxies | 200, {name: proxy with toxics} |
| POST /proxies | 201 proxy; 400 bad body or missing name/upstream; 409 name taken; 500 cannot listen |
| POST /populate | 201 {"proxies": [...]}; on an error its status, with "error", "status" and what was done |
| GET /proxies/{proxy} | 200 proxy; 404 |
| POST or PATCH /proxies/{proxy} | 200 proxy (listen/upstream/enabled); 404; 400 |
| DELETE /proxies/{proxy} | 204; 404 |
| GET /proxies/{proxy}/toxics | 200, [toxic, ...] |
| POST /proxies/{proxy}/toxics | 200 toxic; 400 bad body, stream or type; 404; 409 name taken |
| GET /proxies/{proxy}/toxics/{toxic} | 200 toxic; 404 |
| POST or PATCH /proxies/{proxy}/toxics/{toxic} | 200 toxic (attributes, toxicity); 400; 404 |
| DELETE /proxies/{proxy}/toxics/{toxic} | 204; 404 |
| POST /reset | 204: every proxy enabled, every toxic removed |
| GET /version | 200, {"version": "..."} |

Errors are `{"error": message, "status": code}` (served as text/plain, as Go's http.Error
does); an unknown path is 404 `404 page not found`, a known path with another method 405,
and a browser's User-Agent (`Mozilla/...`) 403, Toxiproxy's guard against cross-site requests.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any, Awaitable, Callable
from urllib.parse import unquote

from proxy.errors import ApiError, bad_request_body
from proxy.http import Request, Response
from proxy.registry import Registry

# The Toxiproxy release whose API this serves; the build suffix says it is not Toxiproxy itself.
VERSION = "2.12.0+logquake"

log = logging.getLogger("proxy")

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"

Route = Callable[["Api", Request, dict[str, str]], Awaitable[Response]]


def dumps(value: Any) -> bytes:
    """Go's encoding/json output: compact, HTML characters escaped, integral floats bare."""
    text = json.dumps(_go_numbers(value), separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text.encode()


def _go_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _go_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_go_numbers(item) for item in value]
    return value


def json_response(status: int, value: Any) -> Response:
    return Response(status, dumps(value), JSON)


def error_response(error: ApiError) -> Response:
    return Response(error.status, dumps({"error": error.message, "status": error.status}) + b"\n", TEXT,
                    {"X-Content-Type-Options": "nosniff"})


def decode_body(body: bytes) -> Any:
    """The first JSON value of the body (Go's json.Decoder ignores what follows it)."""
    text = body.decode("utf-8", errors="replace").lstrip()
    if not text:
        raise bad_request_body("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as error:
        raise bad_request_body(error.msg) from None
    return value


class Api:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    async def handle(self, request: Request) -> Response:
        response = await self._route(request)
        # Toxiproxy tags every answer with a request id (its logs carry the same id).
        response.headers["X-Toxiproxy-Request-Id"] = uuid.uuid4().hex[:20]
        return response

    async def _route(self, request: Request) -> Response:
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return Response(403, b"User agent not allowed\n", TEXT, {"X-Content-Type-Options": "nosniff"})
        path = unquote(request.target.split("?", 1)[0])
        for pattern, methods in ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            route = methods.get(request.method)
            if route is None:
                return Response(405)
            try:
                async with self.registry.lock:
                    return await route(self, request, match.groupdict())
            except ApiError as error:
                return error_response(error)
            except Exception as error:  # Toxiproxy answers an error without a status of its own with 500
                log.exception("%s %s failed", request.method, path)
                return error_response(ApiError(f"{type(error).__name__}: {error}", 500))
        return Response(404, b"404 page not found\n", TEXT, {"X-Content-Type-Options": "nosniff"})

    # ---- proxies ----

    async def proxy_index(self, request: Request, args: dict[str, str]) -> Response:
        proxies = self.registry.proxies
        return json_response(200, {name: proxies[name].to_json() for name in sorted(proxies)})

    async def proxy_create(self, request: Request, args: dict[str, str]) -> Response:
        proxy = await self.registry.create(decode_body(request.body))
        return json_response(201, proxy.to_json())

    async def populate(self, request: Request, args: dict[str, str]) -> Response:
        try:
            proxies, error = await self.registry.populate(decode_body(request.body))
        except ApiError as invalid:  # answered in populate's own shape, as JSON
            proxies, error = [], invalid
        listed = [proxy.to_json() for proxy in proxies] or None  # Go marshals an empty result as null
        if error is None:
            return json_response(201, {"proxies": listed})
        return json_response(error.status, {"error": error.message, "status": error.status, "proxies": listed})

    async def proxy_show(self, request: Request, args: dict[str, str]) -> Response:
        return json_response(200, self.registry.get(args["proxy"]).to_json())

    async def proxy_update(self, request: Request, args: dict[str, str]) -> Response:
        self.registry.get(args["proxy"])  # 404 before a bad body, as Toxiproxy checks
        proxy = await self.registry.update(args["proxy"], decode_body(request.body))
        return json_response(200, proxy.to_json())

    async def proxy_delete(self, request: Request, args: dict[str, str]) -> Response:
        await self.registry.delete(args["proxy"])
        return Response(204)

    async def reset(self, request: Request, args: dict[str, str]) -> Response:
        await self.registry.reset()
        return Response(204)

    async def version(self, request: Request, args: dict[str, str]) -> Response:
        return Response(200, f'{{"version": "{VERSION}"}}\n'.encode(), "application/json;charset=utf-8")

    # ---- toxics ----

    async def toxic_index(self, request: Request, args: dict[str, str]) -> Response:
        proxy = self.registry.get(args["proxy"])
        return json_response(200, [toxic.to_json() for toxic in proxy.toxic_list()])

    async def toxic_create(self, request: Request, args: dict[str, str]) -> Response:
        self.registry.get(args["proxy"])
        toxic = await self.registry.add_toxic(args["proxy"], decode_body(request.body))
        return json_response(200, toxic.to_json())

    async def toxic_show(self, request: Request, args: dict[str, str]) -> Response:
        return json_response(200, self.registry.get_toxic(args["proxy"], args["toxic"]).to_json())

    async def toxic_update(self, request: Request, args: dict[str, str]) -> Response:
        self.registry.get_toxic(args["proxy"], args["toxic"])
        toxic = await self.registry.update_toxic(args["proxy"], args["toxic"], decode_body(request.body))
        return json_response(200, toxic.to_json())

    async def toxic_delete(self, request: Request, args: dict[str, str]) -> Response:
        await self.registry.remove_toxic(args["proxy"], args["toxic"])
        return Response(204)


_NAME = r"[^/]+"
ROUTES: list[tuple[re.Pattern[str], dict[str, Route]]] = [
    (re.compile(r"/reset"), {"POST": Api.reset}),
    (re.compile(r"/proxies"), {"GET": Api.proxy_index, "POST": Api.proxy_create}),
    (re.compile(r"/populate"), {"POST": Api.populate}),
    (re.compile(rf"/proxies/(?P<proxy>{_NAME})"),
     {"GET": Api.proxy_show, "POST": Api.proxy_update, "PATCH": Api.proxy_update, "DELETE": Api.proxy_delete}),
    (re.compile(rf"/proxies/(?P<proxy>{_NAME})/toxics"), {"GET": Api.toxic_index, "POST": Api.toxic_create}),
    (re.compile(rf"/proxies/(?P<proxy>{_NAME})/toxics/(?P<toxic>{_NAME})"),
     {"GET": Api.toxic_show, "POST": Api.toxic_update, "PATCH": Api.toxic_update, "DELETE": Api.toxic_delete}),
    (re.compile(r"/version"), {"GET": Api.version}),
]
