"""history.jsonl as the batched writer streams it: what reaches the disk, and when."""

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.generator import Completion, Limit, Repeat, clients, with_nemesis
from harness.history import HistoryWriteError, HistoryWriter, Op, encode_op, read_history
from harness.interpreter import Interpreter

REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000.0  # a flush interval no test waits out: only explicit flushes count


def op(index, **changes):
    fields = dict(index=index, time_ns=index * 10, type="ok", process=index % 3, f="send",
                  value=[["send", index % 5, [index, index + 100]]])
    fields.update(changes)
    return Op(**fields)


def lines_on_disk(path):
    return path.read_bytes().count(b"\n")


def wait_until(condition, deadline_s=10.0):
    """Poll a condition; a generous deadline only guards against hanging (no timing claim)."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def test_lines_encode_as_the_standard_library_would(tmp_path):
    ops = [
        op(0),
        op(1, f="poll", value=[["poll", {3: [[0, 1], [1, 2]], 12: []}]], extra={"poll_ms": 100}),
        op(2, type="info", error=["network", "broker: ünreachable ✗"], extra={"end_process": True}),
        op(3, process="nemesis", f="start-partition", value={"grudge": {"1": ["2", "3"]}}),
        op(4, value=2**70),  # beyond orjson's 64-bit integers: the standard library writes it
        op(5, value=[1.5, -0.25, None, True]),
    ]
    for one in ops:
        line = encode_op(one)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert json.loads(line) == json.loads(json.dumps(one.to_json(), separators=(",", ":")))
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        for one in ops:
            writer.append(one)
    back = read_history(path)
    assert [o.value for o in back] == [o.value for o in ops]
    assert back[1].value[0][1] == {3: [[0, 1], [1, 2]], 12: []}  # int keys come back as ints
    assert back[2].extra == {"end_process": True}


def test_a_value_json_cannot_encode_is_refused_by_name(tmp_path):
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        with pytest.raises(TypeError, match="set"):
            writer.append(op(0, value={1, 2}))
        assert writer.count == 0


def test_the_flusher_streams_lines_without_an_explicit_flush(tmp_path):
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path, flush_interval_ms=5)
    try:
        for i in range(3):
            writer.append(op(i))
        assert wait_until(lambda: lines_on_disk(path) == 3)
        writer.append(op(3))
        assert wait_until(lambda: lines_on_disk(path) == 4)
    finally:
        writer.close()
    assert [o.index for o in read_history(path)] == [0, 1, 2, 3]


def test_flush_writes_everything_at_once_and_close_writes_the_rest(tmp_path):
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path, flush_interval_ms=HOUR_MS)
    for i in range(5):
        writer.append(op(i))
    assert lines_on_disk(path) == 0  # batched: nothing written before the interval or a flush
    writer.flush()
    assert lines_on_disk(path) == 5
    writer.append(op(5))
    writer.close()
    assert writer.closed
    assert [o.index for o in read_history(path, allow_torn_tail=False)] == list(range(6))
    with pytest.raises(HistoryWriteError, match="closed"):
        writer.append(op(6))
    writer.close()  # closing twice is harmless


def test_a_full_buffer_is_written_by_the_appending_thread(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, flush_interval_ms=HOUR_MS, max_pending_lines=4) as writer:
        for i in range(9):
            writer.append(op(i))
        assert lines_on_disk(path) == 8  # two full batches of 4; the ninth line waits


def test_an_unclosed_writer_is_flushed_when_collected(tmp_path):
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path, flush_interval_ms=HOUR_MS)
    writer.append(op(0))
    del writer
    gc.collect()
    assert [o.index for o in read_history(path)] == [0]


def test_a_failed_write_is_raised_naming_the_file_and_not_swallowed():
    writer = HistoryWriter("/dev/full", flush_interval_ms=HOUR_MS)
    writer.append(op(0))
    with pytest.raises(HistoryWriteError, match="/dev/full"):
        writer.flush()
    with pytest.raises(HistoryWriteError, match="failed earlier"):
        writer.append(op(1))
    with pytest.raises(HistoryWriteError):
        writer.close()


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="flush_interval_ms"):
        HistoryWriter(tmp_path / "a.jsonl", flush_interval_ms=0)
    with pytest.raises(ValueError, match="max_pending_lines"):
        HistoryWriter(tmp_path / "b.jsonl", max_pending_lines=0)


WRITER_SCRIPT = textwrap.dedent("""
    import sys
    from harness.history import HistoryWriter, Op
    writer = HistoryWriter(sys.argv[1], flush_interval_ms=float(sys.argv[2]))
    index = 0
    def append():
        global index
        writer.append(Op(index, index, "ok", index % 4, "send", [["send", index % 7, [index, index]]],
                         None, {"pad": "x" * (index % 50)}))
        index += 1
    for _ in range(1000):
        append()
    writer.flush()
    print(index, flush=True)  # everything up to here is on disk
    mode = sys.argv[3]
    if mode == "exit":
        for _ in range(500):
            append()
        sys.exit(0)  # no close(): the exit-time finalizer must write the rest
    while True:
        append()
