"""`host:port` strings as Toxiproxy writes them (`127.0.0.1:8474`, `[::1]:8474`)."""

from __future__ import annotations

import ipaddress
import socket

from proxy.errors import ApiError

# An empty host means every interface to Go's net.Listen; here it means loopback, so a proxy
# created without a listen address is never reachable from outside the machine.
EMPTY_HOST = "127.0.0.1"


def split_address(address: str, operation: str) -> tuple[str, int]:
    """(host, port) of `address`; `operation` names the failing call in the error, as Go does."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ApiError(f"{operation}: address {address}: missing port in address", 500)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ApiError(f"{operation}: address {address}: too many colons in address", 500)
    try:
        port = int(port_text, 10) if port_text else 0
    except ValueError:
        raise ApiError(f"{operation}: lookup port {port_text}: unknown port", 500) from None
    if not 0 <= port <= 65535:
        raise ApiError(f"{operation}: address {address}: invalid port", 500)
    return host or EMPTY_HOST, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve_host(host: str) -> str:
    """One IP address for `host` (the first the resolver gives, as Go's net.Listen uses one)."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ApiError(f"listen tcp: lookup {host}: {error.strerror}", 500) from None
    return str(infos[0][4][0])


def resolve_listen(address: str) -> str:
    """The address a listen string resolves to (for comparing with a proxy's current one)."""
    host, port = split_address(address, "listen tcp")
    return format_address(resolve_host(host), port)
