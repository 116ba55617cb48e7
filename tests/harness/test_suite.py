"""`logquake suite` end to end: real runs on the bundled cluster (one broker, seconds long),
one progress line per test, the suite directory's index and JUnit file, the combined exit
code with an expectation, and Ctrl-C keeping what finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .junit_helpers import read_junit
from tests.run_logquake import run_command

PROJECT = Path(__file__).resolve().parents[2]

TINY = """
[suite]
name = "tiny"
description = "two short runs"

[defaults]
brokers = 1
time_limit_s = 3
quiet_period_s = 1
final_time_limit_s = 30
concurrency = 3

[configurations.durable]
client_config = { "acks" = "all", "enable.idempotence" = true }

[[test]]
name = "ok"
configuration = "durable"
seed = 5

[[test]]
name = "{second}"
configuration = "durable"
seed = 6
time_limit_s = {second_time_limit_s}
expect = "invalid"
anomalies = ["lost-write"]
"""


def suite_command(path: Path, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "suite", str(path), "--results-dir", str(results), *extra]


def _default_sigint() -> None:
    # An xdist worker ignores SIGINT, and an ignored SIGINT is inherited: restore the default
    # so that Python in the child raises KeyboardInterrupt (see tests/logquake/test_api.py).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def only_suite_dir(results: Path) -> Path:
    dirs = [p for p in (results / "suites" / "tiny").iterdir() if not p.is_symlink()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


@pytest.mark.slow
def test_a_suite_of_two_runs_writes_one_index_one_junit_file_and_exits_with_the_worst_outcome(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.replace("{second}", "miss").replace("{second_time_limit_s}", "3"))
    results = tmp_path / "results"
    copy = tmp_path / "ci" / "junit.xml"
    out = run_command(suite_command(path, results, "--junit-xml", str(copy)), timeout_s=400)
    # The second run is valid, but its entry expects the cluster to lose writes: not as expected.
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 5, out.stdout  # header, one line per test, summary, where the outputs are
    assert lines[1].startswith("[1/2] ok-seed5: valid (") and "report " in lines[1]
    assert lines[2].startswith("[2/2] miss-seed6: VALID, expected invalid (lost-write): not detected (")
    assert lines[3] == "logquake suite: 2 of 2 test(s): 1 as expected, 1 unexpected; exit 1"

    suite_dir = only_suite_dir(results)
    index = json.loads((suite_dir / "index.json").read_text())
    assert index["suite"] == "tiny" and index["exit_code"] == 1 and index["interrupted"] is False
    assert [(r["id"], r["verdict"], r["exit_code"], r["expect"]) for r in index["runs"]] == \
        [("ok-seed5", "valid", 0, "valid"), ("miss-seed6", "valid", 1, "invalid")]
    for row in index["runs"]:
        assert (suite_dir / row["report"]).is_file() and (suite_dir / row["log"]).is_file()
        assert row["reproduce_command"].startswith("logquake test --workload queue")
        assert "--seed " + str(row["seed"]) in row["reproduce_command"]
    assert (suite_dir / index["runs"][0]["log"]).read_text().startswith("$ logquake test ")
    page = (suite_dir / "index.html").read_text()
    assert f'href="{index["runs"][0]["report"]}"' in page and "miss-seed6" in page

    ok, miss = read_junit(suite_dir / "junit.xml")
    assert copy.read_bytes() == (suite_dir / "junit.xml").read_bytes()
    assert ok.name == "ok-seed5" and ok.failures == 0 and ok.errors == 0
    assert ok.properties["seed"] == "5" and ok.properties["suite_test"] == "ok"
    assert ok.properties["configuration"] == "durable"
    assert Path(ok.properties["report"]).is_file()
    assert ok.cases["claim acked-writes-durable"].outcome == "passed"
    assert miss.properties["expect"] == "invalid (lost-write)"
    assert miss.cases["expectation"].outcome == "failure" and miss.failures == 1
    assert "the run was valid" in miss.cases["expectation"].message


@pytest.mark.slow
def test_ctrl_c_stops_the_running_test_and_keeps_what_finished(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.replace("{second}", "long").replace("{second_time_limit_s}", "300"))
    results = tmp_path / "results"
    proc = subprocess.Popen(suite_command(path, results), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint, cwd=PROJECT)
    try:
        assert proc.stdout is not None
        header = proc.stdout.readline()
        assert header.startswith("logquake suite: tiny"), header
        first = proc.stdout.readline()
        assert first.startswith("[1/2] ok-seed5: valid"), first
        # Wait until the second run's broker is up, then interrupt the suite (only it: it
        # stops its child as `logquake test` stops on Ctrl-C).
        deadline = time.monotonic() + 120
        ready: list[Path] = []
        while time.monotonic() < deadline and not ready:
            ready = list(results.glob("long/*/cluster/*.ready"))
            time.sleep(0.2)
        assert ready, "the second run's broker never started"
        pids = [json.loads(p.read_text())["pid"] for p in ready]
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest + err
    assert "[2/2] long-seed6: interrupted" in rest
    assert "logquake suite: interrupted; 2 of 2 test(s): 1 as expected, 1 interrupted; exit 130" in rest
    assert not [pid for pid in pids if alive(pid)], "a broker outlived the interrupted run"
    suite_dir = only_suite_dir(results)
    index = json.loads((suite_dir / "index.json").read_text())
    assert index["interrupted"] is True and index["exit_code"] == 130
    assert [(r["id"], r["verdict"]) for r in index["runs"]] == [("ok-seed5", "valid"), ("long-seed6", "interrupted")]
    ok, long = read_junit(suite_dir / "junit.xml")
    assert ok.failures == 0 and ok.errors == 0 and ok.cases["harness"].outcome == "passed"
    assert long.cases["harness"].outcome == "error" and long.cases["harness"].message.startswith("interrupted")
