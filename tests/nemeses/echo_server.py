"""A small asyncio server standing in for a broker process in the nemesis mechanism tests.

    python -m tests.nemeses.echo_server HOST PORT READY_FILE

TCP, one line per request, answers one line:
    ping                      -> pong
    clock                     -> {"wall": time.time(), "mono": time.monotonic(), "pid": pid}
    hello SENDER PADDING      -> welcome PADDING (a peer's message; SENDER is recorded)
    heard                     -> {"tcp": [senders of hello], "udp": [source addresses of datagrams]}
    dial HOST PORT TIMEOUT_S  -> {"result": ok|timeout|refused|reset}: connect FROM this
                                 server's own address to a peer, send hello, await welcome
    udp HOST PORT             -> sent: one datagram from this server's own address
UDP on the same port: every datagram's source address is recorded (exact per-direction
reachability, which TCP cannot show: it needs both directions).

Padding keeps peer messages above 80 bytes per packet, so a data-only (one-way) drop sees them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

PADDING = "x" * 200


class EchoServer:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.tcp_heard: list[str] = []
        self.udp_heard: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                answer = await self.answer(line.decode().split())
                writer.write((answer + "\n").encode())
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def answer(self, words: list[str]) -> str:
        if not words:
            return "error empty"
        command = words[0]
        if command == "ping":
            return "pong"
        if command == "clock":
            return json.dumps({"wall": time.time(), "mono": time.monotonic(), "pid": os.getpid()})
        if command == "hello":
            self.tcp_heard.append(words[1])
            return f"welcome {PADDING}"
        if command == "heard":
            return json.dumps({"tcp": self.tcp_heard, "udp": self.udp_heard})
        if command == "dial":
            return json.dumps({"result": await self.dial(words[1], int(words[2]), float(words[3]))})
        if command == "udp":
            transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
                asyncio.DatagramProtocol, local_addr=(self.host, 0), remote_addr=(words[1], int(words[2])))
            transport.sendto(f"udp {self.host} {PADDING}".encode())
            transport.close()
            return "sent"
        return f"error unknown command {command}"

    async def dial(self, host: str, port: int, timeout_s: float) -> str:
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port, local_addr=(self.host, 0))
                try:
                    writer.write(f"hello {self.host} {PADDING}\n".encode())
                    await writer.drain()
                    line = await reader.readline()
                finally:
                    writer.close()
        except TimeoutError:
            return "timeout"
        except ConnectionRefusedError:
            return "refused"
        except (ConnectionError, OSError) as error:
            return f"error {type(error).__name__}"
        return "ok" if line.startswith(b"welcome") else "reset"


class UdpRecorder(asyncio.DatagramProtocol):
    def __init__(self, server: EchoServer) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.server.udp_heard.append(addr[0])


async def main(host: str, port: int, ready_file: str) -> None:
    server = EchoServer(host, port)
    tcp = await asyncio.start_server(server.handle, host, port)
    port = tcp.sockets[0].getsockname()[1]
    server.port = port
    await asyncio.get_running_loop().create_datagram_endpoint(lambda: UdpRecorder(server), local_addr=(host, port))
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"host": host, "port": port, "pid": os.getpid()}, f)
    os.replace(tmp, ready_file)
    async with tcp:
        await tcp.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
