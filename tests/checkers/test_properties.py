"""Property tests: histories generated from a model of a correct log check clean; the same
histories with one injected anomaly report exactly that anomaly (plus the order errors it
necessarily implies); and the Spark checks agree with the plain-Python oracle on every
generated history. Hypothesis draws a whole batch, which is checked in ONE Spark job keyed
by run, so an example costs one job."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from checkers.claims import ClaimInputs
from checkers.pipeline import check_runs

from .builder import History, to_parquet
from .oracle import check as oracle_check

INJECTIONS = ("none", "lost", "duplicate", "inconsistent", "skip", "backwards", "aborted")
# What each injection must produce, and what else it may imply.
MUST = {"none": set(), "lost": {"lost-write"}, "duplicate": {"duplicate"},
        "inconsistent": {"inconsistent-offsets"}, "skip": set(), "backwards": {"nonmonotonic-poll"},
        "aborted": {"G1a"}}
MAY = {"none": set(), "lost": {"unseen", "poll-skip", "int-poll-skip"},
       "duplicate": {"int-poll-skip", "int-nonmonotonic-poll", "poll-skip", "nonmonotonic-poll"},
       "inconsistent": set(), "skip": {"poll-skip", "int-poll-skip"}, "backwards": set(), "aborted": set()}
SAFE = ClaimInputs(acks="all", min_insync_replicas=2, idempotence=True)
# acks=1: acknowledged writes may be lost, and the loss is all a run may report.
ACKS_1 = ClaimInputs(acks="1", min_insync_replicas=2, faults=frozenset({"kill"}))  # a kill ran
ACKS_1_INJECTIONS = ("none", "lost")


@dataclass
class Generated:
    history: History
    injection: str
    target: tuple[int, int] | None  # (key, value) the injection is about


def generate(seed: int, injection: str) -> Generated:
    """A correct log: producers send unique values; offsets grow with occasional gaps (as
    transaction markers leave); consumers assigned to every key read contiguous chunks;
    a last consumer drains everything. Then one anomaly is injected."""
    rng = random.Random(seed)
    keys = list(range(rng.randint(1, 3)))
    h = History()
    logs: dict[int, list[tuple[int, int]]] = {k: [] for k in keys}
    next_offset = {k: 0 for k in keys}
    for i in range(rng.randint(4, 9) * len(keys)):
        k = rng.choice(keys)
        value = 100 + i
        outcome = rng.random()
        if outcome < 0.1:
            h.send(0, k, value, None, typ="fail")
            continue
        next_offset[k] += rng.choice((0, 0, 0, 1))  # a gap, as a commit marker leaves
        offset = next_offset[k]
        next_offset[k] += 1
        logs[k].append((offset, value))
        h.send(0, k, value, offset)
    target = None
    lost_at = None
    nonempty = [k for k in keys if len(logs[k]) >= 3]
    if injection == "lost" and nonempty:
        k = rng.choice(nonempty)
        lost_at = (k, rng.randrange(1, len(logs[k]) - 1))
        target = (k, logs[k][lost_at[1]][1])
    if injection == "duplicate" and nonempty:
        k = rng.choice(nonempty)
        offset, value = logs[k][-1]
        logs[k].append((offset + 1, value))  # a retried send, written twice
        h.send(0, k, value, offset + 1)
        target = (k, value)
    if injection == "aborted" and keys:
        k = rng.choice(keys)
        offset = (logs[k][-1][0] + 1) if logs[k] else 0
        h.send(0, k, 999, offset, typ="fail")
        logs[k].append((offset, 999))
        target = (k, 999)

    def visible(k: int) -> list[tuple[int, int]]:
        return [r for j, r in enumerate(logs[k]) if lost_at != (k, j)]

    consumers = [1, 2]
    for p in consumers:
        h.assign(p, keys)
    positions = {(p, k): 0 for p in consumers for k in keys}
    skip_done = backwards_done = inconsistent_done = False
    for _ in range(rng.randint(2, 6)):
        p = rng.choice(consumers)
        batch: dict[int, list[tuple[int, int]]] = {}
        for k in keys:
            records = visible(k)
            pos = positions[(p, k)]
            rewound = False
            if injection == "backwards" and not backwards_done and pos > 0 and pos < len(records):
                pos -= 1  # re-read the last record polled
                backwards_done = rewound = True
                target = (k, records[pos][1])
            n = rng.randint(1 if rewound else 0, 3)
            chunk = records[pos:pos + n]
            advance = len(chunk)
            if injection == "skip" and not skip_done and pos + n + 1 < len(records) and n > 0:
                chunk = records[pos:pos + n] + [records[pos + n + 1]]
                skip_done = True
                target = (k, records[pos + n][1])
                advance = n + 2
            if injection == "inconsistent" and not inconsistent_done and chunk:
                offset, _ = chunk[0]
                chunk = [(offset, 5000)] + chunk[1:]  # a foreign value at a real offset
                inconsistent_done = True
                target = (k, 5000)
            if chunk:
                batch[k] = chunk
            positions[(p, k)] = pos + advance
        h.poll(p, batch)
    h.assign(3, keys)
    h.poll(3, {k: visible(k) for k in keys if visible(k)})  # the final drain
    if target is None:
        injection = "none"  # the history gave no room for this injection
    return Generated(h, injection, target)


batches = st.lists(st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(INJECTIONS)), min_size=40, max_size=40)


@settings(max_examples=1, deadline=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=list(HealthCheck))
@given(batch=batches)
def test_generated_histories(spark, tmp_path_factory, batch):
    generated = {f"g{i}": generate(seed, injection) for i, (seed, injection) in enumerate(batch)}
    # The same lost-write histories again under acks=1, in the same job (claims per run).
    acks_1 = {f"a{i}": g for i, g in enumerate(generated.values()) if g.injection in ACKS_1_INJECTIONS}
    parquet = to_parquet({run: g.history for run, g in {**generated, **acks_1}.items()},
                         tmp_path_factory.mktemp("generated"))
    results = check_runs(parquet, {**{run: SAFE for run in generated}, **{run: ACKS_1 for run in acks_1}}, spark)
    for run, g in acks_1.items():
        result = results[run]
        seen = {a.name: a for a in result.anomalies}
        context = f"{run} (acks=1, {g.injection}, target {g.target}): {sorted(seen)}"
        assert not result.errors, context
        expected = {"lost-write"} if g.injection == "lost" else set()
        assert expected <= set(seen) <= expected | {"unseen"}, context
        if g.injection == "lost":
            assert [(w.detail["key"], w.detail["value"]) for w in seen["lost-write"].witnesses] == [g.target], context
            assert seen["lost-write"].allowed, context
        assert result.valid is True, context
        got = {name: a.count for name, a in seen.items() if name in ORACLE_NAMES}
        assert got == oracle_check(g.history.ops), context
    for run, g in generated.items():
        result = results[run]
        seen = {a.name: a for a in result.anomalies}
        context = f"{run} ({g.injection}, target {g.target}): {sorted(seen)}"
        assert not result.errors, context
        assert MUST[g.injection] <= set(seen), context
        assert set(seen) <= MUST[g.injection] | MAY[g.injection], context
        if g.injection == "skip":
            assert seen.keys() & {"poll-skip", "int-poll-skip"}, context
        if g.injection in ("lost", "duplicate", "aborted"):
            name = next(iter(MUST[g.injection]))
            assert [(w.detail["key"], w.detail["value"]) for w in seen[name].witnesses] == [g.target], context
        assert result.valid is (g.injection == "none"), context
        # Differential: the oracle agrees on every core anomaly's count.
        expected = oracle_check(g.history.ops)
        got = {name: a.count for name, a in seen.items() if name in ORACLE_NAMES}
        assert got == expected, context


ORACLE_NAMES = {"lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a", "poll-skip", "nonmonotonic-poll",
                "int-poll-skip", "int-nonmonotonic-poll"}
