"""`logquake proxy` as a process: serves until SIGTERM/SIGINT, then closes everything; bad options exit 254."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.proxy.helpers import connect, recv_until_closed, round_trip_s

LOGQUAKE = str(Path(sys.executable).with_name("logquake"))
START_TIMEOUT_S = 60.0


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self.host, port = url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)


def request(served: Served, method: str, path: str, body: object = None) -> tuple[int, object]:
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(served.url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def start_proxy() -> Iterator:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> Served:
        process = subprocess.Popen([LOGQUAKE, "proxy", "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        started.append(process)
        line = process.stdout.readline() if process.stdout else ""
        match = re.search(r"http://[\d.]+:\d+", line)
        assert match, (line, process.poll())
        return Served(process, match.group(0))

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serves_until_a_signal_then_closes_everything(start_proxy, echo_server, signum):
    served = start_proxy("--seed", "5")
    status, created = request(served, "POST", "/proxies", {"name": "echo", "listen": "127.0.0.1:0", "upstream": echo_server.address})
    assert status == 201
    listen = created["listen"]  # type: ignore[index]
    sock = connect(listen)
    round_trip_s(sock)

    served.process.send_signal(signum)
    out, err = served.process.communicate(timeout=30)
    assert served.process.returncode == 0, err
    assert "stopped" in out
    assert "proxy echo created: " in err  # every change is logged to stderr
    with sock:
        assert recv_until_closed(sock)[0] == b""
    for address in (listen, f"{served.host}:{served.port}"):
        with pytest.raises(ConnectionRefusedError):
            connect(address)


def test_config_file_creates_proxies(start_proxy, echo_server, tmp_path):
    config = tmp_path / "proxies.json"
    config.write_text(json.dumps([{"name": "echo", "listen": "127.0.0.1:0", "upstream": echo_server.address}]))
    served = start_proxy("--config", str(config))
    status, proxies = request(served, "GET", "/proxies")
    assert status == 200 and list(proxies) == ["echo"]  # type: ignore[arg-type]
    with connect(proxies["echo"]["listen"]) as sock:  # type: ignore[index]
        round_trip_s(sock)
    served.process.send_signal(signal.SIGTERM)
    served.process.communicate(timeout=30)
    assert served.process.returncode == 0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGQUAKE, "proxy", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.parametrize("args, message", [
    (["--port", "70000"], "port must lie in [0, 65535]"),
    (["--port", "http"], "not a port number"),
    (["--seed", "x"], "not an integer seed"),
    (["--bogus"], "unrecognized arguments"),
    (["--port", "0", "--config", "/nonexistent/proxies.json"], "cannot read --config"),
])
def test_bad_options_exit_254(args, message):
    result = run(*args)
    assert result.returncode == 254, result
    assert message in result.stderr


def test_bad_config_exits_254(tmp_path):
    config = tmp_path / "proxies.json"
    config.write_text(json.dumps([{"name": "no-upstream"}]))
    result = run("--port", "0", "--config", str(config))
    assert result.returncode == 254
    assert "missing required field: upstream at proxy 1" in result.stderr


def test_a_taken_port_exits_254():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run("--port", str(taken.getsockname()[1]))
    assert result.returncode == 254
    assert "cannot listen on 127.0.0.1:" in result.stderr and "in use" in result.stderr
