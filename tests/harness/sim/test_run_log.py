"""harness.log during a simulated run (harness.sim.run_log): the client library's records are
buffered, but every one reaches the file before the harness's next record, within the
flusher's interval, and when the run ends however it ends; the run's own handler is back
afterwards. A simulated run with every broker killed keeps aiokafka's connection errors in
harness.log, in order with the phase lines."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from harness.cli import ArgumentParser
from harness.run import open_run
from harness.sim.run import FaultOp, execute_sim
from harness.sim.run_log import BufferedLogHandler, buffered_run_log
from harness.testcmd import build_spec, register

FORMAT = "%(levelname)s %(name)s %(message)s"


@pytest.fixture
def run_handler(tmp_path: Path):
    handler = logging.FileHandler(tmp_path / "harness.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    harness = logging.getLogger("test-run-log-harness")
    harness.setLevel(logging.DEBUG)
    harness.addHandler(handler)
    yield handler, harness
    harness.removeHandler(handler)
    handler.close()


def _lines(handler: logging.FileHandler) -> list[str]:
    return Path(handler.baseFilename).read_text(encoding="utf-8").splitlines()


def test_a_harness_record_flushes_the_client_records_before_it_in_order(run_handler) -> None:
    handler, harness = run_handler
    client = logging.getLogger("test-run-log-client")
    with buffered_run_log(handler, harness, ("test-run-log-client",)):
        buffered = harness.handlers[0]
        assert isinstance(buffered, BufferedLogHandler) and handler not in harness.handlers
        client.error("Unable connect to node with id %s", 1)
        client.warning("retrying")
        harness.info("phase: quiet")
        assert _lines(handler) == ["ERROR test-run-log-client Unable connect to node with id 1",
                                   "WARNING test-run-log-client retrying", "INFO test-run-log-harness phase: quiet"]
    assert harness.handlers == [handler]
    assert client.handlers == [] and client.propagate is True


def test_the_flusher_writes_buffered_client_records_without_a_harness_record(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with path.open("w", encoding="utf-8") as stream:
        buffered = BufferedLogHandler(stream, flush_at=("harness",), flush_interval_s=0.01)
        buffered.setFormatter(logging.Formatter("%(message)s"))
        try:
            buffered.handle(logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, "lost", None, None))
            deadline = time.monotonic() + 30  # a bound for a loaded machine, not a measurement
            while path.read_text(encoding="utf-8") != "lost\n" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert path.read_text(encoding="utf-8") == "lost\n"
        finally:
            buffered.close()
        assert not stream.closed  # the run handler's file stays open


def test_an_error_inside_flushes_what_was_buffered_and_puts_the_run_handler_back(run_handler) -> None:
    handler, harness = run_handler
    client = logging.getLogger("test-run-log-client")
    with pytest.raises(RuntimeError):
        with buffered_run_log(handler, harness, ("test-run-log-client",)):
            client.error("the last words")
            raise RuntimeError("the run failed")
    assert _lines(handler) == ["ERROR test-run-log-client the last words"]
    assert harness.handlers == [handler] and client.handlers == []
    harness.info("after")
    assert _lines(handler)[-1] == "INFO test-run-log-harness after"


def test_without_a_stream_handler_the_handler_is_used_as_it_is(run_handler) -> None:
    _, harness = run_handler
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    collect = Collect()
    client = logging.getLogger("test-run-log-client")
    with buffered_run_log(collect, harness, ("test-run-log-client",)):
        client.error("kept")
    assert seen == ["kept"] and client.handlers == []
    with buffered_run_log(None, harness, ("test-run-log-client",)):
        assert client.propagate is False
    assert client.propagate is True


def test_a_simulated_run_keeps_the_client_log_in_order_with_the_phases(tmp_path: Path) -> None:
    parser = ArgumentParser(prog="logquake")
    register(parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser))
    args = parser.parse_args(["test", "--sim", "--time-limit", "3", "--final-time-limit", "2", "--quiet-period", "0.5",
                              "--rate", "50", "--concurrency", "2", "--nemesis", "kill", "--seed", "3"])
    run = open_run(build_spec(args, 3), tmp_path)
    every_broker_down = [FaultOp(0.5, "start-kill", {"targets": "all", "nodes": [0, 1, 2]}), FaultOp(2.0, "stop-kill")]
    try:
        execute_sim(run, every_broker_down, check_history=False)  # the log is the point, not the verdict
    finally:
        run.close()
    lines = (run.run_dir / "harness.log").read_text(encoding="utf-8").splitlines()
    phases = {line.split(" phase: ")[1]: i for i, line in enumerate(lines) if " phase: " in line}
    assert list(phases) == ["setup", "main", "heal", "quiet", "final", "teardown"], phases
    client_errors = [i for i, line in enumerate(lines) if " ERROR aiokafka" in line and "Unable connect" in line]
    # Every broker was killed in the main phase: its refused connections are logged there.
    assert client_errors and phases["main"] < client_errors[0] < phases["heal"]
    assert json.loads((run.run_dir / "simulation.json").read_text())["cpu_s"] > 0
