"""The controller process's end on a fatal fault: committed metadata its image cannot apply
(Controller.on_fatal). Kafka's QuorumController hands such a replay error to its fatal fault
handler, ProcessTerminatingFaultHandler, which halts the process at once; so does this, with a
status of its own, so that whoever started it can tell this halt from a crash (1), a failed
log directory (1, runtime/disk_faults.py) and bad arguments (254)."""

from __future__ import annotations

import logging
import os
import sys

CONTROLLER_FAULT_EXIT_STATUS = 3

log = logging.getLogger(__name__)


def halt(reason: str) -> None:
    """Log why, then end the process at once: no clean shutdown, no flush but the log's (a
    halted controller must not resign gracefully or write anything more)."""
    try:
        log.critical("fatal controller fault, halting with status %d: %s", CONTROLLER_FAULT_EXIT_STATUS, reason)
        print(f"controller halted: {reason}", file=sys.stderr, flush=True)
    finally:
        logging.shutdown()
        os._exit(CONTROLLER_FAULT_EXIT_STATUS)
