"""Every per-key check in one vectorised pass over the rows of one (run, key).

All Kafka anomalies except the cycle search are questions about one key (one partition):
its version order, lost writes, duplicates, inconsistent offsets, the per-(process, key)
external poll and send order, the per-(op, key) internal order, and the delivery checks.
The fused pipeline gives a Python task either one key-bucket file of a run, which holds all
rows of its keys (`columns_from_history`), or, for an older layout, what a shuffle by (run,
key) sent it (`check_partition`, `columns_from_code`); `key_groups` splits the rows into keys
and `check_group` checks each. This module is plain
numpy/pyarrow, so the rules read without Spark in the way (tests/checkers/dataframe_oracle/
states them again one anomaly at a time as DataFrames: the reference it is tested against).

What a key cannot see alone comes in `RunFacts`, from the small pre-pass in `prepass.py`:
ops that write several keys (whether an info one committed, whether an op "links" keys for
the cycle search) and the assign/subscribe events that reset a process's positions.

A group answers with rows of `OUTPUT_SCHEMA`, tagged by `kind`:
  witness       the first MAX_WITNESSES rows of one anomaly in this key, by (sort, detail,
                op indices)
  count         how many rows of that anomaly this key holds
  precommitted  (op, key, smallest value) of an op that read its own send in this key; the
                anomaly is per op, across keys, so the driver combines them
  edge          a ww/wr dependency edge the cycle search may need (see cycles.py)
  processed     how many ok process records this key holds (unprocessed applies to a run
                only if it processed anything)
  error         a check family that raised; its name and message
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

MAX_WITNESSES = 8
MAX_WITNESS_OPS = 8
DEFAULT_GROUP = "default"

# The columns the shuffle sends (a run not in key buckets): the history's, with type, f,
# mop_f, rebalanced, row_in_op and invoke_index packed into `code` (see CODE_FIELDS) so that
# fewer and cheaper columns cross from the JVM (that crossing was most of the per-key pass's
# cost). `group` may be left out when no row is a process or commit record.
INPUT_COLUMNS = ("run", "key", "process", "op_index", "offset", "value", "code", "group")
OUTPUT_SCHEMA = ("run string, kind string, anomaly string, sort double, op_indices array<bigint>, detail string, "
                 "n bigint, src bigint, dst bigint, rel string, key bigint, "
                 "value bigint, src_invoke bigint, src_type string, dst_invoke bigint, dst_type string")
_ARROW_TYPES = {"string": pa.string(), "double": pa.float64(), "bigint": pa.int64(),
                "array<bigint>": pa.list_(pa.int64())}
ARROW_SCHEMA = pa.schema([(name, _ARROW_TYPES[typ]) for name, typ in
                          (part.strip().split(" ") for part in OUTPUT_SCHEMA.split(","))])

_EMPTY_I64 = np.zeros(0, np.int64)
# code = type + 8 × f + 64 × mop_f + 512 × rebalanced + 2^10 × row_in_op + 2^32 × (op_index −
# invoke_index), where each string is its position in these tuples (OTHER for any other
# value or null), and rebalanced is 1 when true or null (the DataFrame oracle's
# `where(~rebalanced)` drops null too). row_in_op must be below 2^22 and the invocation at
# most 2^31 − 1 events before its completion (the pass refuses a history where not).
TYPES = ("ok", "info", "fail", "invoke")
OK, INFO, FAIL, INVOKE = range(4)
FS = ("send", "poll", "txn")
F_SEND, F_POLL, F_TXN = range(3)
MOPS = ("send", "poll", "process", "commit")
MOP_SEND, MOP_POLL, MOP_PROCESS, MOP_COMMIT = range(4)
OTHER = 7
CODE_FIELDS = (("type", TYPES, 1), ("f", FS, 8), ("mop_f", MOPS, 64))
REBALANCED_BIT = 512
ROW_SHIFT, ROW_LIMIT = 10, 1 << 22
INVOKE_SHIFT, INVOKE_LIMIT = 32, 1 << 31


@dataclass
class RunFacts:
    """What one run's key groups need to know beyond their own rows."""

    committed_info_ops: np.ndarray = field(default_factory=lambda: _EMPTY_I64)  # sorted
    linking_ops: np.ndarray = field(default_factory=lambda: _EMPTY_I64)  # sorted: write ≥2 keys, or write and read
    writing_ops: np.ndarray = field(default_factory=lambda: _EMPTY_I64)  # sorted: multi-row ops that write
    # process → (sorted op indices of its ok/info assign/subscribe ops, their key sets)
    restricts: dict[Any, tuple[np.ndarray, list[frozenset[int]]]] = field(default_factory=dict)

    def resets(self, process: Any, key: int) -> np.ndarray:
        """The op indices at which `process` dropped `key` from its assignment."""
        found = self.restricts.get(process)
        if found is None:
            return _EMPTY_I64
        ops, key_sets = found
        return ops[np.fromiter((key not in keys for keys in key_sets), bool, len(key_sets))]


