"""The eos checks stated again in plain Python over history ops, one rule at a time: the
reference checkers/eos.py is tested against (counts per anomaly). Output values are
`input value << COPY_ID_BITS | copy id` (workloads/eos.py's history contract)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

from checkers.eos import COPY_ID_BITS
from harness.history import Op


def _completions(ops: Iterable[Op]) -> list[Op]:
    return [op for op in ops if op.type != "invoke" and op.process != "nemesis"]


def _poll_records(value: Any) -> list[tuple[int, int, int]]:
    out = []
    for mop in value or []:
        if mop and mop[0] == "poll" and len(mop) > 1:
            for k, pairs in mop[1].items():
                out += [(int(k), o, v) for o, v in pairs]
    return out


def _send_records(value: Any) -> list[tuple[int, int | None, int]]:
    out = []
    for mop in value or []:
        if mop and mop[0] == "send":
            payload = mop[2]
            out.append((mop[1], payload[0], payload[1]) if isinstance(payload, list) else (mop[1], None, payload))
    return out


def eos_counts(ops: Iterable[Op]) -> dict[str, int] | None:
    """anomaly → count, or None when no verifier read completed (the verdict is unknown)."""
    done = _completions(ops)
    verifier = [op for op in done if op.f == "poll" and op.type == "ok"]
    if not verifier:
        return None
    input_keys = {k for op in done if op.f == "send" for k, _, _ in _send_records(op.value)}
    input_keys |= {k for op in done if op.f == "copy" for k, _, _ in _poll_records(op.value)}
    visible = {r for op in verifier for r in _poll_records(op.value)}  # (key, offset, value)
    seen_in = Counter(v for k, _, v in visible if k in input_keys)
    seen_out = Counter(v >> COPY_ID_BITS for k, _, v in visible if k not in input_keys)
    visible_out = {r for r in visible if r[0] not in input_keys}
    acked = {v for op in done if op.f == "send" and op.type == "ok" for _, _, v in _send_records(op.value)}
    counts: dict[str, int] = defaultdict(int)
    for value in acked | set(seen_in):
        if seen_out[value] == 0:
            counts["eos-missing"] += 1
        elif seen_out[value] > max(1, seen_in[value]):
            counts["eos-duplicate"] += 1
    for op in done:
        if op.f != "copy":
            continue
        sends = [r for r in _send_records(op.value) if r[1] is not None]
        shown = sum(1 for r in sends if r in visible_out)
        if op.type == "fail":
            counts["G1a"] += shown
        elif sends and ((op.type == "ok" and shown < len(sends)) or (op.type == "info" and 0 < shown < len(sends))):
            counts["eos-partial"] += 1
    return {name: n for name, n in counts.items() if n}
