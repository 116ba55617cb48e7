"""The eos workload's exactly-once checks (checkers/eos.py) on hand-built histories: each
anomaly found with its witness, the near misses clean, the claims that judge them, and the
counts equal to the plain-Python oracle (eos_oracle.py). All cases run in one Spark job."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from checkers.claims import ClaimInputs
from checkers.eos import COPY_ID_BITS
from checkers.pipeline import check_runs
from checkers.result import CheckResult

from .builder import History, to_parquet
from .eos_oracle import eos_counts

P = 2  # input partitions 0..1 are keys 0..1; output partition p is key P + p
EOS = ClaimInputs(workload="eos", acks="all", min_insync_replicas=2, replication_factor=3, idempotence=True,
                  transactional=True)
PLAIN = ClaimInputs(workload="eos", acks="all", min_insync_replicas=2, replication_factor=3, idempotence=True,
                    transactional=False)
CASES: dict[str, tuple[History, ClaimInputs]] = {}
FACTS: dict[str, dict[str, Any]] = {}


class EosHistory(History):
    """A History whose copies write encoded values (v << COPY_ID_BITS | copy id) and whose
    verifier names output records by (key, offset)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0
        self.placed: dict[tuple[int, int], int] = {}  # output (key, offset) → encoded value


def case(name: str, inputs: ClaimInputs = EOS):
    def register(fn):
        h = EosHistory()
        FACTS[name] = fn(h) or {}
        CASES[name] = (h, inputs)
        return fn
    return register


def copy(h: EosHistory, process: int, polled: dict[int, list[tuple[int, int]]],
         sends: list[tuple[int, int | None, int]], typ: str = "ok") -> int:
    """A copy transaction: polled input records {key: [(offset, value)]} and output sends
    (key, offset, input value), written encoded as the workload does."""
    h.copies += 1
    value: list = [["poll", {str(k): [list(r) for r in rs] for k, rs in polled.items()}]] if polled else []
    for k, o, v in sends:
        encoded = v << COPY_ID_BITS | h.copies
        if o is not None:
            h.placed[(k, o)] = encoded
        value.append(["send", k, [o, encoded]])
    return h.op(process, "copy", None, typ, value)


def verify(h: EosHistory, records: dict[int, list[tuple[int, int]]], typ: str = "ok") -> int:
    """The verifier's read: {key: [(offset, value)]}, output records given by their input
    value and read as the copy at that offset wrote them."""
    read = {}
    for k, pairs in records.items():
        if k >= P:
            assert all(h.placed[(k, o)] >> COPY_ID_BITS == v for o, v in pairs)
            pairs = [(o, h.placed[(k, o)]) for o, _ in pairs]
        read[k] = pairs
    return h.poll(9, read, typ)


def clean_run(h: EosHistory) -> dict[str, Any]:
    """Two values in, each copied once by a committed copy; an aborted copy before it."""
    h.send(0, 0, 1, 0)
    h.send(0, 1, 2, 0)
    aborted = copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)], "fail")
    copy(h, 1, {0: [(0, 1)], 1: [(0, 2)]}, [(P + 0, 2, 1), (P + 1, 0, 2)])
    h.crash(2)
    # The aborted copy's record (offset 0) and the commit markers (1, 3) are never read.
    verify(h, {0: [(0, 1)], 1: [(0, 2)], P + 0: [(2, 1)], P + 1: [(0, 2)]})
    return {"aborted": aborted}


@case("clean")
def _(h: EosHistory):
    return clean_run(h)


@case("missing")
def _(h: EosHistory):
    producer = h.send(0, 0, 1, 0)
    h.send(0, 0, 2, 1)
    consumer = copy(h, 1, {0: [(0, 1), (1, 2)]}, [(P + 0, 0, 1), (P + 0, 1, 2)])
    verify(h, {0: [(0, 1), (1, 2)], P + 0: [(1, 2)]})  # the output lost value 1
    return {"producer": producer, "copy": consumer}


@case("missing-never-copied")
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    unacked = h.send(0, 1, 5, None, "info")  # landed: the verifier reads it in the input
    copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)])
    verify(h, {0: [(0, 1)], 1: [(0, 5)], P + 0: [(0, 1)]})
    return {"unacked": unacked}


@case("duplicate")
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    first = copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)])
    second = copy(h, 2, {0: [(0, 1)]}, [(P + 0, 2, 1)])  # a zombie committed the same input again
    verify(h, {0: [(0, 1)], P + 0: [(0, 1), (2, 1)]})
    return {"first": first, "second": second}


@case("duplicate-plain", PLAIN)
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)])
    copy(h, 2, {0: [(0, 1)]}, [(P + 0, 1, 1)])
    verify(h, {0: [(0, 1)], P + 0: [(0, 1), (1, 1)]})


