"""Real TCP servers on 127.0.0.1 for the proxy tests: an echo server and one that hangs up.

Each runs in a thread with blocking sockets (so the proxy's event loop is not also the
servers'), counts the bytes it received, and closes its listener and every connection on
`close()`, which the fixtures call even when a test fails.
"""

from __future__ import annotations

import socket
import threading

ACCEPT_POLL_S = 0.2


class TcpServer:
    """Accepts on 127.0.0.1:<free port>; `serve_client` says what to do with a connection."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(ACCEPT_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self.received_bytes = 0
        self.accepted = 0
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name=f"test-server-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serve_client(self, client: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closing.set()
        self._thread.join(10)
        self._listener.close()
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._clients.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            self.serve_client(client)
        except OSError:
            pass
        finally:
            try:
                client.close()
            except OSError:
                pass


class EchoServer(TcpServer):
    def serve_client(self, client: socket.socket) -> None:
        while True:
            data = client.recv(65536)
            if not data:
                return
            with self._lock:
                self.received_bytes += len(data)
            client.sendall(data)


class HangUpServer(TcpServer):
    """Closes every connection as soon as it is accepted."""

    def serve_client(self, client: socket.socket) -> None:
        return
