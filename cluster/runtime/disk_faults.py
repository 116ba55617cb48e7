"""Disk faults in a running broker process, commanded from another process (the nemesis runs
in the harness), and the process's halt when its log directory fails.

The door is a command file beside the broker's data directory plus a signal, the way the
clock nemesis reaches a broker through a file libfaketime reads:

    <data_dir>.disk-faults        the command (JSON), written whole (tmp file + rename)
    SIGUSR1                       "read it now"
    <data_dir>.disk-faults.done   the broker's answer (JSON), written whole: the command's
                                  id, the faults now in force and the fault counts, the torn
                                  tails of a crash, or the error that refused the command

Nothing is read on the hot path: the broker's FaultyDisk checks three attributes per write
or fsync, and the file is read only when the signal arrives (asyncio runs the handler on the
event loop, between two requests). A loopback admin RPC would cost a listener and a
protocol; polling a file would cost a stat per tick. The answer file lets the sender wait
until a fault is really in force, so a recorded fault op is a real one.

Commands (`action`):
    set    {"fsync_errno": "EIO" | null, "write_errno": "ENOSPC" | null, "fsync_delay_ms": n}
    clear  every fault off (the counts stay)
    crash  {"seed": n, "corrupt": true}: tear (and corrupt) every unflushed tail through the
           FaultyDisk, answer, then SIGKILL this process: a power loss of the broker's machine

`<data_dir>.disk-faults.halted` holds the reason when the broker halted on a failed log
directory (Kafka's Exit.halt(1)); the process then exits with status 1 at once, without a
flush or a controlled shutdown. These control files live beside the data directory, not in
it, and are written with plain file I/O, never through the faulty disk.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import time
from typing import Any

from cluster.storage.faulty_disk import DiskFaults, FaultyDisk

log = logging.getLogger(__name__)
COMMAND_SUFFIX = ".disk-faults"
DONE_SUFFIX = ".disk-faults.done"
HALTED_SUFFIX = ".disk-faults.halted"
HALT_EXIT_STATUS = 1  # Kafka's Exit.halt(1) when all log directories have failed


def command_path(data_dir: str) -> str:
    return data_dir.rstrip("/") + COMMAND_SUFFIX


def done_path(data_dir: str) -> str:
    return data_dir.rstrip("/") + DONE_SUFFIX


def halted_path(data_dir: str) -> str:
    return data_dir.rstrip("/") + HALTED_SUFFIX


def write_json_atomically(path: str, value: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def sleep_ms(delay_ms: int) -> None:
    """A slow fsync in a real process: the broker's one thread blocks, as in the system call."""
    time.sleep(delay_ms / 1000.0)


class DiskFaultCommands:
    """The broker process's side of the door (see the module docstring)."""

    def __init__(self, disk: FaultyDisk, data_dir: str) -> None:
        self.disk = disk
        self.data_dir = data_dir
        # Files of an earlier process are stale: a new process starts on a healthy disk, as
        # after an operator replaced it.
        for path in (command_path(data_dir), done_path(data_dir), halted_path(data_dir)):
            if os.path.exists(path):
                os.remove(path)

    def apply_pending(self) -> None:
        """SIGUSR1: read the command file and act on it; always answer."""
        try:
            with open(command_path(self.data_dir)) as f:
                command = json.load(f)
        except (OSError, ValueError) as error:
            self._answer({"id": None, "error": f"cannot read {command_path(self.data_dir)}: {error}"})
            return
        command_id = command.get("id") if isinstance(command, dict) else None
        try:
            answer = self._act(command)
        except (ValueError, TypeError) as error:
            log.warning("disk-fault command %r refused: %s", command, error)
            self._answer({"id": command_id, "error": str(error)})
            return
        self._answer({"id": command_id, **answer})

    def _act(self, command: Any) -> dict:
        if not isinstance(command, dict):
            raise ValueError(f"a disk-fault command is a JSON object, not {command!r}")
        action = command.get("action")
        if action == "set":
            unknown = set(command) - {"id", "action", "fsync_errno", "write_errno", "fsync_delay_ms"}
            if unknown:
                raise ValueError(f"unknown fields {sorted(unknown)} in a set command")
            faults = DiskFaults(fsync_errno=command.get("fsync_errno"), write_errno=command.get("write_errno"),
                                fsync_delay_ms=command.get("fsync_delay_ms", 0))
            self.disk.set_faults(faults)
            log.warning("disk faults set: %s", faults.to_json())
            return self._state()
        if action == "clear":
            self.disk.clear_faults()
            log.warning("disk faults cleared (%s)", self.disk.counts.to_json())
            return self._state()
        if action == "crash":
            seed = command.get("seed")
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"a crash command needs an integer seed, not {seed!r}")
            corrupt = command.get("corrupt", True)
            torn = self.disk.tear_unflushed_tails(random.Random(seed), corrupt=bool(corrupt))
            log.warning("power loss: %d unflushed tails torn%s; SIGKILL", len(torn), " and corrupted" if corrupt else "")
            self._answer({"id": command.get("id"), **self._state(), "torn": [t.to_json() for t in torn]})
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable: SIGKILL")  # pragma: no cover
        raise ValueError(f"unknown disk-fault action {action!r}; known: set, clear, crash")

    def _state(self) -> dict:
        return {"faults": self.disk.faults.to_json(), "counts": self.disk.counts.to_json()}

    def _answer(self, value: dict) -> None:
        write_json_atomically(done_path(self.data_dir), value)

    def halt(self, reason: str) -> None:
        """The broker core halted (its only log directory failed): record why, then end the
        process at once with Kafka's status, flushing nothing but the log lines."""
        try:
            write_json_atomically(halted_path(self.data_dir), {"reason": reason, "counts": self.disk.counts.to_json()})
        finally:
            logging.shutdown()
            os._exit(HALT_EXIT_STATUS)
