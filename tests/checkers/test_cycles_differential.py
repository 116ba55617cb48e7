"""The cycle checks against the brute-force reference (cycle_oracle.py) on generated histories.

Hypothesis draws small histories (≤ 6 ops on two keys): concurrent ops, sends of several
values to one key (so two ops' values interleave in a key's log), transactions that send and
poll, info and fail completions, polls of any slice of a key's log. Each drawn batch is
checked as separate runs in ONE check_runs call. The product reports, per strongly connected
component, its most serious cycle (checkers/cycles.py); so for every run:
  * each kind it reports is a kind of cycle the reference finds (no false cycle);
  * it reports G0 iff the reference finds a G0;
  * a component whose worst cycle is G1c gives G1c, and one with only realtime cycles gives
    a realtime kind;
  * it reports a cycle iff the reference finds one.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from checkers.claims import ClaimInputs
from checkers.pipeline import check_runs

from . import cycle_oracle
from .builder import History, to_parquet
from .cycle_oracle import KINDS, Op

INPUTS = ClaimInputs(acks="all", min_insync_replicas=2, idempotence=True)
KEYS = (1, 2)


@dataclass
class Drawn:
    """An op before scheduling: what it does and when (in abstract time units)."""

    f: str
    type: str
    sends: list[int]  # keys, one value each
    poll: list[tuple[int, int, int]]  # (key, start, length) slices of the key's log
    start: int
    duration: int


@st.composite
def drawn_op(draw) -> Drawn:
    f = draw(st.sampled_from(("send", "send", "poll", "txn")))
    typ = draw(st.sampled_from(("ok", "ok", "ok", "info", "fail")))
    sends = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)) if f != "poll" else []
    poll = (draw(st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 5), st.integers(1, 3)),
                          min_size=1, max_size=2, unique_by=lambda s: s[0])) if f != "send" else [])
    return Drawn(f, typ, sends, poll, draw(st.integers(0, 8)), draw(st.integers(0, 4)))


@st.composite
def histories(draw) -> list[Op]:
    drawn = draw(st.lists(drawn_op(), min_size=2, max_size=6))
    values = {k: [] for k in KEYS}  # key → the values sent to it
    sends: list[list[tuple[int, int]]] = []
    for i, d in enumerate(drawn):
        mine = []
        for j, key in enumerate(d.sends):
            value = 100 * (i + 1) + j
            values[key].append(value)
            mine.append((key, value))
        sends.append(mine)
    # Each key's log: its values in any order (so values of two ops interleave).
    offset_of = {}
    logs = {}
    for key in KEYS:
        logs[key] = draw(st.permutations(values[key])) if values[key] else []
        offset_of.update({(key, v): o for o, v in enumerate(logs[key])})
    # Events: invocation at 2 × start, completion at 2 × (start + duration) + 1.
    events = sorted([(2 * d.start, 0, i) for i, d in enumerate(drawn)]
                    + [(2 * (d.start + d.duration) + 1, 1, i) for i, d in enumerate(drawn)])
    index = {}
    for n, (_, kind, i) in enumerate(events):
        index[(kind, i)] = n
    ops = []
    for i, d in enumerate(drawn):
        reads = [(key, o, logs[key][o]) for key, start, length in d.poll
                 for o in range(start, min(start + length, len(logs[key])))]
        ops.append(Op(id=i, f=d.f, type=d.type, invoke=index[(0, i)], complete=index[(1, i)],
                      sends=[(k, v, offset_of[(k, v)] if d.type == "ok" else None) for k, v in sends[i]],
                      reads=reads))
    return ops


def to_history(ops: list[Op]) -> History:
    """The ops as client invocations and completions, in history index order."""
    h = History()
    events = sorted([(op.invoke, 0, op) for op in ops] + [(op.complete, 1, op) for op in ops], key=lambda e: e[0])
    for n, (at, kind, op) in enumerate(events):
        assert at == n
        process = op.id
        if kind == 0:
            invoke: list = [["send", k, v] for k, v, _ in op.sends]
            if op.f != "send":
                invoke.append(["poll"])
            h.invoke(process, op.f, invoke)
            continue
        done: list = [["send", k, [o, v]] if o is not None else ["send", k, v] for k, v, o in op.sends]
        if op.f != "send":
            by_key: dict[str, list] = {}
            for k, o, v in op.reads:
                by_key.setdefault(str(k), []).append([o, v])
            done.append(["poll", by_key])
        h.complete(process, op.f, op.type, done)
    return h


def _interleaved_sends() -> list[Op]:
    """Regression (issue #12): two ok sends whose values interleave on one key, A's first
    value, B's, then A's second: ww A→B and B→A, a plain G0 that pruning must keep."""
    a = Op(id=0, f="send", type="ok", invoke=0, complete=2, sends=[(1, 100, 0), (1, 101, 2)])
    b = Op(id=1, f="send", type="ok", invoke=1, complete=3, sends=[(1, 200, 1)])
    return [a, b]


def _read_before_earlier_offset() -> list[Op]:
    """Regression: a poll R reads X's value while X's send is in flight; Y, invoked after R
    completed, takes an offset before X's. X →wr R →rt Y →ww X: a realtime cycle through a
    read-only op and no backward data edge."""
    x = Op(id=0, f="send", type="ok", invoke=0, complete=5, sends=[(1, 100, 1)])
    r = Op(id=1, f="poll", type="ok", invoke=1, complete=2, reads=[(1, 1, 100)])
    y = Op(id=2, f="send", type="ok", invoke=3, complete=4, sends=[(1, 200, 0)])
    return [x, r, y]


def check_batch(spark, tmp_path, batch: list[list[Op]]) -> None:
    runs = {f"h{i}": ops for i, ops in enumerate(batch)}
    parquet = to_parquet({run: to_history(ops) for run, ops in runs.items()}, tmp_path)
    results = check_runs(parquet, INPUTS, spark)
    for run, ops in runs.items():
        sccs = cycle_oracle.cycles(ops)
        expected = set().union(*(s.kinds for s in sccs)) if sccs else set()
        result = results.get(run)
        got = {a.name for a in result.anomalies if a.name in KINDS} if result else set()
        context = f"{run}: product {sorted(got)}, reference {[(sorted(s.ops), sorted(s.kinds)) for s in sccs]}, {ops}"
        assert result is not None and not [e for e in result.errors if e.checker.startswith(("cycles", "per-key"))], \
            context
        assert got <= expected, context
        assert ("G0" in got) == ("G0" in expected), context
        for scc in sccs:
            if "G0" not in scc.kinds and "G1c" in scc.kinds:
                assert "G1c" in got, context
            if scc.kinds and not scc.kinds & {"G0", "G1c"}:
                assert got & {"G0-realtime", "G1c-realtime"}, context
        assert bool(got) == bool(expected), context


def test_regressions(spark, tmp_path):
    check_batch(spark, tmp_path, [_interleaved_sends(), _read_before_earlier_offset()])


@settings(max_examples=3, deadline=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=list(HealthCheck))
@given(batch=st.lists(histories(), min_size=40, max_size=40))
def test_cycle_kinds_match_the_brute_force_reference(spark, tmp_path_factory, batch):
    check_batch(spark, tmp_path_factory.mktemp("cycles"), batch)
