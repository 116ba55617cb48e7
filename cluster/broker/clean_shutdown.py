"""The clean-shutdown marker (KIP-966, Kafka's CleanShutdownFileHandler): a clean shutdown
records the broker epoch it ended at in the data directory; the next start takes it (and
removes it, so a later crash is not mistaken for a clean stop) and registers with it as
PreviousBrokerEpoch. A start without it follows a crash, a SIGKILL or a power loss: the
controller then removes the broker from every ISR and eligible-leader set, since its log
may lack the unflushed tail it had acknowledged."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)

MARKER_FILE = ".kafka_cleanshutdown"  # Kafka's name for it, one per log directory
NO_EPOCH = -1


def take_previous_epoch(disk: Any, data_dir: str) -> int:
    """The broker epoch the last run shut down cleanly at, or -1; the marker is removed."""
    path = f"{data_dir}/{MARKER_FILE}"
    if not disk.exists(path):
        return NO_EPOCH
    try:
        epoch = int(json.loads(disk.read_all(path))["broker_epoch"])
    except (ValueError, KeyError, TypeError) as error:
        log.warning("%s is unreadable (%r): the last shutdown counts as unclean", path, error)
        epoch = NO_EPOCH
    disk.remove(path)
    return epoch


def mark_clean(disk: Any, data_dir: str, broker_epoch: int) -> None:
    """Record a clean shutdown at `broker_epoch` (durably: written and fsynced in one step)."""
    if broker_epoch < 0:
        return  # never registered: nothing to claim
    try:
        disk.write_atomic(f"{data_dir}/{MARKER_FILE}", json.dumps({"broker_epoch": broker_epoch}).encode())
    except OSError as error:  # a failed log directory: the next start counts as after a crash
        log.warning("cannot record the clean shutdown in %s: %s", data_dir, error)
