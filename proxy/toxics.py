"""Toxiproxy's toxics: their attributes, their JSON, and what each does to a stream.

Each kind's `pipe` runs on one `Stage` (one direction of one connection). Attributes are
integers with Toxiproxy's names and units (milliseconds, KB/s = 1000 bytes/s, microseconds
for the slicer's delay). Semantics follow Toxiproxy's implementation, including the parts its
README does not spell out:

- latency: each chunk leaves `latency ± jitter` ms after the proxy read it (jitter drawn
  uniformly from [-jitter, jitter)); chunks queue behind each other (up to 1024 buffered).
- bandwidth: `rate` KB/s; a chunk larger than 100 ms worth is sent in 100-ms pieces. A rate of
  0 holds the data until the toxic is removed or updated (what Toxiproxy does).
- slow_close: the close is passed on `delay` ms after it arrives; data passes untouched.
- timeout: data is dropped; the connection is closed once no data has arrived for `timeout`
  ms (Toxiproxy's timer restarts with each chunk), never when `timeout` is 0. Removing the
  toxic closes the connections it was applied to (Toxiproxy's cleanup), since their streams
  have lost bytes.
- reset_peer: at the first chunk (or close) after it starts, wait `timeout` ms, then reset
  both sides of the connection (TCP RST, SO_LINGER 0); the chunk is dropped.
- slicer: each chunk is split recursively near its middle (± `size_variation`) until pieces
  are at most `average_size + size_variation` bytes; `delay` µs after each piece.
- limit_data: the connection closes once `bytes` bytes have passed in this direction.
- noop: passes everything.

Departures from Toxiproxy: where it would crash a goroutine or loop forever, a negative rate
holds data like 0, and a slicer `average_size` below 1 counts as 1 with its split point kept
inside the chunk; reset_peer always resets with RST (Toxiproxy sets SO_LINGER 0 only on
connections that started with the toxic in place); removing a timeout toxic closes only the
connections it applied to; toxicity is drawn when a toxic starts on a connection and when it
is updated (Toxiproxy also draws again for a toxic whose neighbour in the chain changed).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from proxy.channel import Chunk, Close
from proxy.errors import ApiError, bad_request_body
from proxy.stage import Interrupted, Stage, pass_through

STREAMS = ("upstream", "downstream")  # client->server, server->client
LATENCY_BUFFER_CHUNKS = 1024
BANDWIDTH_PIECE_S = 0.1


@dataclass(frozen=True)
class ToxicKind:
    name: str
    fields: tuple[str, ...]
    pipe: Callable[[Stage], Awaitable[None]]
    buffer_chunks: int = 1
    closes_on_removal: bool = False  # timeout's cleanup


@dataclass
class Toxic:
    name: str
    kind: ToxicKind
    stream: str  # as the client wrote it; `direction` is its lower-case form
    toxicity: float
    attributes: dict[str, int] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return self.kind.name

    @property
    def direction(self) -> str:
        return self.stream.lower()

    def attr(self, name: str) -> int:
        return self.attributes.get(name, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": {name: self.attr(name) for name in self.kind.fields},
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


# ---- parsing (Toxiproxy's rules: defaults, then type, then name, then attributes) ----

def parse_new_toxic(body: Any, existing_names: set[str]) -> Toxic:
    if not isinstance(body, dict):
        raise bad_request_body(f"cannot decode {_json_type(body)} into a toxic")
    stream = _optional_str(body, "stream", "downstream")
    toxicity = _optional_number(body, "toxicity", 1.0)
    type_name = _optional_str(body, "type", "")
    name = _optional_str(body, "name", "")
    if stream.lower() not in STREAMS:
        raise ApiError("stream was invalid, can be either upstream or downstream", 400)
    if not name:
        name = f"{type_name}_{stream}"
    kind = KINDS.get(type_name)
    if kind is None:
        raise ApiError("invalid toxic type", 400)
    if name in existing_names:
        raise ApiError("toxic already exists", 409)
    attributes = _parse_attributes(kind, body.get("attributes"), {})
    return Toxic(name=name, kind=kind, stream=stream, toxicity=toxicity, attributes=attributes)


def parse_toxic_update(toxic: Toxic, body: Any) -> tuple[dict[str, int], float]:
    """New attributes and toxicity: fields the body leaves out keep their values."""
    if not isinstance(body, dict):
        raise bad_request_body(f"cannot decode {_json_type(body)} into a toxic update")
    toxicity = _optional_number(body, "toxicity", toxic.toxicity)
    return _parse_attributes(toxic.kind, body.get("attributes"), toxic.attributes), toxicity


def _parse_attributes(kind: ToxicKind, raw: Any, current: dict[str, int]) -> dict[str, int]:
    attributes = {name: current.get(name, 0) for name in kind.fields}
    if raw is None:
        return attributes
    if not isinstance(raw, dict):
        raise bad_request_body(f"cannot decode {_json_type(raw)} into the attributes of a {kind.name} toxic")
    for name in kind.fields:
        value = raw.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_request_body(f"attribute {name} of a {kind.name} toxic must be an integer, got {json_text(value)}")
        attributes[name] = value
    return attributes


def _optional_str(body: dict[str, Any], key: str, default: str) -> str:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad_request_body(f"field {key} must be a string, got {json_text(value)}")
    return value


def _optional_number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request_body(f"field {key} must be a number, got {json_text(value)}")
    return float(value)


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "bool", type(None): "null"}.get(type(value), "number")


def json_text(value: Any) -> str:
    return json.dumps(value)


# ---- the pipes ----

async def _latency(stage: Stage) -> None:
    latency_ms, jitter_ms = stage.toxic.attr("latency"), stage.toxic.attr("jitter")
    while True:
        item = await stage.recv()
        if isinstance(item, Close):
            stage.close(item)
            return
        assert isinstance(item, Chunk)
        delay_ms = latency_ms
        if jitter_ms > 0:
            delay_ms += stage.rng.randrange(2 * jitter_ms) - jitter_ms
        wait_s = delay_ms / 1000 - (_loop_time() - item.read_at_s)
        try:
            await stage.sleep(wait_s)
        except Interrupted:
            stage.hand_on(item)  # leave at once, without the rest of its latency
            raise
        await stage.send(Chunk(item.data, item.read_at_s + max(wait_s, 0.0)))


async def _bandwidth(stage: Stage) -> None:
    rate_kb_s = stage.toxic.attr("rate")
    if rate_kb_s <= 0:
        await _hold(stage)
        return
    bytes_per_s = rate_kb_s * 1000
    piece_bytes = int(bytes_per_s * BANDWIDTH_PIECE_S)
    owed_s = 0.0  # time the data sent so far should have taken, less what it took
    while True:
        item = await stage.recv()
        if isinstance(item, Close):
            stage.close(item)
            return
        assert isinstance(item, Chunk)
        data = item.data
        owed_s += len(data) / bytes_per_s
        while len(data) > piece_bytes:
            try:
                await stage.sleep(BANDWIDTH_PIECE_S)
            except Interrupted:
                stage.hand_on(Chunk(data, item.read_at_s))
                raise
            await stage.send(Chunk(data[:piece_bytes], item.read_at_s))
            data = data[piece_bytes:]
            owed_s -= BANDWIDTH_PIECE_S
        started = _loop_time()
        try:
            await stage.sleep(owed_s)
        except Interrupted:
            stage.hand_on(Chunk(data, item.read_at_s))
            raise
        owed_s -= _loop_time() - started  # timers overshoot: carry the error to the next chunk
        await stage.send(Chunk(data, item.read_at_s))


async def _hold(stage: Stage) -> None:
    """Keep every chunk until interrupted (bandwidth at rate 0), then hand them all on."""
    held: list[Chunk] = []
    try:
        while True:
            item = await stage.recv()
            if isinstance(item, Close):
                for chunk in held:
                    stage.hand_on(chunk)
                stage.close(item)
                return
            assert isinstance(item, Chunk)
            held.append(item)
    except Interrupted:
        for chunk in held:
            stage.hand_on(chunk)
        raise


async def _slow_close(stage: Stage) -> None:
    delay_s = stage.toxic.attr("delay") / 1000
    while True:
        item = await stage.recv()
        if isinstance(item, Close):
            try:
                await stage.sleep(delay_s)
            finally:
                stage.close(item)  # on interrupt too: the close was already on its way
            return
        assert isinstance(item, Chunk)
        await stage.send(item)


async def _timeout(stage: Stage) -> None:
    timeout_s = stage.toxic.attr("timeout") / 1000
    while True:
        item = await stage.recv(timeout_s if timeout_s > 0 else None)
        if item is None:  # no data for timeout_s
            stage.close(Close())
            return
        if isinstance(item, Close):
            stage.close(item)
            return
        # data is dropped on the floor


async def _reset_peer(stage: Stage) -> None:
    item = await stage.recv()
    try:
        await stage.sleep(stage.toxic.attr("timeout") / 1000)
    except Interrupted:
        if isinstance(item, Chunk):
            stage.hand_on(item)
        elif isinstance(item, Close):
            stage.close(item)
        raise
    stage.close(Close(reset=True))


def slice_bounds(length: int, average_size: int, size_variation: int, rng: Any) -> list[tuple[int, int]]:
    """Toxiproxy's slicer: halve around the middle (± variation) until pieces are small enough."""
    average_size = max(1, average_size)
    pieces: list[tuple[int, int]] = []

    def split(start: int, end: int) -> None:
        if (end - start) - average_size <= size_variation or end - start <= 1:
            pieces.append((start, end))
            return
        middle = start + (end - start) // 2
        if size_variation > 0:
            middle += rng.randrange(2 * size_variation) - size_variation
        middle = min(max(middle, start + 1), end - 1)
        split(start, middle)
        split(middle, end)

    split(0, length)
    return pieces


