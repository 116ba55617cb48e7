"""Hand-made run directories for the report, index and serve tests, and checks that they are
what they claim to be (a history whose witnesses are real ops).

`write_lost_write_run` writes a small realistic run: three client processes sending to and
polling two partitions for about six seconds, a network partition (1.5–3.0 s) and a broker
kill (3.6–4.6 s), a send that times out (info, so its process is retired and the worker goes
on as a new process), and one acknowledged write (k1 offset 3) that no poll ever
returns — a lost write, witnessed in results.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from checkers.result import Anomaly, CheckerError, CheckResult, Claim, Witness
from harness import store
from harness.history import HistoryWriter, Op, read_history

LOST_KEY, LOST_OFFSET = 1, 3
SPEC_COMMAND = "logquake test --workload queue --nemesis partition,kill --seed 42 --time-limit 6 --concurrency 3"


class HistoryBuilder:
    """Collects ops at arbitrary times, then writes them in time order with their indices."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, str, object, str, object, object, str | None]] = []

    def op(self, time_s: float, type_: str, process, f: str, value=None, error=None, tag: str | None = None) -> None:
        self.events.append((time_s, len(self.events), type_, process, f, value, error, tag))

    def write(self, path: Path) -> dict[str, int]:
        """Write history.jsonl; return the index of each tagged op."""
        tagged: dict[str, int] = {}
        with HistoryWriter(path) as writer:
            for index, (time_s, _, type_, process, f, value, error, tag) in enumerate(sorted(self.events)):
                writer.append(Op(index, int(1_000_000_000 + time_s * 1e9), type_, process, f, value, error))
                if tag:
                    tagged[tag] = index
        return tagged


def _in_partition(t: float) -> bool:
    return 1.5 <= t <= 3.0


def _write_history(path: Path) -> tuple[list[int], int]:
    """Returns the op indices of the lost write's invoke and ok, and its value."""
    h = HistoryBuilder()
    acked: dict[int, list[tuple[float, int, int]]] = {0: [], 1: []}  # key -> (ack time, offset, value)
    next_offset = {0: 0, 1: 0}
    value = 0
    h.op(0.0, "invoke", 0, "assign", [0, 1])
    h.op(0.01, "ok", 0, "assign", [0, 1])
    # Three sender workers; each waits for its op to complete before the next one.
    workers = [[0.05 + worker * 0.03, worker + 1] for worker in range(3)]  # next time, process
    lost_value = None
    while True:
        worker = min(range(3), key=lambda w: workers[w][0])
        t, process = workers[worker]
        if t >= 5.6:
            break
        if process == 3 and 2.0 < t < 2.4:
            # a send that times out during the partition: unknown outcome, process retired
            h.op(t, "invoke", process, "send", [["send", 0, 999]])
            h.op(t + 0.5, "info", process, "send", [["send", 0, 999]], error="timed out")
            workers[worker] = [t + 0.55, 5]
            continue
        key = value % 2
        value += 1
        latency = 0.3 if _in_partition(t) else 0.004 + 0.001 * (value % 3)
        offset = next_offset[key]
        next_offset[key] += 1
        lost = key == LOST_KEY and offset == LOST_OFFSET
        h.op(t, "invoke", process, "send", [["send", key, value]], tag="lost-invoke" if lost else None)
        h.op(t + latency, "ok", process, "send", [["send", key, [offset, value]]], tag="lost-ok" if lost else None)
        if lost:
            lost_value = value
        else:
            acked[key].append((t + latency, offset, value))
        workers[worker] = [t + latency + 0.08, process]
    # A consumer (process 0) polls every 0.5 s and gets what was acknowledged since its last
    # poll; it stalls while its broker is killed.
    position = {0: 0, 1: 0}
    t = 0.5
    while t < 6.0:
        if not 3.6 <= t <= 4.6:
            batch = {}
            for key in (0, 1):
                new = [(o, v) for at, o, v in acked[key] if at < t and o >= position[key]]
                batch[key] = [[o, v] for o, v in sorted(new)]
                if new:
                    position[key] = max(o for o, _ in new) + 1
            h.op(t, "invoke", 0, "poll", [["poll"]])
            h.op(t + 0.003, "ok", 0, "poll", [["poll", batch]])
        t += 0.5
    # the final poll drains everything else acknowledged (the lost write never comes back)
    rest = {key: [[o, v] for at, o, v in sorted(acked[key], key=lambda r: r[1]) if o >= position[key]] for key in (0, 1)}
    h.op(6.1, "invoke", 4, "poll", [["poll"]])
    h.op(6.13, "ok", 4, "poll", [["poll", rest]])
    for time_s, type_, f, targets in (
        (1.5, "invoke", "start-partition", {"isolated": ["n1"]}),
        (1.51, "info", "start-partition", {"isolated": ["n1"], "rest": ["n2", "n3"]}),
        (3.0, "invoke", "stop-partition", None),
        (3.01, "info", "stop-partition", "healed"),
        (3.6, "invoke", "start-kill", ["n2"]),
        (3.62, "info", "start-kill", {"killed": ["n2"]}),
        (4.6, "invoke", "stop-kill", ["n2"]),
        (4.8, "info", "stop-kill", {"restarted": ["n2"]}),
    ):
        h.op(time_s, type_, "nemesis", f, targets)
    tagged = h.write(path)
    return [tagged["lost-invoke"], tagged["lost-ok"]], lost_value