@case("input-duplicate-copied-twice")
def _(h: EosHistory):
    # The input holds value 1 twice (a producer retry): two copies are the right answer.
    h.send(0, 0, 1, 0)
    copy(h, 1, {0: [(0, 1), (1, 1)]}, [(P + 0, 0, 1), (P + 0, 1, 1)])
    verify(h, {0: [(0, 1), (1, 1)], P + 0: [(0, 1), (1, 1)]})


@case("aborted-visible")
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    aborted = copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)], "fail")
    copy(h, 1, {0: [(0, 1)]}, [(P + 0, 2, 1)])
    reader = verify(h, {0: [(0, 1)], P + 0: [(0, 1), (2, 1)]})
    return {"aborted": aborted, "reader": reader}


@case("partial")
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    h.send(0, 1, 2, 0)
    committed = copy(h, 1, {0: [(0, 1)], 1: [(0, 2)]}, [(P + 0, 0, 1), (P + 1, 0, 2)])
    h.send(0, 0, 3, 1)
    h.send(0, 1, 4, 1)
    unknown = copy(h, 1, {0: [(1, 3)], 1: [(1, 4)]}, [(P + 0, 2, 3), (P + 1, 2, 4)], "info")
    # Value 2 reappears from a later copy, so only atomicity breaks, not exactly-once counts.
    copy(h, 2, {1: [(0, 2), (1, 4)]}, [(P + 1, 4, 2), (P + 1, 5, 4)])
    verify(h, {0: [(0, 1), (1, 3)], 1: [(0, 2), (1, 4)], P + 0: [(0, 1), (2, 3)], P + 1: [(4, 2), (5, 4)]})
    return {"committed": committed, "unknown": unknown}


@case("info-all-or-nothing")
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)], "info")  # unknown, and it did commit: fine
    h.send(0, 0, 2, 1)
    copy(h, 2, {0: [(1, 2)]}, [(P + 0, 2, 2)], "info")  # unknown, and it did not
    copy(h, 2, {0: [(1, 2)]}, [(P + 0, 4, 2)])
    verify(h, {0: [(0, 1), (1, 2)], P + 0: [(0, 1), (4, 2)]})


@case("no-verifier")
def _(h: EosHistory):
    h.send(0, 0, 1, 0)
    copy(h, 1, {0: [(0, 1)]}, [(P + 0, 0, 1)])
    h.op(9, "poll", [["poll"]], "fail", None, error=["verify-timeout", {}])


def _random_history(seed: int) -> EosHistory:
    """Producers, copies of every outcome with faults injected into what the verifier sees."""
    rng = random.Random(seed)
    h = EosHistory()
    inputs: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for v in range(1, 13):
        k = rng.randrange(P)
        inputs[k].append((len(inputs[k]), v))
        h.send(0, k, v, len(inputs[k]) - 1, rng.choice(["ok", "ok", "ok", "info"]))
    out: dict[int, list[tuple[int, int]]] = {P: [], P + 1: []}
    next_offset = {P: 0, P + 1: 0}
    for k, records in inputs.items():
        for i in range(0, len(records), 2):
            batch = records[i:i + 2]
            for _ in range(rng.randrange(1, 3)):
                typ = rng.choice(["ok", "ok", "fail", "info"])
                sends = []
                for _, v in batch:
                    sends.append((P + k, next_offset[P + k], v))
                    next_offset[P + k] += 1
                copy(h, 1 + k, {k: batch}, sends, typ)
                for send in sends:
                    shown = {"ok": 0.9, "fail": 0.1, "info": 0.5}[typ]
                    if rng.random() < shown:
                        out[send[0]].append((send[1], send[2]))
    verify(h, {**{k: rs for k, rs in inputs.items() if rng.random() < 0.9}, **out})
    return h


for _seed in range(12):
    CASES[f"random-{_seed}"] = (_random_history(_seed), EOS)


@pytest.fixture(scope="module")
def results(spark, tmp_path_factory) -> dict[str, CheckResult]:
    root: Path = tmp_path_factory.mktemp("eos")
    parquet = to_parquet({name: h for name, (h, _) in CASES.items()}, root)
    return check_runs(parquet, {name: inputs for name, (_, inputs) in CASES.items()}, spark)


def found(result: CheckResult) -> dict[str, Any]:
    return {a.name: a for a in result.anomalies}


def test_clean_history_is_valid_with_exactly_once_claimed(results):
    r = results["clean"]
    assert r.valid is True, (r.anomalies, r.errors)
    assert found(r) == {}
    claims = {c.name: c for c in r.claims}
    assert claims["exactly-once"].holds and "KIP-447" in claims["exactly-once"].reason
    assert claims["at-least-once"].holds


