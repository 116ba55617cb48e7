"""`--fault-schedule FILE`: a simulated run's fault schedule given as data.

The file is JSON: either a list of ops `{"at_s": seconds, "f": "start-kill", "value": ...}`
(times from the main phase start), or an object whose `ops` is that list (what `logquake
hunt` and `logquake.strategies.schedule_json` write; its `faults` are for people). The run
copies it into its directory as `fault-schedule.json`, so the directory replays alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCHEDULE_FILE = "fault-schedule.json"


class ScheduleError(ValueError):
    """The schedule file is unreadable or malformed; the message names the file and what."""


def read_schedule(path: str | os.PathLike[str]) -> tuple[list[Any], str]:
    """The file's ops as harness.sim.run.FaultOp, and its text."""
    from harness.sim.run import FaultOp

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScheduleError(f"--fault-schedule {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ScheduleError(f"--fault-schedule {path}: not JSON ({exc})") from None
    items = raw.get("ops") if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise ScheduleError(f"--fault-schedule {path}: expected a list of ops or an object with an 'ops' list")
    ops = []
    for i, item in enumerate(items):
        try:
            ops.append(FaultOp.from_json(item))
        except ValueError as exc:
            raise ScheduleError(f"--fault-schedule {path}: op {i}: {exc}") from None
    return ops, text


def packages_needed(ops: list[Any]) -> list[str]:
    """The nemesis packages a schedule's ops name (start-kill -> kill), in first-use order."""
    names: list[str] = []
    for op in ops:
        for prefix in ("start-", "stop-"):
            if op.f.startswith(prefix) and op.f[len(prefix):] not in names:
                names.append(op.f[len(prefix):])
    return names
