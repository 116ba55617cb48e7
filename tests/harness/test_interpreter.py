"""The run loop with real worker threads: completions, retired processes, hangs, stops."""

import threading
import time

import pytest

from harness.generator import Completion, Limit, Repeat, clients, with_nemesis
from harness.history import HistoryWriter, read_history
from harness.interpreter import Interpreter


class Journal:
    """A shared, thread-safe record of what clients did, so tests see real effects."""

    def __init__(self):
        self.lock = threading.Lock()
        self.opened = []
        self.closed = []
        self.applied = []


class ScriptedClient:
    """Performs each op by its value: "ok", "fail", "info", "raise", ("hang", seconds)."""

    def __init__(self, process, journal):
        self.process = process
        self.journal = journal
        with journal.lock:
            journal.opened.append(process)

    def invoke(self, inv):
        action = inv.value
        if isinstance(action, list) and action[0] == "hang":
            time.sleep(action[1])
            return Completion("ok", action)
        if action == "raise":
            raise RuntimeError("client blew up")
        with self.journal.lock:
            self.journal.applied.append((self.process, inv.f, action))
        return Completion(action, action, error=None if action == "ok" else "scripted")

    def close(self):
        with self.journal.lock:
            self.journal.closed.append(self.process)


@pytest.fixture
def journal():
    return Journal()


@pytest.fixture
def history_path(tmp_path):
    return tmp_path / "history.jsonl"


def make(history_path, journal, concurrency=2, **kwargs):
    writer = HistoryWriter(history_path)
    interp = Interpreter(concurrency=concurrency, open_client=lambda p: ScriptedClient(p, journal),
                         history=writer, **kwargs)
    return interp, writer


def check_pairs(ops):
    """Every invocation has exactly one completion by the same process, after it."""
    open_by_process = {}
    for op in ops:
        # Nemesis ops are info on both ends: the first of a pair is the invocation.
        is_invoke = op.type == "invoke" or (op.process == "nemesis" and op.process not in open_by_process)
        if is_invoke:
            assert op.process not in open_by_process, f"process {op.process} invoked twice concurrently"
            open_by_process[op.process] = op
        else:
            inv = open_by_process.pop(op.process)
            assert inv.f == op.f and inv.index < op.index
    assert open_by_process == {}
    assert [op.index for op in ops] == list(range(len(ops)))


def test_every_invocation_gets_exactly_one_completion(history_path, journal):
    interp, writer = make(history_path, journal, concurrency=3)
    script = ["ok", "fail", "ok", "info", "ok", "ok", "fail", "info", "ok"] * 5
    try:
        assert interp.run(clients([{"f": "w", "value": v} for v in script])) is True
    finally:
        interp.close()
        writer.close()
    ops = read_history(history_path)
    check_pairs(ops)
    assert len(ops) == 2 * len(script)
    assert sorted(op.type for op in ops if op.type != "invoke") == sorted(script)


def test_info_retires_the_process_and_the_thread_continues_with_a_fresh_client(history_path, journal):
    interp, writer = make(history_path, journal, concurrency=2)
    gen = clients([{"f": "w", "value": "ok", "process": 0}, {"f": "w", "value": "info", "process": 0},
                   {"f": "w", "value": "ok", "process": 2}, {"f": "w", "value": "raise", "process": 2},
                   {"f": "w", "value": "ok", "process": 4}])
    try:
        assert interp.run(gen)
    finally:
        interp.close()
        writer.close()
    ops = read_history(history_path)
    check_pairs(ops)
    assert [(op.process, op.type) for op in ops if op.type != "invoke"] == [
        (0, "ok"), (0, "info"), (2, "ok"), (2, "info"), (4, "ok")]
    raised = [op for op in ops if op.type == "info" and op.process == 2][0]
    assert raised.error[0] == "exception" and "client blew up" in raised.error[1]
    assert journal.opened == [0, 2, 4]  # one fresh client per process
    assert 0 in journal.closed and 2 in journal.closed


class SlowClosingClient(ScriptedClient):
    """Its close takes CLOSE_S, as librdkafka's consumer close does when the coordinator is
    cut off."""

    CLOSE_S = 2.0

    def close(self):
        time.sleep(self.CLOSE_S)
        super().close()


def test_a_retired_process_is_closed_without_holding_up_its_successor(history_path, journal):
    writer = HistoryWriter(history_path)
    interp = Interpreter(concurrency=1, open_client=lambda p: SlowClosingClient(p, journal), history=writer)
    gen = clients([{"f": "w", "value": "info", "process": 0}, {"f": "w", "value": "ok", "process": 1}])
    try:
        assert interp.run(gen)
        ops = read_history(history_path)
        # process 1 ran while process 0's client was still closing
        with journal.lock:
            assert journal.closed == []
    finally:
        interp.close()
        writer.close()
    check_pairs(ops)
    assert [(op.process, op.type) for op in ops if op.type != "invoke"] == [(0, "info"), (1, "ok")]
    info_ns = next(op.time_ns for op in ops if op.type == "info")
    ok_ns = next(op.time_ns for op in ops if op.type == "ok")
    assert (ok_ns - info_ns) / 1e9 < SlowClosingClient.CLOSE_S / 2
    deadline = time.monotonic() + SlowClosingClient.CLOSE_S * 3
    while 0 not in journal.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 0 in journal.closed  # and it is closed all the same


