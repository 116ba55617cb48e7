"""Jepsen-style histories: operations, and their streamed JSON-lines form.

An operation is one line of history.jsonl:

    {"index": 7, "time_ns": 1234, "type": "ok", "process": 3, "f": "send",
     "value": [["send", 2, [14, 101]]], "error": null}

* `type` is invoke | ok | fail | info. ok must have taken effect, fail must not have, info
  may or may not have; a process whose op completes with info is retired (it never invokes
  again) and its worker continues under a fresh process id.
* `process` is an int for clients, "nemesis" for the fault injector.
* Micro-op values follow Jepsen's Kafka test. Keys are abstract ints, one per
  topic-partition (the client maps them):
    send invoke  [["send", k, v], ...]            ok   [["send", k, [offset, v]], ...]
    poll invoke  [["poll"]]                        ok   [["poll", {k: [[offset, v], ...]}]]
    txn          a mix of the two
    assign / subscribe  [k, ...]
  In JSON, poll maps have string keys; `Op.from_json` turns them back into ints.
* Extra fields (rebalance_log, end_process, ...) ride in `extra`.

The writer streams the file as it grows: lines are buffered in memory and a flusher thread
writes them out, whole lines at a time, at least every `flush_interval_ms` (50 ms), and at
once on `flush()` (the run loop calls it for every nemesis op and at the end of each phase)
and `close()`. A killed harness therefore leaves an intact prefix of the history that ends
at most one flush interval before the kill. Writing every line with its own flush cost two
system calls per op, most of the harness's per-op cost; an fsync per line was never promised.
The reader names the line of any corrupt record and tolerates a torn last line.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

import orjson

OpType = Literal["invoke", "ok", "fail", "info"]
OP_TYPES: frozenset[str] = frozenset({"invoke", "ok", "fail", "info"})
NEMESIS = "nemesis"

_CORE_FIELDS = ("index", "time_ns", "type", "process", "f", "value", "error")


class HistoryFormatError(ValueError):
    """A history line that is not a valid operation; names the file and line."""

    def __init__(self, path: str | os.PathLike[str], line_number: int, reason: str):
        super().__init__(f"{path}:{line_number}: {reason}")
        self.path = str(path)
        self.line_number = line_number
        self.reason = reason


@dataclass(slots=True)
class Op:
    index: int
    time_ns: int
    type: OpType
    process: int | str
    f: str
    value: Any = None
    error: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "time_ns": self.time_ns,
            "type": self.type,
            "process": self.process,
            "f": self.f,
            "value": self.value,
            "error": self.error,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Op":
        for name in ("index", "time_ns", "type", "process", "f"):
            if name not in raw:
                raise ValueError(f"missing field {name!r}")
        if raw["type"] not in OP_TYPES:
            raise ValueError(f"type {raw['type']!r} is not one of invoke, ok, fail, info")
        if not isinstance(raw["index"], int) or not isinstance(raw["time_ns"], int):
            raise ValueError("index and time_ns must be integers")
        if not isinstance(raw["process"], int) and raw["process"] != NEMESIS:
            raise ValueError(f"process {raw['process']!r} is neither an int nor {NEMESIS!r}")
        extra = {k: v for k, v in raw.items() if k not in _CORE_FIELDS}
        return cls(
            index=raw["index"],
            time_ns=raw["time_ns"],
            type=raw["type"],
            process=raw["process"],
            f=raw["f"],
            value=_int_poll_keys(raw.get("value")),
            error=raw.get("error"),
            extra=extra,
        )


def _int_poll_keys(value: Any) -> Any:
    """JSON object keys are strings; poll results are keyed by int keys in memory."""
    if isinstance(value, list):
        out = []
        for mop in value:
            if isinstance(mop, list) and len(mop) == 2 and mop[0] == "poll" and isinstance(mop[1], dict):
                out.append(["poll", {int(k): v for k, v in mop[1].items()}])
            else:
                out.append(mop)
        return out
    return value


_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def encode_op(op: Op) -> bytes:
    """One history line, newline included.

    orjson writes what `json.dumps(separators=(",", ":"))` writes for everything a history
    holds (int keys become strings in both), at a tenth of the cost; values it refuses
    (integers beyond 64 bits, for one) go through the standard library instead."""
    raw = op.to_json()
    try:
        return orjson.dumps(raw, option=_ORJSON_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return (json.dumps(raw, separators=(",", ":")) + "\n").encode("utf-8")


class HistoryWriteError(OSError):
    """Writing history.jsonl failed (disk full, file gone): the run cannot record ops."""


class _LineSink:
    """The file side of a HistoryWriter: pending lines, and the writes that drain them.

    Kept apart from the writer so that the flusher thread and the exit-time finalizer hold
    no reference to the writer itself (an unclosed writer is still collected and flushed)."""

    def __init__(self, path: Path, fsync: bool):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.fsync = fsync
        # Appends and pops of a deque are atomic, so the appending thread takes no lock;
        # the flusher pops exactly the lines it saw, oldest first.
        self.pending: collections.deque[bytes] = collections.deque()
        self.write_lock = threading.Lock()  # one batch at a time, so batches stay in order
        self.error: OSError | None = None
        self.closed = threading.Event()

    def flush(self) -> None:
        with self.write_lock:
            if self.error is not None:
                raise HistoryWriteError(f"writing {self.path} failed earlier: {self.error}") from self.error
            pending = self.pending
            count = len(pending)
            if not count or self.fd < 0:
                return
            popleft = pending.popleft
            data = memoryview(b"".join([popleft() for _ in range(count)]))
            try:
                # One write per batch of whole lines: a kill between writes leaves only
                # whole lines behind, and a short write is finished before anything else.
                while data:
                    data = data[os.write(self.fd, data):]
                if self.fsync:
                    os.fsync(self.fd)
            except OSError as exc:
                self.error = exc
                raise HistoryWriteError(f"writing {self.path} failed: {exc}") from exc

    def run_flusher(self, interval_s: float) -> None:
        while not self.closed.wait(interval_s):
            try:
                self.flush()
            except HistoryWriteError:
                return  # kept in self.error: the next append, flush or close raises it

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        try:
            self.flush()
            with self.write_lock:
                os.fsync(self.fd)
        finally:
            with self.write_lock:
                os.close(self.fd)
                self.fd = -1


class HistoryWriter:
    """Appends ops to history.jsonl, one line each, streamed by a flusher thread.

    flush_interval_ms bounds how much a killed harness can lose; flush() and close() write
    everything appended so far. fsync=True also fsyncs every batch (close always does)."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False, flush_interval_ms: float = 50.0,
                 max_pending_lines: int = 10_000):
        if not flush_interval_ms > 0:
            raise ValueError(f"flush_interval_ms must be positive, got {flush_interval_ms!r}")
        if max_pending_lines < 1:
            raise ValueError(f"max_pending_lines must be at least 1, got {max_pending_lines!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_interval_ms = flush_interval_ms
        self.max_pending_lines = max_pending_lines
        self._sink = _LineSink(self.path, fsync)
        self._pending = self._sink.pending
        self._flusher = threading.Thread(target=self._sink.run_flusher, args=(flush_interval_ms / 1000.0,),
                                         name="history-writer", daemon=True)
        self._flusher.start()
        # A writer that is never closed (a crashing caller) is still flushed when it is
        # collected or the interpreter exits.
        self._finalizer = weakref.finalize(self, _LineSink.close, self._sink)
        self.count = 0

    def append(self, op: Op) -> None:
        sink = self._sink
        if sink.error is not None or sink.closed.is_set():
            raise HistoryWriteError(f"{self.path} is closed" if sink.error is None
                                    else f"writing {self.path} failed earlier: {sink.error}")
        pending = self._pending
        pending.append(encode_op(op))
        if len(pending) >= self.max_pending_lines:  # the flusher is behind: bound the memory
            sink.flush()
        self.count += 1

    def flush(self) -> None:
        """Write everything appended so far (the flusher would within flush_interval_ms)."""
        self._sink.flush()

    @property
    def closed(self) -> bool:
        return self._sink.closed.is_set()

    def close(self) -> None:
        if self._sink.closed.is_set():
            return
        try:
            self._finalizer()  # flush, fsync and close the file, once
        finally:
            self._flusher.join()

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_history(path: str | os.PathLike[str], *, allow_torn_tail: bool = True) -> Iterator[Op]:
    """Yield the ops of a history.jsonl.

    A corrupt line raises HistoryFormatError naming it. An unparseable *last* line with no
    trailing newline is what an interrupted writer leaves behind; with allow_torn_tail it is
    skipped (the ops before it are intact).
    """
    with open(path, "rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    torn_candidate = not data.endswith(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last = number == len(lines)
        try:
            raw = json.loads(line)
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            yield Op.from_json(raw)
        except (ValueError, TypeError) as exc:
            if is_last and torn_candidate and allow_torn_tail:
                return
            raise HistoryFormatError(path, number, str(exc)) from None


def read_history(path: str | os.PathLike[str], *, allow_torn_tail: bool = True) -> list[Op]:
    return list(iter_history(path, allow_torn_tail=allow_torn_tail))