async def _slicer(stage: Stage) -> None:
    average_size = stage.toxic.attr("average_size")
    size_variation = stage.toxic.attr("size_variation")
    delay_s = stage.toxic.attr("delay") / 1_000_000
    while True:
        item = await stage.recv()
        if isinstance(item, Close):
            stage.close(item)
            return
        assert isinstance(item, Chunk)
        for start, end in slice_bounds(len(item.data), average_size, size_variation, stage.rng):
            await stage.send(Chunk(item.data[start:end], item.read_at_s))
            try:
                await stage.sleep(delay_s)
            except Interrupted:
                if end < len(item.data):
                    stage.hand_on(Chunk(item.data[end:], item.read_at_s))
                raise


async def _limit_data(stage: Stage) -> None:
    limit = stage.toxic.attr("bytes")
    while True:
        item = await stage.recv()
        if isinstance(item, Close):
            stage.close(item)
            return
        assert isinstance(item, Chunk)
        sent = stage.state.get("sent", 0)
        data = item.data[:max(0, limit - sent)]
        if data:
            await stage.send(Chunk(data, item.read_at_s))
            stage.state["sent"] = sent + len(data)
        if limit - stage.state.get("sent", 0) <= 0:
            stage.close(Close())
            return


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


KINDS: dict[str, ToxicKind] = {kind.name: kind for kind in (
    ToxicKind("noop", (), pass_through),
    ToxicKind("latency", ("latency", "jitter"), _latency, buffer_chunks=LATENCY_BUFFER_CHUNKS),
    ToxicKind("bandwidth", ("rate",), _bandwidth),
    ToxicKind("slow_close", ("delay",), _slow_close),
    ToxicKind("timeout", ("timeout",), _timeout, closes_on_removal=True),
    ToxicKind("reset_peer", ("timeout",), _reset_peer),
    ToxicKind("slicer", ("average_size", "size_variation", "delay"), _slicer),
    ToxicKind("limit_data", ("bytes",), _limit_data),
)}
