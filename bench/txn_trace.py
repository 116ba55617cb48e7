"""Where one producer's transactions spend their time, from the brokers' request timelines
(cluster/runtime/request_trace.py) of a `python -m bench.bench_txn --producers 1 --trace-dir DIR`
run; also `python -m bench.txn_trace DIR` on the files of an earlier run.

A transaction is cut at its coordinator's EndTxn answers. Between two of them, in order:
(1) the markers, CompleteCommit and the next transaction's Ongoing (its AddPartitionsToTxn
arrives while the markers are written and is held until CompleteCommit is installed), up to
the answer of that AddPartitionsToTxn; (2) the Produce requests up to the last one's answer
(each waits for the KIP-890 verification with the coordinator, then for acks=all
replication; a second Produce on one connection is taken up only once the first is
answered); (3) the client, from there to its EndTxn; (4) EndTxn, whose PrepareCommit is
written acks=all before the answer. All on the monotonic clock the processes share.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
from collections import Counter
from dataclasses import dataclass

from cluster.protocol.versions import ApiKey

PRODUCE, FETCH = int(ApiKey.PRODUCE), int(ApiKey.FETCH)
ADD_PARTITIONS, END_TXN = int(ApiKey.ADD_PARTITIONS_TO_TXN), int(ApiKey.END_TXN)
VERIFY_VERSION = 4  # AddPartitionsToTxn v4: a partition leader's verify-only request, not a client's
WARM_UP_FRACTION = 0.1  # the first transactions (connections, sessions) are left out
PHASES = ("markers, CompleteCommit, next Ongoing", "Produce (verification, replication)", "client: last Produce -> EndTxn",
          "EndTxn (PrepareCommit)")


@dataclass(frozen=True, slots=True)
class Event:
    time_ns: int
    broker: int
    kind: str  # in, out, send, answered
    api_key: int
    api_version: int
    peer: int  # connection id (in/out) or destination node (send/answered)


def load(directory: str) -> list[Event]:
    events = []
    for path in glob.glob(os.path.join(directory, "broker-*.trace")):
        broker = int(os.path.basename(path)[len("broker-"):-len(".trace")])
        with open(path) as f:
            for line in f:
                t, kind, key, version, peer = line.split()
                events.append(Event(int(t), broker, kind, int(key), int(version), int(peer)))
    events.sort(key=lambda e: e.time_ns)
    return events


@dataclass
class Summary:
    transactions: int
    phases_ms: dict[str, list[float]]
    served_per_txn: Counter[str]
    sent_per_txn: float
    follower_turnaround_ms: float  # a fetch answer received -> the next fetch sent to that leader
    queued_produce_ms: list[float]  # in -> out of each Produce taken up after another on its connection, same transaction


def summarize(events: list[Event]) -> Summary:
    end_outs = [e for e in events if e.kind == "out" and e.api_key == END_TXN]
    if len(end_outs) < 3:
        raise ValueError(f"the trace holds {len(end_outs)} EndTxn answers: too few to cut transactions")
    coordinators = {e.broker for e in end_outs}
    if len(coordinators) != 1:
        raise ValueError(f"EndTxn answered by brokers {sorted(coordinators)}: the phases need one producer (one coordinator)")
    first = max(1, int(len(end_outs) * WARM_UP_FRACTION))
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    queued: list[float] = []
    index = 0
    for start, end in zip(end_outs[first - 1:], end_outs[first:]):
        while index < len(events) and events[index].time_ns <= start.time_ns:
            index += 1
        window = []
        j = index
        while j < len(events) and events[j].time_ns <= end.time_ns:
            window.append(events[j])
            j += 1
        added = [e.time_ns for e in window if e.kind == "out" and e.api_key == ADD_PARTITIONS and e.api_version < VERIFY_VERSION]
        produced = [e.time_ns for e in window if e.kind == "out" and e.api_key == PRODUCE]
        ended = [e.time_ns for e in window if e.kind == "in" and e.api_key == END_TXN]
        if not (added and produced and ended) or not added[-1] <= max(produced) <= ended[-1]:
            continue
        marks = (start.time_ns, added[-1], max(produced), ended[-1], end.time_ns)
        taken_up: dict[tuple[int, int], list[Event]] = {}
        for e in window:
            if e.api_key == PRODUCE:
                taken_up.setdefault((e.broker, e.peer), []).append(e)
        for seq in taken_up.values():
            # in, out, in, out ...: every request after the first waited for the one before
            queued.extend((b.time_ns - a.time_ns) / 1e6 for a, b in zip(seq[2::2], seq[3::2]))
        for name, a, b in zip(PHASES, marks, marks[1:]):
            phases[name].append((b - a) / 1e6)
    timed = [e for e in events if end_outs[first - 1].time_ns < e.time_ns <= end_outs[-1].time_ns]
    count = len(end_outs) - first
    served = Counter(_api(e) for e in timed if e.kind == "in")
    per_txn = Counter({name: n / count for name, n in served.items()})
    turnaround = []
    last_answer: dict[tuple[int, int], int] = {}
    for e in timed:
        if e.api_key != FETCH:
            continue
        if e.kind == "answered":
            last_answer[(e.broker, e.peer)] = e.time_ns
        elif e.kind == "send" and (e.broker, e.peer) in last_answer:
            turnaround.append((e.time_ns - last_answer.pop((e.broker, e.peer))) / 1e6)
    return Summary(count, phases, per_txn, sum(1 for e in timed if e.kind == "send") / count,
                   statistics.median(turnaround) if turnaround else float("nan"), queued)


def _api(e: Event) -> str:
    name = ApiKey(e.api_key).name if e.api_key in ApiKey._value2member_map_ else str(e.api_key)
    return f"{name} v{e.api_version}" if e.api_key == ADD_PARTITIONS else name


def report(summary: Summary) -> list[str]:
    lines = [f"where a transaction's time goes (medians over {summary.transactions} transactions; the phases' medians need not add up):"]
    for name, values in summary.phases_ms.items():
        if values:
            lines.append(f"  {name:40} {statistics.median(values):6.2f} ms (mean {statistics.fmean(values):.2f})")
    if summary.queued_produce_ms:
        lines.append(f"  of which Produce requests taken up after another on the same connection (librdkafka sends one partition per "
                     f"request; the broker takes the next up once the last is answered, as Kafka does): "
                     f"{len(summary.queued_produce_ms) / summary.transactions:.2f} per transaction, "
                     f"{statistics.median(summary.queued_produce_ms):.2f} ms each (median, taken up to answered)")
    lines.append("  requests served per transaction over the 3 brokers: " +
                 ", ".join(f"{name} {n:.1f}" for name, n in summary.served_per_txn.most_common()))
    lines.append(f"  broker-to-broker requests sent per transaction: {summary.sent_per_txn:.1f}; a follower sends its next fetch "
                 f"{summary.follower_turnaround_ms:.3f} ms (median) after the answer to the last one")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="the --trace-dir of a bench_txn run with one producer")
    opts = parser.parse_args(argv)
    print("\n".join(report(summarize(load(opts.directory)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
