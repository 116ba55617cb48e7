"""Hand-built histories for checker tests: each helper appends an invocation and its
completion, as a client would record them, and returns the completion's index."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from harness.history import HistoryWriter, Op
from harness.history_parquet import convert_history


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.time_ns = 0

    def _next(self) -> tuple[int, int]:
        self.time_ns += 1_000_000
        return len(self.ops), self.time_ns

    def invoke(self, process: int, f: str, value: Any = None, **extra: Any) -> int:
        index, t = self._next()
        self.ops.append(Op(index, t, "invoke", process, f, value, None, dict(extra)))
        return index

    def complete(self, process: int, f: str, typ: str, value: Any = None, error: Any = None, **extra: Any) -> int:
        index, t = self._next()
        self.ops.append(Op(index, t, typ, process, f, value, error, dict(extra)))
        return index

    def op(self, process: int, f: str, invoke_value: Any, typ: str, value: Any, **extra: Any) -> int:
        self.invoke(process, f, invoke_value)
        return self.complete(process, f, typ, value, **extra)

    # Shapes from Jepsen's Kafka test.
    def send(self, process: int, key: int, value: int, offset: int | None, typ: str = "ok") -> int:
        done = [["send", key, [offset, value]]] if offset is not None else [["send", key, value]]
        return self.op(process, "send", [["send", key, value]], typ, done)

    def poll(self, process: int, records: dict[int, list[tuple[int, int]]], typ: str = "ok", **extra: Any) -> int:
        value = [["poll", {str(k): [list(r) for r in rs] for k, rs in records.items()}]]
        return self.op(process, "poll", [["poll"]], typ, value, **extra)

    def txn(self, process: int, mops: list[list[Any]], typ: str = "ok", **extra: Any) -> int:
        """mops: ["send", k, v, offset] or ["poll", {k: [(o, v), ...]}]."""
        invoke, done = [], []
        for mop in mops:
            if mop[0] == "send":
                _, k, v, o = mop
                invoke.append(["send", k, v])
                done.append(["send", k, [o, v]])
            else:
                invoke.append(["poll"])
                done.append(["poll", {str(k): [list(r) for r in rs] for k, rs in mop[1].items()}])
        return self.op(process, "txn", invoke, typ, done, **extra)

    def assign(self, process: int, keys: Iterable[int], typ: str = "ok") -> int:
        return self.op(process, "assign", list(keys), typ, list(keys))

    def subscribe(self, process: int, keys: Iterable[int], typ: str = "ok") -> int:
        return self.op(process, "subscribe", list(keys), typ, list(keys))

    def process(self, process: int, records: list[tuple[int, int, int]], typ: str = "ok") -> int:
        """records: (key, offset, value)."""
        return self.op(process, "process", None, typ, [["process", k, [o, v]] for k, o, v in records])

    def commit(self, process: int, offsets: dict[int, int], typ: str = "ok", group: str = "g") -> int:
        return self.op(process, "commit", None, typ, {str(k): o for k, o in offsets.items()}, group=group)

    def crash(self, process: int) -> int:
        return self.op(process, "crash", None, "info", None)

    def write(self, path: Path) -> Path:
        with HistoryWriter(path) as writer:
            for op in self.ops:
                writer.append(op)
        return path


def to_parquet(histories: dict[str, History], root: Path) -> Path:
    """Write each history as history.jsonl and convert it into root/parquet/run=<id>/."""
    out = root / "parquet"
    for run, history in histories.items():
        jsonl = history.write(root / f"{run}.jsonl")
        convert_history(jsonl, out, run)
    return out
