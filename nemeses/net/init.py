"""PID 1 of a run's private namespace (started by `nemeses.net.sandbox`, never by hand).

    python .../nemeses/net/init.py -- COMMAND [ARG...]

It makes the namespace usable (loopback up; a private tmpfs on /dev/shm so that the shm
entries libfaketime leaks vanish with the namespace), marks the environment with the
namespace's id, runs COMMAND as its only direct child, forwards the termination signals it
receives to it, reaps every orphan, and exits with COMMAND's status. When it exits the
kernel SIGKILLs every process left in the PID namespace, so brokers never outlive the run.

Only the standard library is used: this file runs before the project is importable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

ENV_MARKER = "LOGQUAKE_NETNS"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
EXIT_SETUP_FAILED = 255


def _fail(message: str) -> "None":
    print(f"logquake namespace init: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_SETUP_FAILED)


def _set_up_namespace() -> None:
    if os.getpid() != 1:
        _fail("must run as PID 1 of a new PID namespace (use nemeses.net.sandbox)")
    # Own session: a terminal's Ctrl-C reaches only the outer process, which forwards it
    # once; otherwise the command would get SIGINT twice (terminal + forward).
    try:
        os.setsid()
    except OSError:
        pass
    link = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if link.returncode != 0:
        _fail(f"cannot bring up loopback in the new network namespace: {link.stderr.strip()}")
    # Private /dev/shm: libfaketime leaves faketime_shm_<pid> / sem.faketime_sem_<pid> for
    # every preloaded process, even on a clean exit; here they die with the mount namespace.
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "logquake-shm", "/dev/shm"],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        print(f"logquake namespace init: no private /dev/shm ({mounted.stderr.strip()}); "
              "libfaketime's shm files are removed by pid instead", file=sys.stderr, flush=True)
    _cap_retransmission_backoff()
    os.environ[ENV_MARKER] = os.readlink("/proc/self/ns/net")


# A partition drops packets, so a connection with data in flight retransmits with exponential
# backoff (Linux: up to 120 s between tries). In `make demo` a 15.6 s partition put the next
# retry of a broker-to-broker connection 11 s after the heal, and until then the follower
# fetches on it, so every acks=all produce to the partitions it replicates, stayed stuck.
# Capping the backoff at 1 s in this namespace (its loopback only) makes every connection
# resume within about a second of the heal. With the cap, 15 tries (tcp_retries2's default)
# last only ~13 s, after which the kernel aborts the connection with a RST that the partition
# drops, leaving the other end waiting on a dead socket until its request timeout (30 s for a
# replica fetch): 255 tries keep a connection alive through a partition of about 4 minutes,
# as the default ~15 min bound does without the cap. Needs Linux 6.15+ for the cap.
TCP_SYSCTLS = {"tcp_rto_max_ms": "1000", "tcp_retries2": "255"}


def _cap_retransmission_backoff() -> None:
    for name, value in TCP_SYSCTLS.items():
        path = f"/proc/sys/net/ipv4/{name}"
        try:
            with open(path, "w") as fh:
                fh.write(value)
        except OSError as exc:
            print(f"logquake namespace init: cannot set {path} to {value} ({exc.strerror}); after a "
                  "partition heals, connections may stay stalled until their next retransmission "
                  "(up to 120 s)", file=sys.stderr, flush=True)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        _fail("usage: init.py -- COMMAND [ARG...]")
    command = argv[1:]
    _set_up_namespace()
    child_pid: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child_pid:
            try:
                os.kill(child_pid[0], signum)
            except ProcessLookupError:
                pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        _fail(f"cannot run {command[0]!r}: {error}")
    child_pid.append(child.pid)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == child.pid:
            # Returning ends PID 1: the kernel kills whatever the command left behind.
            return _exit_code(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
