"""Operations written the way a person reads them.

    send k2=101                      (invoke)
    send k2=101 → offset 14          (ok)
    poll → k2: 14=101 15=102         (ok)

Long polls are shortened, always saying how many records were left out.
"""

from __future__ import annotations

import json
from typing import Any

from harness.history import Op

MAX_RECORDS_SHOWN = 6
MAX_TEXT_CHARS = 240


def _clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _send_text(mop: list[Any]) -> str:
    if len(mop) < 3:
        return "send"
    key, payload = mop[1], mop[2]
    if isinstance(payload, list) and len(payload) == 2:
        offset, value = payload
        where = "offset unknown" if offset is None else f"offset {offset}"
        return f"send k{key}={value} → {where}"
    return f"send k{key}={payload}"


def _poll_text(mop: list[Any]) -> str:
    if len(mop) < 2 or not isinstance(mop[1], dict):
        return "poll"
    if not mop[1]:
        return "poll → nothing"
    parts = []
    for key in sorted(mop[1], key=str):
        records = mop[1][key] or []
        shown = " ".join(
            f"{r[0]}={r[1]}" if isinstance(r, list) and len(r) == 2 else str(r) for r in records[:MAX_RECORDS_SHOWN]
        )
        more = len(records) - MAX_RECORDS_SHOWN
        suffix = f" … (+{more} more)" if more > 0 else ""
        parts.append(f"k{key}: {shown}{suffix}" if records else f"k{key}: nothing")
    return "poll → " + "; ".join(parts)


def describe_micro_op(mop: Any) -> str:
    if isinstance(mop, list) and mop:
        if mop[0] == "send":
            return _send_text(mop)
        if mop[0] == "poll":
            return _poll_text(mop)
    return json.dumps(mop, default=str)


def describe_value(f: str, value: Any) -> str:
    """The value of an op of function `f`, readable and at most MAX_TEXT_CHARS long."""
    if value is None:
        return ""
    is_micro_ops = isinstance(value, list) and all(isinstance(m, list) and m and m[0] in ("send", "poll") for m in value)
    if is_micro_ops and value:
        return _clip(", ".join(describe_micro_op(m) for m in value))
    if isinstance(value, str):
        return _clip(value)
    return _clip(json.dumps(value, default=str, separators=(", ", ": ")))


def describe_action(op: Op) -> str:
    """What the op did: `send k2=101 → offset 14`, plus the error if there is one."""
    value = describe_value(op.f, op.value)
    # Micro-op texts already start with their function (send/poll): don't say it twice.
    text = value if value.startswith(op.f) else f"{op.f} {value}".rstrip()
    if op.error is not None:
        text += f" (error: {_clip(describe_value('', op.error), 120)})"
    return text


def describe_op(op: Op) -> str:
    """`#17 p3 ok send k2=101 → offset 14`: index, process, type and what it did."""
    who = f"p{op.process}" if op.is_client else "nemesis"
    return f"#{op.index} {who} {op.type} {describe_action(op)}"
