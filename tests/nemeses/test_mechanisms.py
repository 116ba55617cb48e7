"""The fault mechanisms on real processes inside a real private namespace: partitions
(nftables), one-way partitions, pause, kill + restart, and that nothing outlives a run,
even one whose controlling process is SIGKILLed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nemeses.net.sandbox import PROJECT_ROOT, inside_private_namespace, probe, start_in_private_namespace
from tests.nemeses.sandboxed import run_scenario

def test_partitions_cut_exactly_the_listed_pairs_and_heal_restores_them():
    observed = run_scenario("partitions")
    assert observed["inside"] is True
    assert observed["baseline_udp"] == []
    assert set(observed["topologies"]) == {"one", "majority", "majorities-ring", "bridge"}
    for name, record in observed["topologies"].items():
        hosts = record["hosts"]
        expected = sorted(record["expected"])
        assert expected, name
        # The kernel holds exactly the schedule's pairs, as addresses ...
        assert record["kernel"] == sorted([hosts[str(s)], hosts[str(d)]] for s, d in expected), name
        # ... and exactly those directions lose datagrams.
        assert record["udp"] == expected, name
        # TCP needs both directions: a link with a cut either way is dead, every other works.
        dead = {f"{s}->{d}" for s, d in expected} | {f"{d}->{s}" for s, d in expected}
        assert {pair for pair, result in record["tcp"].items() if result != "ok"} == dead, name
        assert all(record["tcp"][pair] == "timeout" for pair in dead), name
        assert record["udp_after_heal"] == [], name
        assert set(record["tcp_after_heal"].values()) == {"ok"}, name


def test_one_way_partition_is_one_way():
    observed = run_scenario("one_way")
    # 0's messages are lost, the others' still reach 0.
    assert observed["0_heard_1"] is True
    assert observed["1_heard_0"] is False
    assert observed["1->0"] == "timeout"  # the hello arrived, 0's answer did not
    assert observed["0->1"] == "timeout"
    assert observed["1->2"] == "ok"
    assert observed["udp"] == [[0, 1], [0, 2]]
    assert observed["after_heal"] == {"1->0": "ok", "0->1": "ok"}
    # A directed full drop cuts exactly one direction.
    assert observed["directed_udp"] == [[0, 2]]
    assert observed["directed_udp_after_heal"] == []


def test_pause_stops_answering_and_resume_answers_what_waited():
    observed = run_scenario("pause")
    assert observed["before"] == "pong"
    assert observed["start"]["paused"][0]["node"] == 0
    assert observed["state"] == "T"
    assert observed["paused"] == "timeout"
    assert observed["other"] == "pong"
    assert observed["pending_done_while_paused"] is False
    assert observed["stop"]["resumed"][0]["node"] == 0
    assert observed["pending_after_resume"] == "pong"
    assert observed["after"] == "pong"


def test_kill_and_restart_rebinds_the_same_address():
    observed = run_scenario("kill")
    assert observed["start"]["killed"][0]["node"] == 0
    assert observed["alive_after_kill"] is False
    assert observed["pid_exists_after_kill"] is False
    assert observed["while_killed"] == "refused"
    assert observed["other"] == "pong"
    assert observed["stop"]["started"][0]["node"] == 0
    assert observed["same_address"] is True
    assert observed["new_pid"] is True
    assert observed["after"] == "pong"


# -- nothing outlives the run -----------------------------------------------------------

def processes_in_netns(netns: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") == netns:
                found.append(int(entry))
        except OSError:
            continue
    return found


def process_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def harness_pid(netns: str) -> int:
    for pid in processes_in_netns(netns):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tests.nemeses.scenarios" in cmdline and b"hold" in cmdline:
            return pid
    raise AssertionError(f"no scenario process in {netns}")


def host_tables() -> str:
    return subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout


def wait_until(predicate, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("victim", ["harness", "outer"])
def test_nothing_outlives_a_sigkilled_run(victim, tmp_path):
    assert not inside_private_namespace()
    command = [sys.executable, "-m", "tests.nemeses.scenarios", "hold", str(tmp_path)]
    if victim == "outer":
        # The whole chain as a user runs it: a controlling process that re-executes into the namespace.
        process = subprocess.Popen([sys.executable, "-m", "nemeses.net.sandbox", *command], stdout=subprocess.PIPE,
                                   text=True, cwd=PROJECT_ROOT)
    else:
        process = start_in_private_namespace(command, stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT)
    netns = None
    try:
        line = process.stdout.readline()
        assert line, "the scenario printed nothing"
        held = json.loads(line)
        netns = held["netns"]
        assert held["rules"] == [["127.0.0.10", "127.0.0.11"]]
        assert len(held["shm"]) == 2 * len(held["pids"]), "libfaketime's shm files exist inside the run"
        inside = processes_in_netns(netns)
        assert len(inside) >= 5  # init, the scenario, three servers
        assert "logquake" not in host_tables()
        if victim == "outer":
            os.kill(process.pid, signal.SIGKILL)
        else:
            os.kill(harness_pid(netns), signal.SIGKILL)
        process.wait(timeout=30)
        assert wait_until(lambda: processes_in_netns(netns) == []), \
            f"still in the namespace: {processes_in_netns(netns)}"
        # Killed processes linger as zombies until their new parent reaps them.
        assert wait_until(lambda: all(process_gone(pid) for pid in inside)), \
            {pid: Path(f"/proc/{pid}/stat").read_text() for pid in inside if not process_gone(pid)}
        assert "logquake" not in host_tables()
        leaked = [name for name in os.listdir("/dev/shm") for pid in held["pids"]
                  if name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}")]
        assert leaked == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if netns is not None:
            for pid in processes_in_netns(netns):
                os.kill(pid, signal.SIGKILL)


REEXEC_SCRIPT = """
import os, signal, sys, time
from nemeses.net.sandbox import current_netns, ensure_private_namespace, inside_private_namespace
outer_netns = current_netns()
ensure_private_namespace(sys.orig_argv)   # re-runs this very command inside, then exits with its status
def stop(signum, frame):
    print("stopped by", signum, flush=True)
    sys.exit(5)
