"""`logquake serve` as a real server process on an ephemeral port on 127.0.0.1: the index,
a report, a run as a zip, and refusals for paths outside results/."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness import store
from harness.report import write_report
from tests.harness.test_report_support import write_lost_write_run, write_valid_run

T0 = datetime(2026, 11, 22, 7, 0, 0, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("served") / "results"
    valid = store.create_run_dir(root, "queue-none", now=T0)
    write_valid_run(valid)
    write_report(valid)
    lost = store.create_run_dir(root, "queue-partition-kill", now=T0 + timedelta(minutes=1))
    write_lost_write_run(lost)
    write_report(lost)
    (root.parent / "secret.txt").write_text("not for the web")
    os.symlink("../../../secret.txt", lost / "escape.txt")  # a link inside a run that points outside
    return root, valid, lost


@pytest.fixture(scope="module")
def server(results):
    root, _, _ = results
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.serve", "--port", "0", "--results", str(root)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert " at http://127.0.0.1:" in line, line + process.stderr.read()
        yield line.rsplit(" at ", 1)[1].strip().rstrip("/")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()


def _get(url: str):
    """(status, headers (case-insensitive), body)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_the_index_lists_every_run_with_its_verdict(server, results):
    _, valid, lost = results
    status, headers, body = _get(server + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    page = body.decode()
    assert f'data-run="queue-partition-kill/{lost.name}" data-verdict="invalid"' in page
    assert f'data-run="queue-none/{valid.name}" data-verdict="valid"' in page
    assert page.index("queue-partition-kill/") < page.index("queue-none/")


def test_a_report_and_the_run_files_are_served(server, results):
    _, _, lost = results
    status, headers, body = _get(f"{server}/queue-partition-kill/{lost.name}/report.html")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'data-verdict="invalid"' in body and body == (lost / "report.html").read_bytes()
    status, _, body = _get(f"{server}/latest/history.jsonl")
    assert status == 200 and body == (lost / "history.jsonl").read_bytes()


def test_a_run_downloads_as_a_zip_of_its_directory(server, results):
    _, _, lost = results
    for path in (f"/queue-partition-kill/{lost.name}.zip", "/queue-partition-kill/latest.zip"):
        status, headers, body = _get(server + path)
        assert status == 200 and headers["Content-Type"] == "application/zip"
        assert headers["Content-Disposition"] == f'attachment; filename="queue-partition-kill-{lost.name}.zip"'
        archive = zipfile.ZipFile(io.BytesIO(body))
        assert archive.testzip() is None
        prefix = f"queue-partition-kill-{lost.name}/"
        names = set(archive.namelist())
        assert {prefix + n for n in ("spec.json", "history.jsonl", "results.json", "report.html", "brokers/1.log")} <= names
        assert prefix + "escape.txt" not in names  # its target is outside results/
        assert archive.read(prefix + "history.jsonl") == (lost / "history.jsonl").read_bytes()


def test_paths_outside_the_results_directory_are_refused(server):
    for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/queue-partition-kill/%2e%2e/%2e%2e/secret.txt", "/latest/escape.txt"):
        status, _, body = _get(server + path)
        assert status == 403, path
        assert b"not for the web" not in body
    assert _get(server + "/no-such-test/")[0] == 404
    assert _get(server + "/queue-none.zip")[0] == 404  # a test directory is not a run


def test_serve_refuses_a_missing_results_directory_and_a_bad_port(tmp_path):
    missing = subprocess.run(
        [sys.executable, "-m", "harness.serve", "--port", "0", "--results", str(tmp_path / "nope")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert missing.returncode == 254 and "does not exist" in missing.stderr
    bad_port = subprocess.run(
        [sys.executable, "-m", "harness.serve", "--port", "70000"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert bad_port.returncode == 254 and "not between 0 and 65535" in bad_port.stderr


def test_concurrent_requests_for_the_index_all_succeed(server, results):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda _: _get(server + "/"), range(12)))
    assert all(status == 200 and b'data-verdict="invalid"' in body for status, _, body in answers)
    root, _, _ = results
    assert not list(root.glob(".index.html.*")), "temporary index files left behind"
