"""The Toxiproxy-compatible proxy (proxy/) on loopback: what it costs, and what its toxics do.

An echo server (a thread, blocking sockets) on 127.0.0.1; the same client measures it directly
and through a proxy of a ProxyServer driven over its HTTP API:

- round trips of 16 bytes (p50, p99), with no toxic;
- echo throughput (MB/s) of 1 MB writes while a second thread reads the echo back;
- round trips under latency 100 ms, and 100 ms ± 20 ms (min, p50, max);
- the rate a bandwidth toxic of 1000 KB/s lets through one way.

By default the proxy runs in this process (ProxyServer, a thread: it shares the GIL with the
client and the echo server); `--process` runs it as `python -m proxy` (`logquake proxy`).

    .venv/bin/python bench/bench_proxy.py [--megabytes 64] [--trips 2000] [--process]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy import ProxyServer  # noqa: E402


class ProxyProcess:
    """`python -m proxy --port 0` as a child process, with the same host/port/url as ProxyServer."""

    def __enter__(self) -> "ProxyProcess":
        self._process = subprocess.Popen([sys.executable, "-m", "proxy", "--port", "0", "--seed", "1"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self._process.stdout.readline() if self._process.stdout else ""
        match = re.search(r"http://([\d.]+):(\d+)", line)
        if match is None:
            self._process.kill()
            raise RuntimeError(f"python -m proxy did not start: {line!r}")
        self.host, self.port = match.group(1), int(match.group(2))
        self.url = f"http://{self.host}:{self.port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._process.terminate()
        self._process.communicate(timeout=30)

MB = 1_000_000
WRITE_BYTES = 1 << 20


def echo_server() -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve(client: socket.socket) -> None:
        with client:
            while data := client.recv(1 << 20):
                client.sendall(data)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def api(server: ProxyServer | ProxyProcess, method: str, path: str, body: object) -> dict:
    request = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, size: int) -> None:
    while size > 0:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError
        size -= len(chunk)


def round_trips_ms(address: tuple[str, int], trips: int) -> list[float]:
    with connect(address) as sock:
        times = []
        for _ in range(trips):
            started = time.perf_counter()
            sock.sendall(b"0123456789abcdef")
            recv_exactly(sock, 16)
            times.append((time.perf_counter() - started) * 1000)
        return times


def echo_mb_s(address: tuple[str, int], megabytes: int) -> float:
    total = megabytes * MB
    block = b"x" * WRITE_BYTES
    with connect(address) as sock:
        reader = threading.Thread(target=recv_exactly, args=(sock, total))
        started = time.perf_counter()
        reader.start()
        sent = 0
        while sent < total:
            piece = block[:min(WRITE_BYTES, total - sent)]
            sock.sendall(piece)
            sent += len(piece)
        reader.join()
        return total / MB / (time.perf_counter() - started)


def one_way_kb_s(address: tuple[str, int], size_bytes: int) -> float:
    with connect(address) as sock:
        reader = threading.Thread(target=recv_exactly, args=(sock, size_bytes))
        started = time.perf_counter()
        reader.start()
        sock.sendall(b"y" * size_bytes)
        reader.join()
        return size_bytes / 1000 / (time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--trips", type=int, default=2000)
    parser.add_argument("--process", action="store_true", help="run the proxy as a separate process")
    args = parser.parse_args()

    listener = echo_server()
    direct = listener.getsockname()[:2]
    server_context: contextlib.AbstractContextManager = ProxyProcess() if args.process else ProxyServer(port=0, seed=1)
    print(f"proxy: {'python -m proxy (its own process)' if args.process else 'ProxyServer (a thread of this process)'}")
    with server_context as server:
        listen = api(server, "POST", "/proxies", {"name": "echo", "listen": "127.0.0.1:0",
                                                  "upstream": f"{direct[0]}:{direct[1]}"})["listen"]
        host, port = listen.rsplit(":", 1)
        proxied = (host, int(port))

        print(f"round trip of 16 bytes, {args.trips} trips:")
        for label, address in (("direct", direct), ("proxy", proxied)):
            times = round_trips_ms(address, args.trips)
            print(f"  {label:<7} p50 {statistics.median(times):.3f} ms   p99 {percentile(times, 0.99):.3f} ms")

        print(f"echo throughput, {args.megabytes} MB in {WRITE_BYTES // 1024} KiB writes:")
        for label, address in (("direct", direct), ("proxy", proxied)):
            print(f"  {label:<7} {echo_mb_s(address, args.megabytes):.0f} MB/s")

        for latency_ms, jitter_ms in ((100, 0), (100, 20)):
            api(server, "POST", "/proxies/echo/toxics", {"type": "latency", "attributes": {"latency": latency_ms, "jitter": jitter_ms}})
            times = round_trips_ms(proxied, 20)
            print(f"latency {latency_ms} ms ± {jitter_ms} ms (downstream), 20 round trips: "
                  f"min {min(times):.1f}  p50 {statistics.median(times):.1f}  max {max(times):.1f} ms")
            api(server, "DELETE", "/proxies/echo/toxics/latency_downstream", {})

        rate_kb_s, size_bytes = 1000, 3_000_000
        api(server, "POST", "/proxies/echo/toxics", {"type": "bandwidth", "stream": "upstream", "attributes": {"rate": rate_kb_s}})
        print(f"bandwidth {rate_kb_s} KB/s (upstream), {size_bytes // 1000} KB one way: {one_way_kb_s(proxied, size_bytes):.0f} KB/s")
    listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