class MalformedHistory(ValueError):
    """A record the checks cannot judge; the message names the op."""


def _isin_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    if len(sorted_set) == 0 or len(values) == 0:
        return np.zeros(len(values), bool)
    pos = np.searchsorted(sorted_set, values)
    pos[pos == len(sorted_set)] = 0
    return sorted_set[pos] == values


def _ints(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values (0 where null) and its validity."""
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    return pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False), np.asarray(valid, bool)


def _unique_sorted(a: np.ndarray) -> np.ndarray:
    """np.unique of an already sorted array, without sorting or hashing it again."""
    return a[_group_starts(a)] if len(a) else a


def _unique(a: np.ndarray) -> np.ndarray:
    """np.unique by sorting: numpy 2's hashing unique measured 3x slower on a key's ~10^5-10^6
    mostly distinct values (bench_checkers history)."""
    return _unique_sorted(np.sort(a))


def _group_starts(*sorted_cols: np.ndarray) -> np.ndarray:
    """Start positions of runs of equal tuples in already sorted columns."""
    n = len(sorted_cols[0])
    if n == 0:
        return _EMPTY_I64
    change = np.zeros(n, bool)
    change[0] = True
    for col in sorted_cols:
        change[1:] |= col[1:] != col[:-1]
    return np.flatnonzero(change)


class _Masked(dict):
    """The columns of `base` under `mask`, each copied out when first asked for: a check
    reads a few of a key's columns, and copying all of them at every selection was a tenth
    of the per-key pass."""

    def __init__(self, base: dict[str, np.ndarray], mask: np.ndarray) -> None:
        super().__init__()
        self.base, self.mask = base, mask

    def __missing__(self, name: str) -> np.ndarray:
        col = self.base[name][self.mask]
        self[name] = col
        return col

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if dict.__contains__(self, name) or name in self.base else default

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.base


class Rows:
    """A column subset of the group as numpy arrays, sorted by (op_index, row_in_op)."""

    def __init__(self, cols: dict[str, np.ndarray], mask: np.ndarray | None = None) -> None:
        self.cols = cols if mask is None else _Masked(cols, mask)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["cols"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self) -> int:
        return len(self.cols["op"])

    def where(self, mask: np.ndarray) -> "Rows":
        return Rows(self.cols, mask)


class KeyData:
    """The shared per-key structures (the DataFrame oracle's frames.py, for one key): reads, writes, committed ops,
    evidence writes, the log, its slots and the value → dense index map."""

    def __init__(self, key: int, cols: dict[str, np.ndarray], facts: RunFacts) -> None:
        """`cols`: one key's rows (COLUMNS; `group` may be missing when no row has one),
        invocations left out, sorted by (op, row); `key_groups` makes them."""
        self.key = int(key)
        self.facts = facts
        self.all = Rows(cols)
        f, mop = cols["f"], cols["mop"]
        read_mask = ((f == F_POLL) | (f == F_TXN)) & (mop == MOP_POLL)
        write_mask = ((f == F_SEND) | (f == F_TXN)) & (mop == MOP_SEND)
        bad = np.flatnonzero((read_mask | write_mask | (mop == MOP_PROCESS)) & ~cols["has_value"])
        if len(bad):
            raise MalformedHistory(f"op {int(cols['op'][bad[0]])}: a {MOPS[mop[bad[0]]]} record of key {self.key} "
                                   "has no value")
        self.reads = self.all.where(read_mask)
        self.writes = self.all.where(write_mask)
        r, w = self.reads, self.writes
        self.ok_read_values = _unique(r.value[r.type == OK])
        info = w.type == INFO
        info_committed = info & (_isin_sorted(w.value, self.ok_read_values) | _isin_sorted(w.op, facts.committed_info_ops))
        committed_ops = _unique_sorted(w.op[(w.type == OK) | info_committed])
        self.write_committed = _isin_sorted(w.op, committed_ops)
        # Every committed send with a real offset is evidence of the log, whatever the acks
        # setting (as in Jepsen): an offset reused after a failover is inconsistent-offsets,
        # and whether that is allowed is the claims' business, never the detector's. A
        # negative offset is no offset (librdkafka reports -1 for an acks=0 send).
        self.write_placed = self.write_committed & w.has_off & (w.offset >= 0)
        evidence = self.writes.where(self.write_placed)
        # (offset, value, op) of every record that is evidence of the log.
        read_off = r.where(r.has_off)
        self.log_offset = np.concatenate([read_off.offset, evidence.offset])
        self.log_value = np.concatenate([read_off.value, evidence.value])
        self.log_op = np.concatenate([read_off.op, evidence.op])
        # The log: distinct (offset, value), sorted.
        order = np.lexsort((self.log_value, self.log_offset))
        lo, lv = self.log_offset[order], self.log_value[order]
        keep = _group_starts(lo, lv)
        self.L_offset, self.L_value = lo[keep], lv[keep]
        starts = _group_starts(self.L_offset)
        self.slot_offset = self.L_offset[starts]
        self.slot_rep = self.L_value[starts]  # the smallest value of the slot
        self.slot_n = np.diff(np.append(starts, len(self.L_offset)))
        self.slot_idx = np.arange(len(starts), dtype=np.int64)
        # by_value: value → the last slot index it represents.
        order = np.lexsort((self.slot_idx, self.slot_rep))
        reps, idxs = self.slot_rep[order], self.slot_idx[order]
        last = np.append(_group_starts(reps)[1:], len(reps)) - 1 if len(reps) else _EMPTY_I64
        self.bv_value, self.bv_idx = reps[last], idxs[last]

    def idx(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Dense indices of `values` and whether each is known."""
        if len(self.bv_value) == 0:
            return np.zeros(len(values), np.int64), np.zeros(len(values), bool)
        pos = np.minimum(np.searchsorted(self.bv_value, values), len(self.bv_value) - 1)
        known = self.bv_value[pos] == values
        return np.where(known, self.bv_idx[pos], 0), known

    def delta(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Jepsen's delta idx(b) − idx(a), 1 when either is unknown."""
        ia, ka = self.idx(a)
        ib, kb = self.idx(b)
        return np.where(ka & kb, ib - ia, 1)

    def slot_idx_at(self, offsets: np.ndarray) -> list[int | None]:
        known = _isin_sorted(offsets, self.slot_offset)
        pos = np.searchsorted(self.slot_offset, offsets)
        return [int(self.slot_idx[p]) if k else None for p, k in zip(pos, known)]

    def first_per_value(self, rows: Rows) -> tuple[np.ndarray, np.ndarray, "Offsets"]:
        """Per distinct value of `rows`: the smallest op index and the smallest known offset."""
        order = np.lexsort((rows.op, rows.value))
        values, ops = rows.value[order], rows.op[order]
        starts = _group_starts(values)
        off = np.where(rows.has_off, rows.offset, _NO_OFFSET)[order]
        min_off = np.minimum.reduceat(off, starts) if len(starts) else _EMPTY_I64
        return values[starts], ops[starts], Offsets(min_off)

    @cached_property
    def sent_ok(self) -> tuple[np.ndarray, np.ndarray, "Offsets"]:
        w = self.writes
        return self.first_per_value(w.where(w.type == OK))


_NO_OFFSET = np.iinfo(np.int64).max


class Offsets:
    """Offsets where `_NO_OFFSET` means unknown; indexing gives an int or None."""

    def __init__(self, raw: np.ndarray) -> None:
        self.raw = raw

    def __getitem__(self, i: int) -> int | None:
        o = self.raw[i]
        return None if o == _NO_OFFSET else int(o)


class Emitter:
    """Collects one group's output rows."""

    def __init__(self, run: str, key: int | None) -> None:
        self.run = run
        self.key = key
        self.rows: list[dict[str, Any]] = []

    def anomaly(self, name: str, sort: np.ndarray, ops: Callable[[int], list[int]],
                detail: Callable[[int], dict[str, Any]]) -> None:
        """Rows 0..len(sort)-1 of one anomaly; `ops(i)` and `detail(i)` are only asked for the
        candidates to be witnesses (the smallest sorts, ties included). Witnesses are ordered
        by (sort, detail, op indices), as pipeline._ranked orders them."""
        n = len(sort)
        if n == 0:
            return
        self.rows.append({"kind": "count", "anomaly": name, "n": n})
        sort = np.asarray(sort, np.float64)
        if n > MAX_WITNESSES:
            cut = np.partition(sort, MAX_WITNESSES - 1)[MAX_WITNESSES - 1]
            candidates = np.flatnonzero(sort <= cut)
        else:
            candidates = np.arange(n)
        found = sorted((float(sort[i]), to_json(detail(int(i))), [int(x) for x in ops(int(i)) if x is not None])
                       for i in candidates)[:MAX_WITNESSES]
        for s, text, op_indices in found:
            self.rows.append({"kind": "witness", "anomaly": name, "sort": s, "detail": text, "op_indices": op_indices})

    def table(self) -> pa.Table:
        for row in self.rows:
            row["run"] = self.run
        return pa.Table.from_pylist(self.rows, schema=ARROW_SCHEMA)


def to_json(detail: dict[str, Any]) -> str:
    """Spark's to_json of a struct: fields in order, nulls left out, no spaces."""
    return json.dumps({k: v for k, v in detail.items() if v is not None}, separators=(",", ":"), ensure_ascii=False)


# ---- the checks: each takes the key's data and the emitter --------------------------------

def lost_write(d: KeyData, out: Emitter) -> None:
    w = d.writes
    acked = w.where(d.write_placed)
    off = np.concatenate([d.L_offset, acked.offset])
    val = np.concatenate([d.L_value, acked.value])
    if len(val) == 0:
        return
    order = np.lexsort((off, val))
    off, val = off[order], val[order]
    starts = _group_starts(val)
    values = val[starts]
    first_off = off[starts]
    last_off = off[np.append(starts[1:], len(val)) - 1]
    read = _isin_sorted(values, d.ok_read_values)
    if not read.any():
        return
    bound = first_off[read].max()
    lost = (last_off <= bound) & ~read
    w_values, w_ops, w_offsets = d.first_per_value(w.where(d.write_committed))
    has_writer = _isin_sorted(values, w_values)
    lost &= has_writer
    if not lost.any():
        return
    at_bound = values[first_off == bound]
    r = d.reads
    max_read_op = int(r.op[(r.type == OK) & _isin_sorted(r.value, at_bound)].min())
    bound_idx = d.slot_idx_at(np.array([bound]))[0]
    lv, lf = values[lost], first_off[lost]
    first_idx = d.slot_idx_at(lf)
    wpos = np.searchsorted(w_values, lv)
    sort = d.key * 1e9 + lf.astype(np.float64)
    out.anomaly("lost-write", sort, lambda i: [int(w_ops[wpos[i]]), max_read_op],
                lambda i: {"key": d.key, "value": int(lv[i]), "offset": w_offsets[wpos[i]], "index": first_idx[i],
                           "max_read_index": bound_idx})


def unseen(d: KeyData, out: Emitter) -> None:
    values, ops, offsets = d.sent_ok
    found = np.flatnonzero(~_isin_sorted(values, d.ok_read_values))
    out.anomaly("unseen", d.key * 1e9 + ops[found].astype(np.float64), lambda i: [int(ops[found[i]])],
                lambda i: {"key": d.key, "value": int(values[found[i]]), "offset": offsets[found[i]]})


def _first_ops(ops: np.ndarray) -> list[int]:
    return [int(x) for x in np.unique(ops)[:MAX_WITNESS_OPS]]


def duplicate(d: KeyData, out: Emitter) -> None:
    order = np.lexsort((d.L_offset, d.L_value))
    val, off = d.L_value[order], d.L_offset[order]
    starts = _group_starts(val)
    counts = np.diff(np.append(starts, len(val)))
    dup = np.flatnonzero(counts > 1)
    if len(dup) == 0:
        return
    out.anomaly("duplicate", -counts[dup].astype(np.float64) * 1e9 + d.key,
                lambda i: _first_ops(d.log_op[d.log_value == val[starts[dup[i]]]]),
                lambda i: {"key": d.key, "value": int(val[starts[dup[i]]]), "count": int(counts[dup[i]]),
                           "offsets": [int(x) for x in off[starts[dup[i]]:starts[dup[i]] + counts[dup[i]]]]})


def inconsistent_offsets(d: KeyData, out: Emitter) -> None:
    bad = np.flatnonzero(d.slot_n > 1)
    if len(bad) == 0:
        return
    out.anomaly("inconsistent-offsets", -d.slot_n[bad].astype(np.float64) * 1e9 + d.key,
                lambda i: _first_ops(d.log_op[d.log_offset == d.slot_offset[bad[i]]]),
                lambda i: {"key": d.key, "offset": int(d.slot_offset[bad[i]]), "index": int(d.slot_idx[bad[i]]),
                           "values": [int(v) for v in d.L_value[d.L_offset == d.slot_offset[bad[i]]]]})


def aborted_read(d: KeyData, out: Emitter) -> None:
    """G1a: one row per (value, failed writer) that some ok poll read."""
    w, r = d.writes, d.reads
    failed = w.where((w.type == FAIL) & _isin_sorted(w.value, d.ok_read_values))
    if len(failed) == 0:
        return
    order = np.lexsort((failed.op, failed.value))
    fv, fo = failed.value[order], failed.op[order]
    keep = _group_starts(fv, fo)
    fv, fo = fv[keep], fo[keep]
    ok = r.where(r.type == OK)
    order = np.lexsort((ok.op, ok.value))
    rv, ro = ok.value[order], ok.op[order]
    rstarts = _group_starts(rv)
    reader = ro[rstarts][np.searchsorted(rv[rstarts], fv)]
    out.anomaly("G1a", reader.astype(np.float64), lambda i: [int(fo[i]), int(reader[i])],
                lambda i: {"key": d.key, "value": int(fv[i])})


def precommitted_read(d: KeyData, out: Emitter) -> None:
    """Rows (op, key, smallest value) for ops that read a value they sent to this key."""
    w, r = d.writes, d.reads
    writers = _unique_sorted(w.op)
    both = writers[_isin_sorted(writers, _unique_sorted(r.op))]  # ops that send and poll: txns
    if len(both) == 0:
        return
    w, r = w.where(_isin_sorted(w.op, both)), r.where(_isin_sorted(r.op, both))
    hit = pd.MultiIndex.from_arrays([w.op, w.value]).isin(pd.MultiIndex.from_arrays([r.op, r.value]))
    if not hit.any():
        return
    ops, values = w.op[hit], w.value[hit]
    order = np.lexsort((values, ops))
    ops, values = ops[order], values[order]
    starts = _group_starts(ops)
    for op, value in zip(ops[starts], values[starts]):
        out.rows.append({"kind": "precommitted", "src": int(op), "key": d.key, "value": int(value)})


def _external(d: KeyData, rows: Rows, updates: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per (process, key): each op's first value against the last value of the latest earlier
    op of the process that updates the position (`updates`, per row), unless an assign or
    subscribe dropped the key in between. Returns (process, op, prev_op, prev_value,
    first_value, delta) of every paired op."""
    if len(rows) == 0:
        return tuple(_EMPTY_I64 for _ in range(6))
    processes = pd.factorize(rows.process, sort=True)[0] if rows.process.dtype == object else rows.process
    order = np.lexsort((rows.row, rows.op, processes))
    proc_code = np.asarray(processes)[order]
    op, value, upd = rows.op[order], rows.value[order], updates[order]
    process = rows.process[order]
    starts = _group_starts(proc_code, op)
    ends = np.append(starts[1:], len(op)) - 1
    op_p, op_code, op_process = op[starts], proc_code[starts], process[starts]
    first_value, last_value, op_upd = value[starts], value[ends], upd[starts]
    n = len(starts)
    pos = np.arange(n)
    candidate = np.where(op_upd, pos, -1)
    running = np.maximum.accumulate(candidate)
    prev = np.empty(n, np.int64)
    prev[0] = -1
    prev[1:] = running[:-1]
    proc_start = np.zeros(n, np.int64)
    new_proc = _group_starts(op_code)
    proc_start[new_proc] = new_proc
    proc_start = np.maximum.accumulate(proc_start)
    paired = prev >= proc_start
    for s, e in zip(new_proc, np.append(new_proc[1:], n)):
        resets = d.facts.resets(op_process[s], d.key)
        if len(resets) == 0:
            continue
        seg = np.arange(s, e)
        seg = seg[paired[seg]]
        before = np.searchsorted(resets, op_p[seg]) - 1
        ok = before < 0
        last_reset = resets[np.maximum(before, 0)]
        ok |= last_reset < op_p[prev[seg]]
        paired[seg[~ok]] = False
    j = np.flatnonzero(paired)
    i = prev[j]
    delta = d.delta(last_value[i], first_value[j])
    return op_process[j], op_p[j], op_p[i], last_value[i], first_value[j], delta


def _emit_external(d: KeyData, out: Emitter, name: str, rows: tuple[np.ndarray, ...], mask: np.ndarray,
                   sort_sign: int) -> None:
    process, op, prev_op, prev_value, first_value, delta = (col[mask] for col in rows)
    out.anomaly(name, sort_sign * delta.astype(np.float64), lambda i: [int(prev_op[i]), int(op[i])],
                lambda i: {"key": d.key, "process": _plain(process[i]),
                           "values": [int(prev_value[i]), int(first_value[i])], "delta": int(delta[i])})


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def external_poll(d: KeyData, out: Emitter) -> None:
    r = d.reads
    rows = _external(d, r, r.type == OK)
    delta = rows[5]
    _emit_external(d, out, "poll-skip", rows, delta > 1, -1)
    _emit_external(d, out, "nonmonotonic-poll", rows, delta < 1, 1)


def external_send(d: KeyData, out: Emitter) -> None:
    w = d.writes
    sends = w.where((w.type == OK) | (w.type == INFO))
    rows = _external(d, sends, np.ones(len(sends), bool))
    _emit_external(d, out, "nonmonotonic-send", rows, rows[5] < 1, 1)


def _internal(d: KeyData, rows: Rows) -> tuple[np.ndarray, ...]:
    same = rows.op[1:] == rows.op[:-1]
    j = np.flatnonzero(same) + 1
    prev_value, value = rows.value[j - 1], rows.value[j]
    return rows.op[j], prev_value, value, d.delta(prev_value, value)


def _emit_internal(d: KeyData, out: Emitter, name: str, rows: tuple[np.ndarray, ...], mask: np.ndarray,
                   sort_sign: int) -> None:
    op, prev_value, value, delta = (col[mask] for col in rows)
    out.anomaly(name, sort_sign * delta.astype(np.float64), lambda i: [int(op[i])],
                lambda i: {"key": d.key, "values": [int(prev_value[i]), int(value[i])], "delta": int(delta[i])})


def internal_poll(d: KeyData, out: Emitter) -> None:
    rows = _internal(d, d.reads.where(~d.reads.rebalanced))
    _emit_internal(d, out, "int-poll-skip", rows, rows[3] > 1, -1)
    _emit_internal(d, out, "int-nonmonotonic-poll", rows, rows[3] < 1, 1)


def internal_send(d: KeyData, out: Emitter) -> None:
    rows = _internal(d, d.writes)
    _emit_internal(d, out, "int-send-skip", rows, rows[3] > 1, -1)
    _emit_internal(d, out, "int-nonmonotonic-send", rows, rows[3] < 1, 1)


# ---- delivery (group consumers) ------------------------------------------------------------

def _processed(d: KeyData) -> Rows:
    a = d.all
    p = a.where((a.mop == MOP_PROCESS) & (a.type == OK))
    p.cols["grp"] = _groups(p)
    return p


def _groups(rows: Rows) -> np.ndarray:
    """The rows' consumer groups, DEFAULT_GROUP where none was recorded."""
    group = rows.cols.get("group")
    if group is None:
        return np.full(len(rows), DEFAULT_GROUP, object)
    return np.array([DEFAULT_GROUP if g is None or g != g else g for g in group], object)


def duplicate_processing(d: KeyData, out: Emitter) -> None:
    p = _processed(d)
    if len(p) == 0:
        return
    frame = pd.DataFrame({"grp": p.grp, "value": p.value, "op": p.op,
                          "offset": np.where(p.has_off, p.offset, -1), "has_off": p.has_off})
    grouped = frame.groupby(["grp", "value"], sort=False)
    counts = grouped.size()
    dups = counts[counts > 1]
    if len(dups) == 0:
        return
    members = [grouped.get_group(k) for k in dups.index]
    out.anomaly("duplicate-processing", -dups.to_numpy().astype(np.float64) * 1e9 + d.key,
                lambda i: sorted(int(x) for x in members[i]["op"])[:MAX_WITNESS_OPS],
                lambda i: {"group": dups.index[i][0], "key": d.key, "value": int(dups.index[i][1]),
                           "count": int(dups.iloc[i]),
                           "offsets": sorted(int(o) for o, h in zip(members[i]["offset"], members[i]["has_off"]) if h)})


def unprocessed(d: KeyData, out: Emitter) -> None:
    p = _processed(d)
    out.rows.append({"kind": "processed", "n": len(p)})
    values, ops, offsets = d.sent_ok
    found = np.flatnonzero(~np.isin(values, p.value))
    out.anomaly("unprocessed", d.key * 1e9 + ops[found].astype(np.float64), lambda i: [int(ops[found[i]])],
                lambda i: {"key": d.key, "value": int(values[found[i]]), "offset": offsets[found[i]]})


def nonmonotonic_commit(d: KeyData, out: Emitter) -> None:
    a = d.all
    c = a.where((a.mop == MOP_COMMIT) & (a.type == OK) & a.has_off)
    if len(c) == 0:
        return
    grp = list(_groups(c))
    found: list[tuple[str, int, int, int, int]] = []  # (group, best offset, best op, offset, op)
    for g in sorted(set(grp)):
        idx = [i for i, x in enumerate(grp) if x == g]
        # Each commit took effect for others at its completion and is judged at its invocation.
        events = sorted([(int(c.op[i]), 0, i) for i in idx] + [(int(c.invoke[i]), 1, i) for i in idx])
        best: tuple[int, int] | None = None
        for _, judged, i in events:
            offset, op = int(c.offset[i]), int(c.op[i])
            if judged:
                if best is not None and offset < best[0]:
                    found.append((g, best[0], best[1], offset, op))
            elif best is None or (offset, op) > best:
                best = (offset, op)
    out.anomaly("nonmonotonic-commit", np.array([o - b for _, b, _, o, _ in found], np.float64),
                lambda i: [found[i][2], found[i][4]],
                lambda i: {"group": found[i][0], "key": d.key, "offsets": [found[i][1], found[i][3]]})


# ---- dependency edges for the cycle search (cycles.py states the pruning) --------------------

def _writes_two_values(w: Rows) -> bool:
    """Whether some op writes two different values of this key (w is sorted by op)."""
    if len(w) < 2:
        return False
    starts = _group_starts(w.op)
    return bool((np.minimum.reduceat(w.value, starts) != np.maximum.reduceat(w.value, starts)).any())


def edges(d: KeyData, out: Emitter) -> None:
    w, r = d.writes, d.reads
    if len(w) == 0:
        return
    order = np.lexsort((w.op, w.value))
    wv = w.value[order]
    first = _group_starts(wv)
    writer_value, writer_op = wv[first], w.op[order][first]
    writer_invoke, writer_type = w.invoke[order][first], w.type[order][first]
    write_ops = _unique(np.concatenate([w.op, d.facts.writing_ops]))

    def shortcut(src: np.ndarray, src_type: np.ndarray, dst_invoke: np.ndarray) -> np.ndarray:
        # The source completed ok before the target was invoked (cycles.py states why such an
        # edge into an op of no other use can be left out). Realtime edges start only at ok
        # completions, as in Elle: an info op never completes and a failed one did not happen.
        return (src_type == OK) & (src < dst_invoke)

    def emit(src, dst, rel, values, src_invoke, src_type, dst_invoke, dst_type) -> None:
        for k in range(len(src)):
            out.rows.append({"kind": "edge", "src": int(src[k]), "dst": int(dst[k]), "rel": rel, "key": d.key,
                             "value": int(values[k]), "src_invoke": int(src_invoke[k]), "src_type": TYPES[src_type[k]],
                             "dst_invoke": int(dst_invoke[k]), "dst_type": TYPES[dst_type[k]]})

    # wr: writer of v → every op that read v.
    if len(r):
        order = np.lexsort((r.op, r.value))
        rv, ro, ri, rt = r.value[order], r.op[order], r.invoke[order], r.type[order]
        keep = _group_starts(rv, ro)
        rv, ro, ri, rt = rv[keep], ro[keep], ri[keep], rt[keep]
        has = _isin_sorted(rv, writer_value)
        rv, ro, ri, rt = rv[has], ro[has], ri[has], rt[has]
        wpos = np.searchsorted(writer_value, rv)
        src, src_inv, src_type = writer_op[wpos], writer_invoke[wpos], writer_type[wpos]
        # Into a read-only op: only an ok reader has a way on (its realtime edges), and not
        # when the writer completed ok before the reader completed (every realtime edge out
        # of the reader then also leaves the writer).
        kept = (src != ro) & (_isin_sorted(ro, write_ops) | ((rt == OK) & ~shortcut(src, src_type, ro)))
        emit(src[kept], ro[kept], "wr", rv[kept], src_inv[kept], src_type[kept], ri[kept], rt[kept])
    # ww: writer of the value in the slot before v's (last) slot → writer of v.
    # An op that writes two values of this key can close a cycle inside the key's own ww
    # chain (its values straddling another op's), so such a key's chain is kept too.
    linked = bool(_isin_sorted(w.op, d.facts.linking_ops).any()) or _writes_two_values(w)
    has = _isin_sorted(d.bv_value, writer_value) & (d.bv_idx >= 1)
    values, idx = d.bv_value[has], d.bv_idx[has]
    prev_values = d.slot_rep[idx - 1]
    has_prev = _isin_sorted(prev_values, writer_value)
    values, prev_values = values[has_prev], prev_values[has_prev]
    dpos, spos = np.searchsorted(writer_value, values), np.searchsorted(writer_value, prev_values)
    src, dst = writer_op[spos], writer_op[dpos]
    kept = (src != dst) & (linked | ~shortcut(src, writer_type[spos], writer_invoke[dpos]))
    emit(src[kept], dst[kept], "ww", values[kept], writer_invoke[spos][kept], writer_type[spos][kept],
         writer_invoke[dpos][kept], writer_type[dpos][kept])


KAFKA = {
    "lost-write": lost_write,
    "unseen": unseen,
    "duplicate": duplicate,
    "inconsistent-offsets": inconsistent_offsets,
    "G1a": aborted_read,
    "precommitted-read": precommitted_read,
    "poll-skip/nonmonotonic-poll": external_poll,
    "nonmonotonic-send": external_send,
    "int-poll-skip/int-nonmonotonic-poll": internal_poll,
    "int-send-skip/int-nonmonotonic-send": internal_send,
}
DELIVERY = {
    "duplicate-processing": duplicate_processing,
    "unprocessed": unprocessed,
    "nonmonotonic-commit": nonmonotonic_commit,
}
# name → check; the fused pipeline runs them all on every key group.
CHECKS: dict[str, Callable[[KeyData, Emitter], None]] = {**KAFKA, **DELIVERY, "cycles": edges}


def check_group(run: str, key: int, cols: dict[str, np.ndarray], facts: RunFacts,
                checks: dict[str, Callable[[KeyData, Emitter], None]]) -> pa.Table:
    """All checks on the rows of one (run, key), as `key_groups` gives them."""
    out = Emitter(run, key)
    try:
        data = KeyData(key, cols, facts)
    except Exception as exc:
        out.rows.append({"kind": "error", "anomaly": "per-key", "detail": describe(exc)})
        return out.table()
    for name, check in checks.items():
        try:
            check(data, out)
        except Exception as exc:
            out.rows.append({"kind": "error", "anomaly": name, "detail": describe(exc)})
    return out.table()


# The columns `key_groups` takes and KeyData gets (`group` may be missing: no row has one).
COLUMNS = ("run", "key", "op", "invoke", "process", "type", "f", "mop", "row", "offset", "has_off", "value",
           "has_value", "rebalanced", "group")


def key_groups(cols: dict[str, np.ndarray]) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """(run, key, that key's rows) for each (run, key) of these rows, whatever their order: rows
    with a key and not invocations, sorted by (op, row) within the key. One sort of the whole
    input instead of one per key; each key's rows are copied out of it one key at a time."""
    keep = (cols["type"] != INVOKE) & cols["has_key"]
    if not keep.all():
        cols = {name: col[keep] for name, col in cols.items()}
    n = len(cols["op"])
    if n == 0:
        return
    op, row, run, key = cols["op"], cols["row"], cols["run"], cols["key"]
    if op.min() >= 0 and op.max() < 1 << (63 - ROW_SHIFT_SORT) and row.min() >= 0 and row.max() < 1 << ROW_SHIFT_SORT:
        order = np.lexsort(((op << ROW_SHIFT_SORT) | row, key, run))  # one sort key fewer
    else:
        order = np.lexsort((row, op, key, run))
    run_sorted, key_sorted = run[order], key[order]
    starts = _group_starts(run_sorted, key_sorted)
    ends = np.append(starts[1:], n)
    names = [name for name in COLUMNS if name in cols and name not in ("run", "key")]
    for a, b in zip(starts, ends):
        rows = order[a:b]
        yield int(run_sorted[a]), int(key_sorted[a]), {name: cols[name][rows] for name in names}


ROW_SHIFT_SORT = 22  # op and row packed into one sort key when row_in_op < 2^22 and op_index < 2^41


def check_columns(cols: dict[str, np.ndarray], facts: Callable[[int], RunFacts], run_name: Callable[[int], str],
                  checks: dict[str, Callable[[KeyData, Emitter], None]]) -> Iterator[pa.Table]:
    """check_group on every (run, key) of these rows (runs as small ints; `run_name` names them)."""
    for run, key, rows in key_groups(cols):
        yield check_group(run_name(run), key, rows, facts(run), checks)


def _positions(column: pa.ChunkedArray | pa.Array, names: tuple[str, ...]) -> np.ndarray:
    """Each string's position in `names` (OTHER for any other value or null), as int8,
    through the column's dictionary when it has one (Parquet's dictionary pages)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    lookup = np.full(len(column.dictionary) + 1, OTHER, np.int8)
    for i, value in enumerate(column.dictionary.to_pylist()):
        if value in names:
            lookup[i] = names.index(value)
    indices = pc.fill_null(column.indices, len(column.dictionary)).to_numpy(zero_copy_only=False)
    return lookup[indices]


# The history columns (harness/history_parquet.py) the per-key pass reads.
HISTORY_COLUMNS = ("key", "process", "op_index", "invoke_index", "type", "f", "mop_f", "row_in_op", "offset",
                   "value", "rebalanced", "group")


def columns_from_history(table: pa.Table, run: int) -> dict[str, np.ndarray]:
    """The COLUMNS of rows read straight from a history file (HISTORY_COLUMNS)."""
    n = table.num_rows
    key, has_key = _ints(table.column("key"))
    offset, has_off = _ints(table.column("offset"))
    value, has_value = _ints(table.column("value"))
    op, _ = _ints(table.column("op_index"))
    invoke, _ = _ints(table.column("invoke_index"))
    row, _ = _ints(table.column("row_in_op"))
    # A null rebalanced counts as rebalanced (the DataFrame oracle's `where(~rebalanced)`
    # drops null too).
    rebalanced = pc.fill_null(table.column("rebalanced"), True).to_numpy(zero_copy_only=False)
    cols = {
        "run": np.full(n, run, np.int64), "key": key, "has_key": has_key, "op": op, "invoke": invoke,
        "process": table.column("process").to_numpy(zero_copy_only=False),
        "type": _positions(table.column("type"), TYPES), "f": _positions(table.column("f"), FS),
        "mop": _positions(table.column("mop_f"), MOPS), "row": row, "offset": offset, "has_off": has_off,
        "value": value, "has_value": has_value, "rebalanced": np.asarray(rebalanced, bool),
    }
    group = table.column("group")
    if group.null_count < n:
        cols["group"] = group.cast(pa.string()).to_numpy(zero_copy_only=False)
    return cols


def columns_from_code(table: pa.Table) -> dict[str, np.ndarray]:
    """The COLUMNS of rows shipped with `code` (INPUT_COLUMNS: the shuffle's columns)."""
    code, _ = _ints(table.column("code"))
    op, _ = _ints(table.column("op_index"))
    key, has_key = _ints(table.column("key"))
    offset, has_off = _ints(table.column("offset"))
    value, has_value = _ints(table.column("value"))
    run, _ = _ints(table.column("run"))
    cols = {
        "run": run, "key": key, "has_key": has_key, "op": op, "invoke": op - (code >> INVOKE_SHIFT),
        "process": table.column("process").to_numpy(zero_copy_only=False),
        "type": (code & 7).astype(np.int8), "f": ((code >> 3) & 7).astype(np.int8),
        "mop": ((code >> 6) & 7).astype(np.int8), "row": (code >> ROW_SHIFT) & (ROW_LIMIT - 1),
        "offset": offset, "has_off": has_off, "value": value, "has_value": has_value,
        "rebalanced": (code & REBALANCED_BIT) != 0,
    }
    if "group" in table.column_names:
        cols["group"] = table.column("group").to_numpy(zero_copy_only=False)
    return cols


def check_partition(table: pa.Table, facts: Callable[[int], RunFacts], run_name: Callable[[int], str],
                    checks: dict[str, Callable[[KeyData, Emitter], None]]) -> list[pa.Table]:
    """check_group on every (run, key) of a shuffled partition (INPUT_COLUMNS), whatever its row order."""
    if table.num_rows == 0:
        return []
    return list(check_columns(columns_from_code(table), facts, run_name, checks))


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    head = text[0] if text else ""
    return f"{type(exc).__name__}: {head}"[:2000]
