"""`--fault-schedule FILE`: a simulated run's fault schedule given as data.

The file is JSON: either a list of ops `{"at_s": seconds, "f": "start-kill", "value": ...}`
(times from the main phase start), or an object whose `ops` is that list (what `logquake
hunt` and `logquake.strategies.schedule_json` write; its `faults` are for people). The run
copies it into its directory as `fault-schedule.json`, so the directory replays alone.

The ops name their targets as the packages take them: broker ids, and with a metadata quorum
(`--controllers 3` or 5) controller node ids (1000, 1001, ...) for kill, pause, clock and
partition (`"nodes"`, a partition's `"components"` and `"blocked"` pairs) and in link faults
(`"links"`, `"node"`), or live specs (`primaries`, `primary`, `active-controller`) resolved
when the fault starts. `check_targets` refuses a schedule naming a node the run lacks before
the run starts (a package would otherwise record the failed fault and the run go on).
Files written before controllers were targets name only brokers and replay as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCHEDULE_FILE = "fault-schedule.json"
FIRST_CONTROLLER_ID = 1000  # cluster.sim.cluster.CONTROLLER_ID
# Link fault ends that are not node ids (nemeses.link_faults): the first controller, the client host.
LINK_HOST_NAMES = ("controller", "client")


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


def _ids(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def check_targets(ops: list[Any], brokers: int, controllers: int = 1, path: str | os.PathLike[str] = "") -> None:
    """ScheduleError naming the first op that targets a node the run does not have: not one
    of its `brokers` (0..brokers-1) nor of its `controllers` (1000...); a disk fault on a
    controller (it has no disk fault door) is refused too."""
    broker_ids = set(range(brokers))
    controller_ids = set(range(FIRST_CONTROLLER_ID, FIRST_CONTROLLER_ID + controllers))
    for i, op in enumerate(ops):
        if not op.f.startswith("start-") or not isinstance(op.value, dict):
            continue
        kind, value = op.f[len("start-"):], op.value
        named: list[Any] = list(value.get("nodes") or [])
        named += [n for c in value.get("components") or [] for n in c]
        named += [n for key in ("blocked", "blocked_data", "links") for pair in value.get(key) or [] for n in pair]
        if "node" in value:
            named.append(value["node"])
        allowed = broker_ids if kind == "disk" else broker_ids | controller_ids
        bad = sorted({str(n) for n in named if not (n in allowed or (kind.startswith("link-") and (
            n in LINK_HOST_NAMES or (isinstance(n, str) and n.startswith("127.")))))})
        if bad:
            where = f"brokers {_ids(0, brokers)}" + ("" if kind == "disk" else
                                                     f", controllers {_ids(FIRST_CONTROLLER_ID, controllers)}")
            raise ScheduleError(f"--fault-schedule {path}: op {i} ({op.f} at {op.at_s:g} s) targets {', '.join(bad)}, which the run does not "
                                f"have ({where}{'; a disk fault acts on brokers only' if kind == 'disk' else ''})")