signal.signal(signal.SIGTERM, stop)
print("inside", inside_private_namespace(), os.getpid(), flush=True)
time.sleep(60)
"""


def test_a_command_reexecutes_itself_inside_and_gets_forwarded_signals():
    assert probe() == "root"
    process = subprocess.Popen([sys.executable, "-c", REEXEC_SCRIPT], stdout=subprocess.PIPE, text=True,
                               cwd=PROJECT_ROOT)
    try:
        line = process.stdout.readline().split()
        assert line[:2] == ["inside", "True"]
        assert int(line[2]) > 1  # the command runs under the namespace's own init
        os.kill(process.pid, signal.SIGTERM)  # to the outer process, as a user or CI would
        assert process.wait(timeout=30) == 5
        assert process.stdout.read().strip() == f"stopped by {int(signal.SIGTERM)}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sandbox_passes_exit_status_and_signal_deaths_through():
    run = lambda script: subprocess.run([sys.executable, "-m", "nemeses.net.sandbox", "sh", "-c", script],  # noqa: E731
                                        cwd=PROJECT_ROOT, timeout=60).returncode
    assert run("exit 7") == 7
    assert run("kill -9 $$") == 128 + 9
    assert subprocess.run([sys.executable, "-m", "nemeses.net.sandbox"], cwd=PROJECT_ROOT, capture_output=True,
                          timeout=60).returncode == 254


def test_a_combined_schedule_heals_back_to_a_whole_cluster():
    observed = run_scenario("combined")
    kinds = {entry["f"] for entry in observed["performed"]}
    assert {"start-kill", "start-pause", "start-partition", "start-clock", "quiet"} <= kinds
    assert observed["before_heal"]["dead"] or observed["before_heal"]["paused"]
    assert observed["alive"] == [True, True, True]
    assert observed["paused"] == [False, False, False]
    assert observed["rules"] == [[], []]
    assert observed["udp"] == [] and observed["tcp"] == ["ok"]
    assert observed["skew"] == [True, True, True]
    assert set(observed["offsets"].values()) == {0.0}


def test_without_root_the_namespace_comes_from_a_user_namespace():
    # As user nobody, with Debian's python3: the project (and its virtualenv) may live under
    # /root, mode 700, which nobody cannot enter (a fresh server where root cloned it). The
    # sandbox needs only the stdlib and its own package, so nobody gets a readable copy of it.
    readable = Path(tempfile.mkdtemp(prefix="logquake-rootless-", dir="/tmp"))
    try:
        for module in ("nemeses/__init__.py", "nemeses/net/__init__.py", "nemeses/net/sandbox.py", "nemeses/net/init.py"):
            (readable / module).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(PROJECT_ROOT) / module, readable / module)
        for directory in [readable, *(d for d in readable.rglob("*") if d.is_dir())]:
            directory.chmod(0o755)
        check = ("test \"$(id -u)\" = 0 && test -n \"$LOGQUAKE_NETNS\" && ip link show lo | grep -q UP "
                 "&& nft add table inet rootless && nft list tables")
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             "/usr/bin/python3", "-m", "nemeses.net.sandbox", "sh", "-c", check],
            capture_output=True, text=True, timeout=60, cwd="/",
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(readable), "PYTHONDONTWRITEBYTECODE": "1"})
    finally:
        shutil.rmtree(readable, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert "table inet rootless" in result.stdout
    assert "rootless" not in host_tables()
