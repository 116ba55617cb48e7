"""Child process of tests/checkers/test_node_logs.py: writes a node log the way a broker
process does (cluster/runtime/broker_main.py's logging) while the real code hits an error.

  handler   a BrokerConnection whose node raises while handling ApiVersions (a stand-in for
            a broker bug), asked by the real wire client; then a task whose exception
            nobody retrieves (asyncio's own handler logs it)
  halt      the controller's fatal-fault halt (cluster/runtime/controller_halt.py), status 3
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from types import SimpleNamespace

from cluster.protocol.client import WireClient
from cluster.protocol.versions import ApiKey
from cluster.runtime import controller_halt
from cluster.runtime.broker_main import _setup_logging
from cluster.runtime.connection import BrokerConnection


class RaisingNode:
    """A node core whose request handling has a bug."""

    config = SimpleNamespace(socket_request_max_bytes=100 * 2**20)

    def handle(self, request, client, reply) -> None:
        raise RuntimeError(f"a bug while handling api {request.api_key}")


def ask(port: int) -> None:
    try:
        with WireClient("127.0.0.1", port, timeout_s=5) as client:
            client.request(ApiKey.API_VERSIONS, 3, client_software_name="test", client_software_version="0")
    except Exception as exc:  # the broker closes the connection on an internal error
        print(f"client: {type(exc).__name__}", flush=True)


async def handler_errors() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: BrokerConnection(RaisingNode()), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    asker = threading.Thread(target=ask, args=(port,))
    asker.start()
    while asker.is_alive():
        await asyncio.sleep(0.05)
    server.close()

    async def fails() -> None:
        raise ValueError("nobody awaits this task")

    task = loop.create_task(fails())
    await asyncio.sleep(0.05)
    del task
    gc.collect()  # the unretrieved exception is logged when the task is collected


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    _setup_logging(path)
    if mode == "handler":
        asyncio.run(handler_errors())
    elif mode == "halt":
        controller_halt.halt("committed metadata the image cannot apply (test)")


if __name__ == "__main__":
    main()