def test_end_process_retires_on_fail(history_path, journal):
    class Fenced(ScriptedClient):
        def invoke(self, inv):
            return Completion("fail", None, error="producer-fenced", end_process=True)

    writer = HistoryWriter(history_path)
    interp = Interpreter(concurrency=1, open_client=lambda p: Fenced(p, journal), history=writer)
    try:
        interp.run(clients(Limit(3, Repeat({"f": "send"}))))
    finally:
        interp.close()
        writer.close()
    completions = [op for op in read_history(history_path) if op.type != "invoke"]
    assert [op.process for op in completions] == [0, 1, 2]
    assert all(op.extra.get("end_process") for op in completions)


def test_a_hung_op_is_completed_as_info_and_its_late_answer_is_discarded(history_path, journal):
    interp, writer = make(history_path, journal, concurrency=1, op_timeout_s=0.3)
    try:
        interp.run(clients([{"f": "w", "value": ["hang", 1.0]}, {"f": "w", "value": "ok"}]))
        time.sleep(1.0)  # let the abandoned worker answer; the answer must not reach the history
        interp.run(clients([{"f": "w", "value": "ok", "process": 1}]))
    finally:
        interp.close()
        writer.close()
    ops = read_history(history_path)
    check_pairs(ops)
    assert [(op.process, op.type, op.error) for op in ops if op.type != "invoke"] == [
        (0, "info", "no completion within 0.3 s"), (1, "ok", None), (1, "ok", None)]


def test_stopping_completes_outstanding_ops_and_leaves_a_readable_history(history_path, journal):
    interp, writer = make(history_path, journal, concurrency=3, drain_timeout_s=0.2)
    threading.Timer(0.5, interp.stop).start()
    try:
        finished = interp.run(clients(Repeat({"f": "w", "value": ["hang", 0.05]})))
        assert finished is False
    finally:
        interp.close()
        writer.close()
    ops = read_history(history_path)
    check_pairs(ops)
    assert len(ops) > 6


def test_stopping_during_a_long_op_completes_it_as_info(history_path, journal):
    interp, writer = make(history_path, journal, concurrency=1, drain_timeout_s=0.2)
    threading.Timer(0.3, interp.stop).start()
    try:
        assert interp.run(clients({"f": "w", "value": ["hang", 3.0]})) is False
    finally:
        interp.close(timeout_s=0.1)
        writer.close()
    ops = read_history(history_path)
    check_pairs(ops)
    assert ops[-1].type == "info" and ops[-1].error == "interrupted"


def test_nemesis_ops_run_on_the_nemesis_and_complete_as_info(history_path, journal):
    class Faults:
        def __init__(self):
            self.done = []

        def invoke(self, inv):
            self.done.append(inv.f)
            return Completion("ok", {"did": inv.f})

        def close(self):
            pass

    faults = Faults()
    writer = HistoryWriter(history_path)
    interp = Interpreter(concurrency=2, open_client=lambda p: ScriptedClient(p, journal), history=writer,
                         nemesis=faults)
    try:
        interp.run(with_nemesis([{"f": "start-kill"}, {"f": "stop-kill"}], Limit(4, Repeat({"f": "w", "value": "ok"}))))
        interp.record_nemesis("stop-kill", "heal", lambda: {"healed": True})
    finally:
        interp.close()
        writer.close()
    ops = read_history(history_path)
    check_pairs(ops)
    nem = [op for op in ops if op.process == "nemesis"]
    assert [(op.type, op.f) for op in nem] == [("info", "start-kill")] * 2 + [("info", "stop-kill")] * 4
    assert nem[1].value == {"did": "start-kill"} and nem[-1].value == {"healed": True}
    assert faults.done == ["start-kill", "stop-kill"]


def test_sleep_and_log_are_not_recorded(history_path, journal, caplog):
    from harness.generator import Log, Phases, Sleep

    interp, writer = make(history_path, journal, concurrency=1)
    try:
        interp.run(clients(Phases({"f": "w", "value": "ok"}, Log("between"), Sleep(0.2), {"f": "w", "value": "ok"})))
    finally:
        interp.close()
        writer.close()
    ops = read_history(history_path)
    assert [op.f for op in ops] == ["w"] * 4
    assert ops[2].time_ns - ops[1].time_ns >= 200_000_000  # the second phase began after the sleep