""")


def run_writer(path, mode, flush_interval_ms):
    return subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(path), str(flush_interval_ms), mode],
                            cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("flush_interval_ms", [1.0, 50.0])
def test_a_sigkilled_writer_leaves_an_intact_readable_prefix(tmp_path, flush_interval_ms):
    path = tmp_path / "history.jsonl"
    proc = run_writer(path, "forever", flush_interval_ms)
    try:
        flushed = int(proc.stdout.readline())
        # Let it keep appending (and its flusher keep writing) for a while, then kill it
        # mid-stream: no close, no finalizer.
        assert wait_until(lambda: lines_on_disk(path) > flushed + 2000)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    ops = read_history(path)  # a torn last line, if any, is skipped; anything else raises
    assert len(ops) > flushed + 2000
    assert [o.index for o in ops] == list(range(len(ops)))  # a prefix: nothing missing, nothing reordered
    assert all(o.value == [["send", o.index % 7, [o.index, o.index]]] and o.extra == {"pad": "x" * (o.index % 50)}
               for o in ops)


def test_a_writer_that_exits_without_closing_still_writes_everything(tmp_path):
    path = tmp_path / "history.jsonl"
    proc = run_writer(path, "exit", HOUR_MS)
    try:
        assert int(proc.stdout.readline()) == 1000
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
    assert [o.index for o in read_history(path, allow_torn_tail=False)] == list(range(1500))


class Client:
    def invoke(self, inv):
        return Completion("ok", inv.value)

    def close(self):
        pass


class Nemesis:
    """Records how many history lines were on disk when each fault op ran."""

    def __init__(self, path):
        self.path = path
        self.lines_when_invoked = []

    def invoke(self, inv):
        self.lines_when_invoked.append(lines_on_disk(self.path))
        return Completion("info", inv.value)

    def close(self):
        pass


def test_the_run_loop_flushes_at_nemesis_ops_and_when_a_phase_ends(tmp_path):
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path, flush_interval_ms=HOUR_MS)
    nemesis = Nemesis(path)
    interp = Interpreter(concurrency=2, open_client=lambda p: Client(), history=writer, nemesis=nemesis)
    try:
        gen = with_nemesis(Limit(3, Repeat({"f": "start-kill", "value": "x"})),
                           clients(Limit(40, Repeat({"f": "send", "value": "v"}))))
        assert interp.run(gen)
        # The phase is over: every op it recorded is on disk before close().
        ops = read_history(path, allow_torn_tail=False)
        assert len(ops) == writer.count == 2 * (40 + 3)
        # A fault op's own invocation was on disk before the nemesis acted.
        nemesis_invocations = [o.index for o in ops if o.process == "nemesis"][0::2]  # info on both ends
        assert len(nemesis.lines_when_invoked) == 3
        assert all(lines > index for lines, index in zip(nemesis.lines_when_invoked, nemesis_invocations))
        interp.record_nemesis("stop-kill", "heal", lambda: lines_on_disk(path))
        heal = read_history(path, allow_torn_tail=False)[-2:]
        assert [o.f for o in heal] == ["stop-kill", "stop-kill"]
        assert heal[1].value == len(ops) + 1  # the heal's invocation was written before it acted
    finally:
        interp.close()
        writer.close()
