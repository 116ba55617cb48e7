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

The writer flushes every line as it is appended, so a crashed harness loses nothing that was
recorded; the reader names the line of any corrupt record and can tolerate a torn last line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

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


class HistoryWriter:
    """Appends ops to history.jsonl, one line each, flushed as written."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._fsync = fsync
        self.count = 0

    def append(self, op: Op) -> None:
        self._file.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

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
