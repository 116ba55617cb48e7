"""Run a command inside a private network namespace that dies with it.

Design. A run's harness, its client threads and its brokers must share one network
namespace: brokers bind 127.0.0.(10+i), which exists only inside it, and partitions are
nftables rules in it. We put the *whole command* there rather than only the brokers:

    outer process (this module; stays in the host's namespaces)
      └─ unshare --net --pid --fork --mount --mount-proc --kill-child   (+ --user --map-root-user without root)
           └─ init.py  = PID 1 of the new namespaces: lo up, private /dev/shm
                └─ the command (e.g. `logquake test ...`): harness, client threads
                     └─ brokers (Popen; inherit every namespace)

Why this shape, not a namespace held by a sleeper and entered with setns/nsenter:
- Nothing can outlive the run. The namespace's PID 1 is our init; when it exits the kernel
  SIGKILLs every process in the PID namespace, and with no process left the network
  namespace, its nftables rules and the private /dev/shm are freed. The command's death
  (even by SIGKILL) ends init; init's death ends everything; the outer process's death
  SIGKILLs `unshare` (PR_SET_PDEATHSIG), whose `--kill-child` SIGKILLs init. No cleanup
  code has to run for the kernel to clean up, so a SIGKILLed harness leaves nothing.
- PIDs stay simple: brokers are plain children of the harness in the same PID namespace,
  so the pid the launcher records is the one SIGSTOP/SIGKILL must hit, and it names
  libfaketime's shm files; `--mount-proc` makes /proc agree with those pids.
- Python 3.11 has no os.setns, and joining a user namespace (rootless) requires a
  single-threaded process; re-executing before anything starts avoids both.

Signals: `unshare --fork` ignores SIGINT/SIGTERM and forwards nothing, so the outer process
forwards SIGINT, SIGTERM and SIGHUP to init, which forwards them to the command. init runs
in its own session, so a terminal's Ctrl-C is delivered once, through this path.

Without root, user namespaces give the same result (`unshare --user --map-root-user`);
where neither works, `probe()` fails early with the reason.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from nemeses.net.init import ENV_MARKER

INIT_SCRIPT = str(Path(__file__).with_name("init.py"))
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
NAMESPACE_FLAGS = ("--net", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child")
ROOTLESS_FLAGS = ("--user", "--map-root-user")
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
PROBE_TIMEOUT_S = 20.0


class NamespaceUnavailable(RuntimeError):
    """This machine cannot give the run a private network namespace; the message says why."""


def current_netns() -> str:
    """The id of this process's network namespace, e.g. 'net:[4026532179]'."""
    return os.readlink("/proc/self/ns/net")


def inside_private_namespace() -> bool:
    """True inside a namespace made by this module (and not in a process that merely
    inherited the marker variable from one)."""
    marker = os.environ.get(ENV_MARKER)
    return marker is not None and marker == current_netns()


def unshare_argv() -> list[str]:
    """The unshare command line for this user: plain as root, through a user namespace without."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise NamespaceUnavailable("`unshare` (util-linux) is not installed; install it with: apt-get install util-linux")
    flags = list(NAMESPACE_FLAGS) if os.geteuid() == 0 else [*ROOTLESS_FLAGS, *NAMESPACE_FLAGS]
    return [unshare, *flags]


def sandbox_argv(command: list[str]) -> list[str]:
    """The full command line that runs `command` inside a fresh private namespace."""
    if not command:
        raise ValueError("no command to run inside the namespace")
    return [*unshare_argv(), sys.executable, INIT_SCRIPT, "--", *command]


@functools.cache
def probe() -> str:
    """Check once that a private namespace with loopback and nftables can be made here.
    Returns 'root' or 'rootless'; raises NamespaceUnavailable with the reason otherwise."""
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("mount", "mount")):
        if shutil.which(tool) is None:
            raise NamespaceUnavailable(f"`{tool}` is not installed; install it with: apt-get install {package}")
    check = "ip link show lo | grep -q UP && nft list tables >/dev/null"
    try:
        result = subprocess.run(sandbox_argv(["/bin/sh", "-c", check]), capture_output=True, text=True,
                                timeout=PROBE_TIMEOUT_S, env=_child_env())
    except subprocess.TimeoutExpired:
        raise NamespaceUnavailable(f"making a private network namespace did not finish within {PROBE_TIMEOUT_S} s") from None
    if result.returncode != 0:
        how = "unshare -n" if os.geteuid() == 0 else "unshare --user --map-root-user --net (unprivileged user namespaces)"
        raise NamespaceUnavailable(
            f"cannot make a private network namespace with {how}: "
            f"{(result.stderr or result.stdout).strip() or f'exit status {result.returncode}'}. "
            "Network faults need CAP_NET_ADMIN in a namespace of their own: run as root, or enable "
            "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)")
    return "root" if os.geteuid() == 0 else "rootless"


def _child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    child = dict(os.environ if env is None else env)
    child.pop(ENV_MARKER, None)
    # The command may be `python -m ...` of this project from anywhere.
    existing = child.get("PYTHONPATH")
    child["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + existing if existing else "")
    return child


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _init_pid(unshare_pid: int) -> int | None:
    """init's pid as this process sees it: the only child of `unshare`."""
    try:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def start_in_private_namespace(command: list[str], *, env: dict[str, str] | None = None,
                               **popen_kwargs: object) -> subprocess.Popen:
    """Start `command` in a fresh private namespace; returns the `unshare` process. Killing
    that process (even SIGKILL, or this process dying) ends everything inside."""
    probe()
    return subprocess.Popen(sandbox_argv(command), env=_child_env(env), preexec_fn=_die_with_parent,
                            **popen_kwargs)  # type: ignore[arg-type]


def forward_signal(process: subprocess.Popen, signum: int) -> None:
    """Deliver `signum` to the command inside (through init); before init exists, end it all."""
    init_pid = _init_pid(process.pid)
    try:
        if init_pid is not None:
            os.kill(init_pid, signum)
        else:
            process.kill()
    except ProcessLookupError:
        pass


def run_in_private_namespace(command: list[str], *, env: dict[str, str] | None = None) -> int:
    """Run `command` inside a fresh private namespace, forwarding SIGINT/SIGTERM/SIGHUP to
    it; returns its exit status (128+N if signal N ended it)."""
    process = start_in_private_namespace(command, env=env)
    previous = {}
    for signum in FORWARDED_SIGNALS:
        previous[signum] = signal.signal(signum, lambda s, _f: forward_signal(process, s))
    try:
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if process.poll() is None:
            process.kill()
            process.wait()


def ensure_private_namespace(command: list[str]) -> None:
    """Call first thing in a CLI that starts brokers, with the command line that re-runs
    it (e.g. [sys.executable, "-m", "harness.cli", *argv]; sys.orig_argv when it is the
    program's own entry point): unless already inside a private namespace, run that command
    inside one and exit with its status. Raises NamespaceUnavailable (before anything runs)
    where no namespace can be made."""
    if inside_private_namespace():
        return
    sys.exit(run_in_private_namespace(list(command)))


def main(argv: list[str] | None = None) -> int:
    """`python -m nemeses.net.sandbox COMMAND [ARG...]`: run a command in a private
    namespace (e.g. a shell to poke at a cluster with kcat and nft)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print("usage: python -m nemeses.net.sandbox COMMAND [ARG...]", file=sys.stderr)
        return 254
    try:
        return run_in_private_namespace(args)
    except NamespaceUnavailable as error:
        print(f"logquake: {error}", file=sys.stderr)
        return 255


if __name__ == "__main__":
    sys.exit(main())
