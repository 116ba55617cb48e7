"""A plain-Python oracle for the core Kafka checks on tiny histories, written straight from
Jepsen's definitions (reference/jepsen-kafka.md §1.6–1.7) with dicts, for differential tests
against the Spark checks. Returns anomaly name → count."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from harness.history import Op


def _pairs(ops: list[Op]) -> list[tuple[Op, Op | None]]:
    pending: dict[Any, Op] = {}
    out = []
    for op in ops:
        if op.process == "nemesis":
            continue
        if op.type == "invoke":
            pending[op.process] = op
        else:
            out.append((pending.pop(op.process), op))
    out += [(inv, None) for inv in pending.values()]
    return out


def check(ops: list[Op]) -> dict[str, int]:
    """Anomaly counts. Every committed send's offset is evidence of the log, whatever the
    acks setting (as in Jepsen); a negative offset (acks=0) is no offset."""
    done = []
    for inv, comp in _pairs(ops):
        typ = comp.type if comp else "info"
        value = comp.value if comp and comp.value is not None else inv.value
        index = comp.index if comp else inv.index
        done.append((index, inv.process, typ, inv.f, value))
    done.sort()
    reads: dict[int, dict[int, list[tuple[int, int]]]] = {}  # op → key → [(offset, value)]
    writes: dict[int, dict[int, list[tuple[int | None, int]]]] = {}
    info = {}
    for index, process, typ, f, value in done:
        info[index] = (process, typ, f, value)
        r: dict[int, list] = defaultdict(list)
        w: dict[int, list] = defaultdict(list)
        if f in ("poll", "txn", "send") and isinstance(value, list):
            for mop in value:
                if mop[0] == "poll" and len(mop) > 1:
                    for k, recs in mop[1].items():
                        r[int(k)] += [tuple(x) for x in recs]
                elif mop[0] == "send":
                    payload = mop[2]
                    w[mop[1]].append(tuple(payload) if isinstance(payload, list) else (None, payload))
        reads[index], writes[index] = dict(r), dict(w)
    ok_read = defaultdict(set)
    for op, by_key in reads.items():
        if info[op][1] == "ok":
            for k, recs in by_key.items():
                ok_read[k] |= {v for _, v in recs}

    def committed(op: int) -> bool:
        typ = info[op][1]
        return typ == "ok" or (typ == "info" and any(v in ok_read[k] for k, ws in writes[op].items() for _, v in ws))

    log: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for op, by_key in reads.items():
        for k, recs in by_key.items():
            for o, v in recs:
                log[k][o].add(v)
    writer: dict[tuple[int, int], int] = {}
    placed: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))  # log + every acked offset
    for op, by_key in writes.items():
        for k, ws in by_key.items():
            for o, v in ws:
                writer.setdefault((k, v), op)
                if o is not None and o >= 0 and committed(op):
                    placed[k][o].add(v)
                    log[k][o].add(v)
    for k, slots in log.items():
        for o, vs in slots.items():
            placed[k][o] |= vs
    by_value: dict[int, dict[int, int]] = {}
    first_idx: dict[tuple[int, int], int] = {}
    last_idx: dict[tuple[int, int], int] = {}
    out: Counter = Counter()
    for k, slots in log.items():
        by_value[k] = {}
        for i, o in enumerate(sorted(slots)):
            vs = slots[o]
            by_value[k][min(vs)] = i
            if len(vs) > 1:
                out["inconsistent-offsets"] += 1
            for v in vs:
                first_idx.setdefault((k, v), i)
                last_idx[(k, v)] = i
        counts = Counter(v for vs in slots.values() for v in vs)
        out["duplicate"] += sum(1 for n in counts.values() if n > 1)

    def delta(k: int, a: int, b: int) -> int:
        ia, ib = by_value[k].get(a), by_value[k].get(b)
        return 1 if ia is None or ib is None else ib - ia

    for k, slots in placed.items():
        first_offset: dict[int, int] = {}
        last_offset: dict[int, int] = {}
        for o in sorted(slots):
            for v in slots[o]:
                first_offset.setdefault(v, o)
                last_offset[v] = o
        bound = max((first_offset[v] for v in ok_read[k] if v in first_offset), default=-1)
        for v, lo in last_offset.items():
            if lo <= bound and v not in ok_read[k]:
                w = writer.get((k, v))
                if w is not None and committed(w):
                    out["lost-write"] += 1
    sent_ok = {(k, v) for op, by_key in writes.items() if info[op][1] == "ok" for k, ws in by_key.items() for _, v in ws}
    out["unseen"] += sum(1 for k, v in sent_ok if v not in ok_read[k])
    failed = {(k, v) for op, by_key in writes.items() if info[op][1] == "fail" for k, ws in by_key.items() for _, v in ws}
    out["G1a"] += len({(k, v, w) for op, by_key in reads.items() if info[op][1] == "ok"
                       for k, recs in by_key.items() for _, v in recs if (k, v) in failed
                       for w in [writer[(k, v)]]})
    last_reads: dict[Any, dict[int, int]] = defaultdict(dict)  # process → key → last value of last ok read
    for index in sorted(info):
        process, typ, f, value = info[index]
        if f in ("assign", "subscribe") and typ in ("ok", "info"):
            last_reads[process] = {k: v for k, v in last_reads[process].items() if k in (value or [])}
        for k, recs in reads[index].items():
            if not recs:
                continue
            vals = [v for _, v in recs]
            if k in last_reads[process]:
                d = delta(k, last_reads[process][k], vals[0])
                if d > 1:
                    out["poll-skip"] += 1
                elif d < 1:
                    out["nonmonotonic-poll"] += 1
            for a, b in zip(vals, vals[1:]):
                d = delta(k, a, b)
                if d > 1:
                    out["int-poll-skip"] += 1
                elif d < 1:
                    out["int-nonmonotonic-poll"] += 1
        if typ == "ok":
            for k, recs in reads[index].items():
                if recs:
                    last_reads[process][k] = recs[-1][1]
    return {name: n for name, n in out.items() if n}
