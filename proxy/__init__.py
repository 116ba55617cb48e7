"""A TCP proxy that speaks Toxiproxy's HTTP API, for network faults without root or Docker.

Why it exists: Toxiproxy (Shopify's Go proxy) is what people who test Kafka already use to
inject slow and flaky networks, but no registry this project can reach ships its server.
This package is an asyncio re-implementation of its behaviour, written from its documented
API and semantics: proxies (a name, a `listen` and an `upstream` address, `enabled`) pipe each
connection's two directions (`upstream` = client to server, `downstream` = server to client)
through chains of toxics (latency, bandwidth, slow_close, timeout, reset_peer, slicer,
limit_data, noop), each with a `toxicity`, and the same HTTP endpoints, JSON fields, status
codes and error bodies. Clients written for Toxiproxy (toxiproxy-python) drive it unchanged.

Randomness (toxicity draws, latency jitter, slicer sizes) comes from one seeded
`random.Random`, so a run's draws reproduce.

This package is a layer of its own: it imports nothing from the cluster, the harness, the
workloads or the checkers, so it can run in front of any TCP server.

- `ProxyServer` (proxy.server): the API server and its proxies on an event loop in a thread,
  a context manager for Python code and tests.
- `serve` (proxy.server): the same on the caller's event loop (`logquake proxy`).
"""

from proxy.server import DEFAULT_API_HOST, DEFAULT_API_PORT, ProxyServer, ProxyServerError, serve

__all__ = ["DEFAULT_API_HOST", "DEFAULT_API_PORT", "ProxyServer", "ProxyServerError", "serve"]
