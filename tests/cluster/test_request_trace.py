"""The opt-in request timeline (cluster/runtime/request_trace.py) and bench/txn_trace.py's
reading of it: a broker's file round-trips, and the phases of a known timeline of two
transactions come out as laid down."""

from __future__ import annotations

import pytest

from bench import txn_trace
from cluster.protocol.versions import ApiKey
from cluster.runtime import request_trace

MS = 1_000_000
COORDINATOR, OTHER = 0, 1


def _transaction(start_ms: float, out: list[tuple[int, int, str, int, int, int]]) -> None:
    """One transaction after an EndTxn answered at `start_ms`: the next AddPartitionsToTxn
    answered 3 ms later (a verify-only v4 in between), two Produce requests on one
    connection of the other broker (the second taken up as the first is answered), the
    client's EndTxn 0.5 ms after the last answer, answered 1 ms later."""
    t = lambda ms: int((start_ms + ms) * MS)  # noqa: E731
    out += [
        (t(0.5), COORDINATOR, "in", ApiKey.ADD_PARTITIONS_TO_TXN, 3, 7),
        (t(1.0), OTHER, "send", ApiKey.FETCH, 15, COORDINATOR),
        (t(1.2), OTHER, "answered", ApiKey.FETCH, 15, COORDINATOR),
        (t(1.3), OTHER, "send", ApiKey.FETCH, 15, COORDINATOR),
        (t(3.0), COORDINATOR, "out", ApiKey.ADD_PARTITIONS_TO_TXN, 3, 7),
        (t(3.2), OTHER, "in", ApiKey.PRODUCE, 9, 4),
        (t(3.3), COORDINATOR, "in", ApiKey.ADD_PARTITIONS_TO_TXN, 4, 9),  # verification: not the client's
        (t(3.4), COORDINATOR, "out", ApiKey.ADD_PARTITIONS_TO_TXN, 4, 9),
        (t(4.0), OTHER, "out", ApiKey.PRODUCE, 9, 4),
        (t(4.0), OTHER, "in", ApiKey.PRODUCE, 9, 4),
        (t(5.5), OTHER, "out", ApiKey.PRODUCE, 9, 4),
        (t(6.0), COORDINATOR, "in", ApiKey.END_TXN, 3, 7),
        (t(7.0), COORDINATOR, "out", ApiKey.END_TXN, 3, 7),
    ]


def test_a_broker_trace_round_trips_and_the_phases_are_measured(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_trace, "TRACE", None)
    monkeypatch.delenv(request_trace.ENV, raising=False)
    assert request_trace.install_from_env(0) is None and request_trace.TRACE is None  # off unless asked

    events: list[tuple[int, int, str, int, int, int]] = [(0, COORDINATOR, "out", ApiKey.END_TXN, 3, 7)]
    for i in range(12):
        _transaction(i * 7.0, events)
    monkeypatch.setenv(request_trace.ENV, str(tmp_path))
    traces = {broker: request_trace.install_from_env(broker) for broker in (COORDINATOR, OTHER)}
    for t, broker, kind, key, version, peer in events:
        trace = traces[broker]
        assert trace is not None
        trace._events.append((t, kind, int(key), version, peer))  # the recorded clock is the test's
    for trace in traces.values():
        assert trace is not None
        trace.write()

    loaded = txn_trace.load(str(tmp_path))
    assert [(e.time_ns, e.broker, e.kind, e.api_key, e.api_version, e.peer) for e in loaded] == \
        sorted(((t, b, k, int(a), v, p) for t, b, k, a, v, p in events), key=lambda e: e[0])
    summary = txn_trace.summarize(loaded)
    assert summary.transactions == 12  # between 13 EndTxn answers (a tenth of 13 rounds down to the one before the first)
    got = {name: sorted(set(round(v, 6) for v in values)) for name, values in summary.phases_ms.items()}
    assert got == {"markers, CompleteCommit, next Ongoing": [3.0], "Produce (verification, replication)": [2.5],
                   "client: last Produce -> EndTxn": [0.5], "EndTxn (PrepareCommit)": [1.0]}
    assert [round(v, 6) for v in summary.queued_produce_ms] == [1.5] * 12
    assert summary.served_per_txn["PRODUCE"] == 2 and summary.served_per_txn["ADD_PARTITIONS_TO_TXN v4"] == 1
    assert summary.follower_turnaround_ms == pytest.approx(0.1)
    assert any("markers, CompleteCommit, next Ongoing" in line for line in txn_trace.report(summary))


def test_phases_need_one_coordinator() -> None:
    events = [txn_trace.Event(i * MS, i % 2, "out", int(ApiKey.END_TXN), 3, 1) for i in range(4)]
    with pytest.raises(ValueError, match="one producer"):
        txn_trace.summarize(events)
