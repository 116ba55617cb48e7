"""The fused per-key pass gives exactly the anomalies, counts, witnesses, errors, graph and
statistics that checking each anomaly alone gives (the DataFrame oracle, dataframe_oracle/), on
every hand-built case of test_anomalies (together they hold every anomaly type), on a
batch of generated histories, and on one crowded history holding many anomaly types in the
same keys at once. Each plan checks all runs in one job."""

from __future__ import annotations

from checkers.claims import ClaimInputs
from checkers.explain import EXPLANATIONS
from checkers.pipeline import check_runs
from checkers.result import CheckResult

from .builder import History, to_parquet
from .dataframe_oracle import plan as dataframe_oracle
from .test_anomalies import CASES
from .test_properties import ACKS_1, INJECTIONS, SAFE, generate


def crowded(h: History) -> None:
    """Many anomalies sharing keys 1 and 2, several processes, txns spanning both keys."""
    h.send(0, 1, 100, 0)
    h.send(0, 1, 101, 1)  # lost: never read, below a read value
    h.send(0, 1, 102, 2)
    h.send(0, 1, 103, 3)
    h.send(0, 1, 102, 4)  # a retried value: duplicate at offsets 2 and 4
    h.send(5, 1, 104, 5, typ="fail")  # read below: G1a
    h.send(6, 2, 200, 0)
    h.send(6, 2, 201, 1)
    h.send(6, 2, 202, 0, typ="info")  # an info send at a taken offset, read: inconsistent
    h.txn(7, [["send", 1, 105, 6], ["send", 2, 203, 3]])
    h.txn(8, [["send", 2, 204, 4], ["send", 1, 106, 7]], typ="info")
    h.txn(9, [["send", 1, 107, 8], ["poll", {1: [(8, 107)]}]])  # precommitted read
    h.txn(10, [["send", 2, 206, 6], ["send", 2, 205, 5]])  # int-nonmonotonic-send
    h.send(11, 2, 207, 7)
    h.send(11, 2, 208, 2)  # nonmonotonic-send for process 11
    h.assign(1, [1, 2])
    h.assign(2, [1, 2])
    h.poll(1, {1: [(0, 100), (2, 102)], 2: [(0, 200), (1, 201)]})
    h.poll(1, {1: [(5, 104), (3, 103)], 2: [(0, 202)]})  # int-nonmonotonic, G1a, rewind
    h.poll(2, {1: [(0, 100)], 2: [(3, 203), (6, 206)]})  # int-poll-skip over 204 and 205
    h.poll(2, {1: [(6, 105), (7, 106)]}, typ="info")  # poll-skip from an info op
    h.assign(2, [2])
    h.poll(2, {2: [(0, 200)]})
    h.assign(2, [1, 2])
    h.poll(2, {1: [(4, 102), (8, 107)], 2: [(7, 207)]})
    h.poll(2, {1: [(2, 102)]})  # nonmonotonic-poll
    h.subscribe(3, [1])
    h.poll(3, {1: [(3, 103), (1, 101)]}, rebalance_log=[{"type": "assigned", "keys": [1]}])
    h.process(4, [(1, 0, 100), (1, 0, 100), (2, 0, 200)])
    h.commit(4, {1: 5})
    h.commit(4, {1: 3})


def comparable(result: CheckResult) -> tuple:
    stats = {k: v for k, v in result.stats.items() if k != "check_s"}
    anomalies = [(a.name, a.count, a.allowed, a.violates, [(w.op_indices, w.detail) for w in a.witnesses])
                 for a in result.anomalies]
    return result.valid, anomalies, [(e.checker, e.error) for e in result.errors], stats


def test_fused_equals_each_check_alone(spark, tmp_path_factory):
    histories = {name: h for name, (h, _) in CASES.items()}
    inputs = {name: claims for name, (_, claims) in CASES.items()}
    for i in range(24):
        g = generate(1000 + i, INJECTIONS[i % len(INJECTIONS)])
        histories[f"gen-{i}"], inputs[f"gen-{i}"] = g.history, SAFE if i % 3 else ACKS_1
    h = History()
    crowded(h)
    histories["crowded"], inputs["crowded"] = h, ClaimInputs(acks="all", min_insync_replicas=2)
    histories["crowded-acks-1"], inputs["crowded-acks-1"] = h, ClaimInputs(acks="1")
    parquet = to_parquet(histories, tmp_path_factory.mktemp("fused"))

    fused = check_runs(parquet, inputs, spark)
    alone = check_runs(parquet, inputs, spark, findings_of=dataframe_oracle.findings)

    assert sorted(fused) == sorted(alone) == sorted(histories)
    for run in sorted(histories):
        assert comparable(fused[run]) == comparable(alone[run]), run
    seen = {a.name for result in fused.values() for a in result.anomalies}
    # The eos checks are not per-key: they run after either detector (test_eos.py).
    per_key = set(EXPLANATIONS) - {"eos-missing", "eos-duplicate", "eos-partial"}
    assert seen == per_key, per_key ^ seen
    crowd = {a.name for a in fused["crowded"].anomalies}
    assert len(crowd) >= 12, crowd
