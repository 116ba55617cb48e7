"""An opt-in timeline of one broker process's requests, for finding where a transaction's
milliseconds go (`python -m bench.bench_txn --trace-dir DIR`, issue 14).

With LOGQUAKE_REQUEST_TRACE_DIR set in its environment, a broker records, on the monotonic
clock every process on the machine shares, each request it starts serving and answers (API
key, version, connection) and each broker-to-broker request it sends and gets answered (API
key, version, destination node), and writes them to DIR/broker-<id>.trace when it exits
cleanly. `bench/txn_trace.py` merges the files of a run into per-phase figures. Unset, the
hooks cost one module attribute test per request.

Lines: `<monotonic ns> <event> <api key> <api version> <connection id or destination node>`,
event one of `in` (a request taken up), `out` (its answer given), `send` (a request to
another node), `answered` (its answer received).
"""

from __future__ import annotations

import os
import time

ENV = "LOGQUAKE_REQUEST_TRACE_DIR"


class RequestTrace:
    def __init__(self, path: str) -> None:
        self.path = path
        self._events: list[tuple[int, str, int, int, int]] = []

    def event(self, kind: str, api_key: int, api_version: int, peer: int) -> None:
        self._events.append((time.monotonic_ns(), kind, api_key, api_version, peer))

    def write(self) -> None:
        with open(self.path, "w") as out:
            out.writelines(f"{t} {kind} {key} {version} {peer}\n" for t, kind, key, version, peer in self._events)


TRACE: RequestTrace | None = None  # the process's trace when switched on; read by connection.py and outbound.py


def install_from_env(broker_id: int) -> RequestTrace | None:
    """Switch tracing on if the environment asks for it; the trace to write at exit."""
    global TRACE
    directory = os.environ.get(ENV)
    if not directory:
        return None
    os.makedirs(directory, exist_ok=True)
    TRACE = RequestTrace(os.path.join(directory, f"broker-{broker_id}.trace"))
    return TRACE