def lost_write_result(witness: list[int], lost_value: int) -> CheckResult:
    return CheckResult(
        valid=False,
        claims=[
            Claim("acked-writes-durable", "Every acknowledged write is read by the final polls.", "acks=all and min.insync.replicas=2", True),
            Claim("per-partition-order", "Offsets in a partition are read in order.", "one consumer per partition (assign)", True),
            Claim("exactly-once", "Every write is delivered exactly once.", "enable.idempotence=false: no exactly-once claim", False),
        ],
        anomalies=[
            Anomaly(
                name="lost-write",
                count=1,
                allowed=False,
                explanation=f"k{LOST_KEY} offset {LOST_OFFSET} (value {lost_value}) was acknowledged, but no poll ever returned it although later offsets were read.",
                witnesses=[Witness(witness, {"key": LOST_KEY, "offset": LOST_OFFSET, "value": lost_value})],
                violates=["acked-writes-durable"],
            ),
            Anomaly(
                name="duplicate",
                count=0,
                allowed=True,
                explanation="No write was read at two offsets.",
                witnesses=[],
                violates=[],
            ),
        ],
        stats={"ops": 0, "sends_ok": 0},
    )


def write_spec(run_dir: Path, name: str = "queue-partition-kill", **overrides) -> None:
    spec = {
        "name": name,
        "workload": "queue",
        "nemeses": ["partition", "kill"],
        "seed": 42,
        "time_limit_s": 6,
        "concurrency": 3,
        "client_config": {"acks": "all", "enable.idempotence": "false"},
        "client_config_overrides": {"acks": "all"},
        "cluster_config": {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"},
        "command": SPEC_COMMAND,
    }
    spec.update(overrides)
    (run_dir / store.SPEC_FILE).write_text(json.dumps(spec, indent=2))


def write_lost_write_run(run_dir: Path, *, with_results: bool = True) -> list[int]:
    """Fill `run_dir` with spec.json, history.jsonl and (optionally) results.json; return
    the lost write's witness op indices."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_spec(run_dir)
    witness, lost_value = _write_history(run_dir / store.HISTORY_FILE)
    (run_dir / store.HARNESS_LOG_FILE).write_text("seed 42\n")
    (run_dir / "brokers").mkdir(exist_ok=True)
    (run_dir / "brokers" / "1.log").write_text("broker 1 started\n")
    if with_results:
        lost_write_result(witness, lost_value).save(run_dir / store.RESULTS_FILE)
    return witness


def write_valid_run(run_dir: Path, name: str = "queue-none") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_spec(run_dir, name=name, nemeses=[])
    h = HistoryBuilder()
    for value in range(20):
        h.op(value * 0.1, "invoke", 0, "send", [["send", 0, value]])
        h.op(value * 0.1 + 0.002, "ok", 0, "send", [["send", 0, [value, value]]])
    h.op(2.5, "invoke", 1, "poll", [["poll"]])
    h.op(2.51, "ok", 1, "poll", [["poll", {0: [[v, v] for v in range(20)]}]])
    h.write(run_dir / store.HISTORY_FILE)
    CheckResult(valid=True, claims=[Claim("acked-writes-durable", "Acknowledged writes survive.", "acks=all", True)]).save(
        run_dir / store.RESULTS_FILE
    )


def write_checker_error_run(run_dir: Path, name: str = "queue-crashed-checker") -> None:
    write_valid_run(run_dir, name=name)
    CheckResult(valid="unknown", errors=[CheckerError("offsets", "Py4JJavaError: executor lost")]).save(run_dir / store.RESULTS_FILE)


# ---- the fixtures are what they say -----------------------------------------------------


def test_lost_write_run_witnesses_an_acked_write_that_no_poll_returns(tmp_path):
    witness = write_lost_write_run(tmp_path / "run")
    ops = read_history(tmp_path / "run" / store.HISTORY_FILE)
    assert [op.index for op in ops] == list(range(len(ops)))
    invoke, ok = (ops[i] for i in witness)
    lost_value = invoke.value[0][2]
    assert (invoke.type, ok.type, ok.value) == ("invoke", "ok", [["send", LOST_KEY, [LOST_OFFSET, lost_value]]])
    read = [r for op in ops if op.f == "poll" and op.type == "ok" for r in op.value[0][1].get(LOST_KEY, [])]
    assert lost_value not in {value for _, value in read}
    assert max(offset for offset, _ in read) > LOST_OFFSET  # later offsets were read
    # each process has at most one operation in flight
    in_flight: set = set()
    for op in ops:
        if op.is_client:
            assert (op.type == "invoke") != (op.process in in_flight), op
            (in_flight.add if op.type == "invoke" else in_flight.discard)(op.process)
    faults = [op.f for op in ops if op.process == "nemesis"]
    assert {"start-partition", "stop-partition", "start-kill", "stop-kill"} <= set(faults)
    assert any(op.type == "info" and op.is_client for op in ops)
