"""One pass over history.jsonl that keeps what the report draws, and nothing more.

A history can hold millions of ops, so the pass keeps compact arrays for every client
operation (invoke time, completion time, outcome, function, process), per-partition write
and read facts, and the fault periods; full ops are kept only where the report shows them
as text: the witnesses of anomalies, a few ops of context around each, and the timeline's
windows. Times are seconds since the first op of the history.

Keys in the history are abstract partition keys (one per topic-partition, see
harness/history.py), so "partition" and "key" mean the same thing here.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from harness.history import Op, iter_history
from harness.report.faults import FaultPeriod, FaultTracker, NemesisEvent

OUTCOMES = ("ok", "fail", "info", "open")  # "open": invoked, never completed in the history
_OUTCOME_CODE = {name: code for code, name in enumerate(OUTCOMES)}


@dataclass
class ClientOps:
    """One row per client invocation, in invocation order."""

    invoke_index: np.ndarray  # int64, history index of the invoke
    complete_index: np.ndarray  # int64, history index of the completion, -1 if open
    process: np.ndarray  # int64
    f_code: np.ndarray  # int16, into f_names
    outcome: np.ndarray  # int8, into OUTCOMES
    start_s: np.ndarray  # float64
    end_s: np.ndarray  # float64; the end of the history for open ops
    f_names: list[str]

    def __len__(self) -> int:
        return len(self.invoke_index)


@dataclass
class PartitionFacts:
    """What was written to and read from one partition (key)."""

    key: int
    write_time_s: np.ndarray  # ack time of each acknowledged send
    write_offset: np.ndarray
    read_time_s: np.ndarray  # completion time of each poll that returned records of this key
    read_max_offset: np.ndarray  # the highest offset that poll returned
    records_read: int
    # Acknowledged writes no poll ever returned: (offset, value, ack time, op index)
    never_read: list[tuple[int | None, object, float, int]]
    # Unseen count over time: +1 at each ack, -1 when that value is first read (not before ack)
    unseen_event_time_s: np.ndarray
    unseen_event_delta: np.ndarray


@dataclass
class TimelinePair:
    invoke: Op
    completion: Op | None  # None: never completed in the history


@dataclass
class HistoryDigest:
    op_count: int
    client_ops: ClientOps
    duration_s: float
    first_time_ns: int
    partitions: list[PartitionFacts]
    fault_periods: list[FaultPeriod]
    nemesis_events: list[NemesisEvent]
    kept_ops: dict[int, Op]  # witnesses and their context, by history index
    timeline_pairs: list[TimelinePair]  # the ops inside the timeline windows
    timeline_windows: list[tuple[int, int]]  # inclusive history-index ranges shown
    processes: list[int] = field(default_factory=list)


def count_lines(path: Path) -> int:
    count = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            count += chunk.count(b"\n")
    return count


def timeline_windows(focus: list[int], op_count: int, budget_ops: int) -> list[tuple[int, int]]:
    """History-index ranges the timeline shows: everything if it fits the budget, else
    windows centred on the focus ops (the witnesses), else the start of the run."""
    if op_count <= budget_ops:
        return [(0, max(op_count - 1, 0))]
    centres = sorted(list(dict.fromkeys(focus))[:10])
    if not centres:
        return [(0, budget_ops - 1)]
    half = max(budget_ops // (2 * len(centres)), 5)
    windows: list[tuple[int, int]] = []
    for centre in centres:
        low, high = max(centre - half, 0), centre + half
        if windows and low <= windows[-1][1] + 1:
            windows[-1] = (windows[-1][0], max(windows[-1][1], high))
        else:
            windows.append((low, high))
    return windows


def _overlaps(windows: list[tuple[int, int]], starts: list[int], low: int, high: int) -> bool:
    position = bisect.bisect_right(starts, high) - 1
    return position >= 0 and windows[position][1] >= low


class _PartitionBuilder:
    __slots__ = ("write_time", "write_offset", "read_time", "read_max", "records", "acked", "first_read")

    def __init__(self) -> None:
        self.write_time: list[float] = []
        self.write_offset: list[int] = []
        self.read_time: list[float] = []
        self.read_max: list[int] = []
        self.records = 0
        self.acked: dict[object, tuple[int | None, float, int]] = {}  # value -> (offset, time, op index)
        self.first_read: dict[object, float] = {}

    def build(self, key: int) -> PartitionFacts:
        never_read = []
        times: list[float] = []
        deltas: list[int] = []
        for value, (offset, ack_time, op_index) in self.acked.items():
            times.append(ack_time)
            deltas.append(1)
            seen_at = self.first_read.get(value)
            if seen_at is None:
                never_read.append((offset, value, ack_time, op_index))
            else:
                times.append(max(seen_at, ack_time))
                deltas.append(-1)
        never_read.sort(key=lambda item: (item[0] is None, item[0] if item[0] is not None else 0))
        return PartitionFacts(
            key=key,
            write_time_s=np.asarray(self.write_time, dtype=np.float64),
            write_offset=np.asarray(self.write_offset, dtype=np.int64),
            read_time_s=np.asarray(self.read_time, dtype=np.float64),
            read_max_offset=np.asarray(self.read_max, dtype=np.int64),
            records_read=self.records,
            never_read=never_read,
            unseen_event_time_s=np.asarray(times, dtype=np.float64),
            unseen_event_delta=np.asarray(deltas, dtype=np.int64),
        )


def _hashable(value: object) -> object:
    """Values are usually ints; anything else is compared by its JSON text."""
    if isinstance(value, (int, str, float, type(None))):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def digest_history(
    path: str | Path,
    *,
    focus_indices: Iterable[int] = (),
    window_centres: Iterable[int] | None = None,
    timeline_budget_ops: int = 2000,
    context_ops: int = 3,
) -> HistoryDigest:
    """Read a history once. `focus_indices` are the ops to keep in full (the witnesses);
    the timeline's windows are centred on the first ten `window_centres` (most important
    first; by default the focus ops themselves)."""
    path = Path(path)
    focus = [int(i) for i in focus_indices]
    centres = focus if window_centres is None else [int(i) for i in window_centres]
    op_count_estimate = count_lines(path)
    windows = timeline_windows(centres, op_count_estimate, timeline_budget_ops)
    window_starts = [w[0] for w in windows]
    keep: set[int] = set()
    for index in focus:
        keep.update(range(index - context_ops, index + context_ops + 1))

    invoke_index: list[int] = []
    complete_index: list[int] = []
    process_ids: list[int] = []
    f_codes: list[int] = []
    outcomes: list[int] = []
    start_times: list[float] = []
    end_times: list[float] = []
    f_names: dict[str, int] = {}
    pending: dict[int, tuple[int, Op]] = {}  # process -> (row, invoke op)
    partitions: dict[int, _PartitionBuilder] = {}
    faults = FaultTracker()
    kept_ops: dict[int, Op] = {}
    timeline_pairs: list[TimelinePair] = []
    first_ns: int | None = None
    last_s = 0.0
    op_count = 0

    for op in iter_history(path):
        op_count += 1
        if first_ns is None:
            first_ns = op.time_ns
        time_s = (op.time_ns - first_ns) / 1e9
        last_s = max(last_s, time_s)
        if op.index in keep:
            kept_ops[op.index] = op
        if not op.is_client:
            faults.add(op, time_s)
            continue
        process = op.process
        if op.type == "invoke":
            row = len(invoke_index)
            code = f_names.setdefault(op.f, len(f_names))
            invoke_index.append(op.index)
            complete_index.append(-1)
            process_ids.append(process)  # type: ignore[arg-type]
            f_codes.append(code)
            outcomes.append(_OUTCOME_CODE["open"])
            start_times.append(time_s)
            end_times.append(time_s)
            pending[process] = (row, op)  # type: ignore[index]
            continue
        entry = pending.pop(process, None)  # type: ignore[arg-type]
        if entry is None:
            continue  # a completion without an invoke: nothing to pair it with
        row, invoke = entry
        complete_index[row] = op.index
        outcomes[row] = _OUTCOME_CODE[op.type]
        end_times[row] = time_s
        if invoke.index in keep:
            kept_ops[op.index] = op
        if op.index in keep:
            kept_ops[invoke.index] = invoke
        if _overlaps(windows, window_starts, invoke.index, op.index):
            timeline_pairs.append(TimelinePair(invoke, op))
        if op.type == "ok" and isinstance(op.value, list):
            _record_micro_ops(op, time_s, partitions)

    for row, invoke in pending.values():
        end_times[row] = last_s
        if _overlaps(windows, window_starts, invoke.index, invoke.index + op_count):
            timeline_pairs.append(TimelinePair(invoke, None))
    timeline_pairs.sort(key=lambda pair: pair.invoke.index)

    client_ops = ClientOps(
        invoke_index=np.asarray(invoke_index, dtype=np.int64),
        complete_index=np.asarray(complete_index, dtype=np.int64),
        process=np.asarray(process_ids, dtype=np.int64),
        f_code=np.asarray(f_codes, dtype=np.int16),
        outcome=np.asarray(outcomes, dtype=np.int8),
        start_s=np.asarray(start_times, dtype=np.float64),
        end_s=np.asarray(end_times, dtype=np.float64),
        f_names=list(f_names),
    )
    return HistoryDigest(
        op_count=op_count,
        client_ops=client_ops,
        duration_s=last_s,
        first_time_ns=first_ns or 0,
        partitions=[partitions[key].build(key) for key in sorted(partitions, key=lambda k: (not isinstance(k, int), str(k)))],
        fault_periods=faults.finish(last_s),
        nemesis_events=faults.events,
        kept_ops=kept_ops,
        timeline_pairs=timeline_pairs,
        timeline_windows=windows,
        processes=sorted(set(process_ids)),
    )


def _record_micro_ops(op: Op, time_s: float, partitions: dict[int, _PartitionBuilder]) -> None:
    for mop in op.value:
        if not isinstance(mop, list) or not mop:
            continue
        if mop[0] == "send" and len(mop) == 3 and isinstance(mop[2], list) and len(mop[2]) == 2:
            key = mop[1]
            offset, value = mop[2]
            builder = partitions.get(key) or partitions.setdefault(key, _PartitionBuilder())
            builder.acked.setdefault(_hashable(value), (offset if isinstance(offset, int) else None, time_s, op.index))
            if isinstance(offset, int):
                builder.write_time.append(time_s)
                builder.write_offset.append(offset)
        elif mop[0] == "poll" and len(mop) == 2 and isinstance(mop[1], dict):
            for key, records in mop[1].items():
                if not records:
                    continue
                builder = partitions.get(key) or partitions.setdefault(key, _PartitionBuilder())
                highest = None
                first_read = builder.first_read
                for record in records:
                    if not isinstance(record, list) or len(record) != 2:
                        continue
                    offset, value = record
                    builder.records += 1
                    first_read.setdefault(_hashable(value), time_s)
                    if isinstance(offset, int) and (highest is None or offset > highest):
                        highest = offset
                if highest is not None:
                    builder.read_time.append(time_s)
                    builder.read_max.append(highest)
