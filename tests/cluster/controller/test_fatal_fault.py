"""A controller whose committed metadata cannot be applied halts, as Kafka's QuorumController
does on a replay error (its fatal fault handler ends the process): the record goes through the
real metadata quorum on the simulator, the controller core reports the fault through its
`on_fatal` hook, the simulated node stops (no exception out of the event loop), and a restart
replays the log and halts again at the same record. The process runtime's hook ends a real
process at once with its own status."""

from __future__ import annotations

import subprocess
import sys
import uuid

from cluster.metadata.records import PartitionRecord, encode_record
from cluster.runtime.controller_halt import CONTROLLER_FAULT_EXIT_STATUS
from cluster.sim.cluster import CONTROLLER_ID, SimCluster

# A partition of a topic no record ever created: what a node whose log diverged (under
# controller.quorum.vote.skip.log.check) meets when the other side's records are committed.
ORPHAN = PartitionRecord(str(uuid.UUID(int=0xBAD)), 0, (0,), (0,), 0, 0, 0)


def _commit_orphan(sim: SimCluster) -> int:
    """Append the orphan partition record through the active controller's quorum; its offset."""
    controller = sim.controller
    assert controller is not None and controller.quorum is not None
    offset = controller.quorum.append([encode_record(ORPHAN)], lambda base, why: None)
    assert offset is not None
    return offset


def test_a_controller_halts_on_committed_metadata_it_cannot_apply_and_again_after_a_restart() -> None:
    sim = SimCluster(n_brokers=1, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), what="the broker registered")
    offset = _commit_orphan(sim)
    sim.run_for(50)  # no exception escapes the simulation: the node stops instead

    assert not sim.is_controller_running(CONTROLLER_ID)
    (reason,) = sim.controller_halts(CONTROLLER_ID)
    assert reason == (f"committed metadata at offset {offset} (epoch 1) cannot be applied: metadata record at offset "
                      f"{offset}: partition of unknown topic {ORPHAN.topic_id}")
    # The record was committed: the journal the checks read has it, from the halted node's log.
    report = sim.quorum_report()
    (node,) = report["nodes"]
    assert node["committed"][-1][0] == offset and node["high_watermark"] == offset + 1
    assert [tuple(r[:3]) for r in report["partition_records"]] == [(offset, ORPHAN.topic_id, 0)]

    # A restart replays the log, meets the record again and halts again, as Kafka's would.
    sim.start_controller(CONTROLLER_ID)
    sim.run_for(50)
    assert not sim.is_controller_running(CONTROLLER_ID)
    assert sim.controller_halts(CONTROLLER_ID) == [reason, reason]
    assert sim.is_running(0)  # the broker lives on; without a controller it is fenced in time


def test_a_halted_controller_core_without_a_runtime_hook_stops_deciding_and_answering() -> None:
    from cluster.protocol.versions import ApiKey

    sim = SimCluster(n_brokers=1, seed=7)
    sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), what="the broker registered")
    controller = sim.controller
    assert controller is not None and controller.is_active
    controller.on_fatal = None  # the core alone: no runtime ends the process
    _commit_orphan(sim)
    sim.run_for(50)

    assert sim.is_controller_running(CONTROLLER_ID) and sim.controller_halts(CONTROLLER_ID) == []
    assert controller.halted is not None and "partition of unknown topic" in controller.halted
    assert not controller.is_active and controller.epoch == -1
    pending = sim.send(CONTROLLER_ID, ApiKey.API_VERSIONS, 3, request_timeout_ms=500,
                       client_software_name="t", client_software_version="1")
    sim.run_until(lambda: pending.done, 2000, what="the halted controller's answer")
    assert pending.result is not None and not pending.result.ok  # the connection is closed, nothing served
    before = controller.committed_image.next_offset
    controller.on_commit(before, [encode_record(ORPHAN)], 1)  # the quorum delivering more: ignored
    assert controller.committed_image.next_offset == before


def test_the_process_hook_exits_at_once_with_its_own_status() -> None:
    code = "from cluster.runtime.controller_halt import halt; halt('metadata record at offset 5: partition of unknown topic x'); print('not reached')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == CONTROLLER_FAULT_EXIT_STATUS
    assert "not reached" not in done.stdout
    assert "controller halted: metadata record at offset 5: partition of unknown topic x" in done.stderr