def test_missing_value_names_its_producer_and_copies(results):
    r = results["missing"]
    a = found(r)["eos-missing"]
    assert r.valid is False and a.count == 1 and not a.allowed
    assert set(a.violates) == {"exactly-once", "at-least-once"}
    w = a.witnesses[0]
    facts = FACTS["missing"]
    assert w.detail["value"] == 1 and w.detail["key"] == 0 and w.detail["offset"] == 0
    assert w.detail["copied_by"] == [[str(facts["copy"]), "ok"]] and w.detail["count"] == 0
    assert w.op_indices == [facts["producer"], facts["copy"]]
    # The committed copy's output at offset 0 is gone: its atomicity broke too.
    assert found(r)["eos-partial"].count == 1


def test_value_landed_without_ack_must_be_copied_too(results):
    a = found(results["missing-never-copied"])["eos-missing"]
    assert a.count == 1 and a.witnesses[0].detail == {"value": 5, "key": 1, "offset": 0, "count": 0}


def test_duplicate_counts_output_places(results):
    r = results["duplicate"]
    a = found(r)["eos-duplicate"]
    assert a.count == 1 and a.violates == ["exactly-once"]
    facts = FACTS["duplicate"]
    assert a.witnesses[0].detail["output"] == [[P + 0, 0], [P + 0, 2]] and a.witnesses[0].detail["count"] == 2
    assert facts["first"] in a.witnesses[0].op_indices and facts["second"] in a.witnesses[0].op_indices


def test_duplicate_is_allowed_without_transactions(results):
    r = results["duplicate-plain"]
    a = found(r)["eos-duplicate"]
    assert a.allowed and r.valid is True
    claims = {c.name: c for c in r.claims}
    assert not claims["exactly-once"].holds and claims["at-least-once"].holds


def test_an_input_duplicate_copied_twice_is_exactly_once(results):
    assert "eos-duplicate" not in found(results["input-duplicate-copied-twice"])


def test_aborted_copy_output_visible_is_g1a(results):
    r = results["aborted-visible"]
    a = found(r)["G1a"]
    facts = FACTS["aborted-visible"]
    assert a.count == 1 and not a.allowed and a.violates == ["no-aborted-reads"]
    assert a.witnesses[0].op_indices == [facts["aborted"], facts["reader"]]
    assert a.witnesses[0].detail == {"key": P + 0, "value": 1 << COPY_ID_BITS | 1, "offset": 0}
    # The value is also visible twice: the aborted copy and the committed one.
    assert found(r)["eos-duplicate"].count == 1


def test_partial_copies_found(results):
    a = found(results["partial"])["eos-partial"]
    facts = FACTS["partial"]
    assert a.count == 2 and a.violates == ["exactly-once"]
    by_op = {w.detail["op"]: w.detail for w in a.witnesses}
    assert by_op[facts["committed"]] == {"op": facts["committed"], "type": "ok", "records": 2, "visible": 1,
                                         "invisible": [[P + 1, 0, 2 << COPY_ID_BITS | 1]]}
    assert by_op[facts["unknown"]]["type"] == "info" and by_op[facts["unknown"]]["visible"] == 1
    assert "eos-missing" not in found(results["partial"]) and "eos-duplicate" not in found(results["partial"])


def test_unknown_copy_all_or_nothing_is_atomic(results):
    r = results["info-all-or-nothing"]
    assert r.valid is True, r.anomalies


def test_no_verifier_read_is_unknown(results):
    r = results["no-verifier"]
    # Unknown at best (the acknowledged input, never read, is also `unseen`).
    assert r.valid is not True
    assert any(e.checker == "eos" for e in r.errors)
    assert not any(a.name.startswith("eos-") for a in r.anomalies)


@pytest.mark.parametrize("name", [n for n in CASES if n != "no-verifier"])
def test_counts_match_the_oracle(results, name):
    expected = eos_counts(CASES[name][0].ops)
    assert expected is not None
    got = {a.name: a.count for a in results[name].anomalies if a.name.startswith("eos-") or a.name == "G1a"}
    assert got == expected


def test_random_histories_find_anomalies(results):
    # The oracle comparison is only worth something if the random histories are not all clean.
    kinds = {a.name for n in CASES if n.startswith("random-") for a in results[n].anomalies}
    assert {"eos-missing", "eos-duplicate", "G1a", "eos-partial"} <= kinds


def test_eos_spec_claims_exactly_once_unless_txn_false():
    from checkers.claims import claims_for

    spec = {"workload": "eos", "brokers": 3, "client_config": {"acks": "all", "isolation.level": "read_committed"}}
    inputs = ClaimInputs.from_spec_json(spec)
    assert inputs.transactional
    assert {c.name: c.holds for c in claims_for(inputs)}["exactly-once"]
    plain = ClaimInputs.from_spec_json({**spec, "workload_options": {"txn": "false"}})
    assert not plain.transactional
    assert not {c.name: c.holds for c in claims_for(plain)}["exactly-once"]
    uncommitted = ClaimInputs.from_spec_json({**spec, "client_config": {"isolation.level": "read_uncommitted"}})
    assert not {c.name: c.holds for c in claims_for(uncommitted)}["exactly-once"]
