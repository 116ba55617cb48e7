"""disk: faults of the brokers' disks, through each broker's FaultyDisk (cluster.control's
disk door; cluster/runtime/disk_faults.py says how a command reaches a running broker).

start-disk is one of (`--nemesis-option disk_kinds=...`, chosen by the seeded schedule):
    fsync-eio   every fsync of the target brokers fails with EIO. The next one (a
                high-watermark or leader-epoch checkpoint within seconds, or every append
                with flush.messages=1) fails the broker's only log directory: its
                partitions go offline and the broker halts, as Kafka's does
    disk-full   every write needing space fails with ENOSPC: the next append, replicated or
                produced, fails the log directory the same way
    slow-fsync  every fsync first blocks the broker for delay_ms (2^U[4,9): 16-512 ms)
    torn-crash  a power loss of one broker's machine: its unflushed tails are torn at a random
                byte and one byte of each segment's kept tail flipped, then it is SIGKILLed.
                Always one broker, and never the last in-sync replica of a partition (another
                running broker is taken instead, or none): losing the last in-sync copy's
                unflushed data is the case Kafka documents as able to lose acknowledged
                writes (KIP-966's last replica standing; eligible leader replicas, on by
                default, save it only when the partition has one), not a disk fault Kafka's
                replication survives
fsync-eio, disk-full and slow-fsync hit the brokers `db_targets` picks.

stop-disk heals: brokers still running get a healthy disk again (the fault counts show what
the fault did); a broker that halted or lost power is restarted, as an operator who replaced
the disk would, and its log recovery cuts what the fault left torn. The completions record
the evidence: each halt's reason, each crash's torn tails, the counts.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

from cluster.control import ClusterControl, ControlError
from nemeses.base import COLORS, DISK_KINDS, NemesisOptions, alternate, live_leaders
from nemeses.targets import choose_nodes

# Slow-fsync delays are drawn from [2^lo, 2^hi) ms.
SLOW_FSYNC_EXPONENTS = (4.0, 9.0)
ERRNO_OF_KIND = {"fsync-eio": ("fsync_errno", "EIO"), "disk-full": ("write_errno", "ENOSPC")}

__all__ = ["DISK_KINDS", "DiskPackage"]


class DiskPackage:
    name = "disk"
    color = COLORS["disk"]

    def __init__(self, control: ClusterControl, options: NemesisOptions) -> None:
        self.control = control
        self.options = options
        self.faulted: set[int] = set()  # brokers whose disk this package faulted since the last stop
        self._lock = threading.Lock()

    # -- schedule ----------------------------------------------------------------------
    def schedule(self, rng: random.Random) -> Iterator[dict]:
        nodes = self.control.broker_ids

        def starts() -> Iterator[dict]:
            while True:
                kind = rng.choice(self.options.disk_kinds)
                if kind == "torn-crash":
                    yield {"kind": kind, "targets": "one", "nodes": choose_nodes("one", nodes, rng),
                           "seed": rng.getrandbits(32), "corrupt": True}
                    continue
                spec = rng.choice(self.options.db_targets)
                value: dict[str, Any] = {"kind": kind, "targets": spec, "nodes": choose_nodes(spec, nodes, rng)}
                if kind == "slow-fsync":
                    value["delay_ms"] = int(2 ** rng.uniform(*SLOW_FSYNC_EXPONENTS))
                yield value

        return alternate("start-disk", "stop-disk", starts())

    # -- acting ------------------------------------------------------------------------
    def invoke(self, f: str, value: Any) -> object:
        if f == "start-disk":
            return self.start(value)
        if f == "stop-disk":
            return self.stop()
        raise ValueError(f"the disk nemesis has no op {f!r}")

    def start(self, value: Any) -> dict:
        if not isinstance(value, dict) or value.get("kind") not in DISK_KINDS:
            raise ValueError(f"start-disk needs a value with kind one of {', '.join(DISK_KINDS)}, got {value!r}")
        if value.get("nodes") is not None:
            nodes, seen = sorted(int(n) for n in value["nodes"]), {}
        else:
            nodes, seen = live_leaders(self.control, value.get("targets", "primaries"), self.options.primary_topics)
        done, errors = [], {}
        with self._lock:
            for node in nodes:
                try:
                    done.append(self._fault(node, value))
                except Exception as error:  # one broker failing must not hide what happened to the rest
                    errors[str(node)] = f"{type(error).__name__}: {error}"
                    continue
                self.faulted.add(node)
        result: dict = {**value, "nodes": nodes, "faulted": done, **seen}
        if errors:
            result["errors"] = errors
        return result

    def _fault(self, node: int, value: dict) -> dict:
        if not self.control.is_alive(node):
            return {"node": node, "not_running": True}
        kind = value["kind"]
        if kind == "torn-crash":
            target, sole = self._power_loss_target(node)
            if target is None:
                return {"node": node, "skipped": f"the last in-sync replica of {', '.join(sole)}"}
            answer = self.control.crash_torn(target, seed=int(value["seed"]) + target, corrupt=bool(value.get("corrupt", True)))
            torn = answer.get("torn", [])
            moved = {} if target == node else {"instead_of": node, "because_last_in_sync_of": sole}
            return {"node": target, **moved, "power_loss": True, "files_torn": len(torn),
                    "unflushed_bytes": sum(t["unflushed_bytes"] for t in torn),
                    "kept_bytes": sum(t["kept_bytes"] for t in torn),
                    "bytes_flipped": sum(1 for t in torn if t["flipped_at"] is not None)}
        if kind == "slow-fsync":
            answer = self.control.set_disk_faults(node, fsync_delay_ms=int(value["delay_ms"]))
        else:
            field, errno_name = ERRNO_OF_KIND[kind]
            answer = self.control.set_disk_faults(node, **{field: errno_name})
        return {"node": node, "faults": answer["faults"]}

    def _power_loss_target(self, node: int) -> tuple[int | None, list[str]]:
        """`node`, or the first other running broker if `node` is the last in-sync replica of
        some partition (None if every running broker is): a power loss of the last in-sync
        copy loses acknowledged writes whatever min.insync.replicas says (the ISR may have
        shrunk after they were acknowledged) unless the partition has an eligible leader
        replica to elect instead (KIP-966; on by default here as in Kafka 4.1, where the
        powered-off broker then leaves the ISR and ELR at its unclean restart). With
        eligible.leader.replicas.version=0, or an ELR as empty as the ISR (min ISR 1), it
        is the loss Kafka documents, not a disk fault its replication survives, so the nemesis
        keeps off it either way."""
        try:
            states = self.control.partition_states()
        except ControlError:
            states = {}
        def sole_of(broker: int) -> list[str]:
            return sorted(f"{tp.topic}-{tp.partition}" for tp, state in states.items() if tuple(state.isr) == (broker,))
        first = sole_of(node)
        if not first:
            return node, []
        for other in self.control.broker_ids:
            if other != node and self.control.is_alive(other) and not sole_of(other):
                return other, first
        return None, first

    def stop(self) -> dict:
        with self._lock:
            healed, errors = [], {}
            for node in sorted(self.faulted):
                try:
                    healed.append(self._heal(node))
                except Exception as error:
                    errors[str(node)] = f"{type(error).__name__}: {error}"
                    continue
                self.faulted.discard(node)
        result: dict = {"healed": healed}
        if errors:
            result["errors"] = errors
        return result

    def _heal(self, node: int) -> dict:
        if self.control.is_alive(node):
            answer = self.control.clear_disk_faults(node)
            return {"node": node, "counts": None if answer is None else answer["counts"]}
        # Halted on a failed log directory, or powered off: replace the disk, restart.
        halted = self.control.disk_halt(node)
        pid = self.control.start(node)
        detail: dict = {"node": node, "restarted_pid": pid}
        if halted is not None:
            detail["halted"] = halted.get("reason")
            detail["counts"] = halted.get("counts")
        return detail

    def heal(self) -> None:
        result = self.stop()
        if "errors" in result:
            raise RuntimeError(f"disk heal failed for brokers {result['errors']}")
