"""The generation-check hunt's safe form (the check on, `without_switch`) in its short shape
(`--time-limit 10 --final-time-limit 6`) was judged eos-missing on the safe cluster at seed 1
(run 4) and seed 2 (run 6). Replays of those runs' schedules, deterministic in the simulation.

Seed 1, run 4 (a client bug):

A pause of the primaries (0.2-4.6 s) moved the leadership of eos-input-0 from broker 1 to
broker 2 (epoch 3). At 5.0 s a copier (process 3) was given partition 0; the group had no
committed offset there, so its aiokafka consumer reset it to the earliest offset with a
ListOffsets to the leader its metadata (last refreshed at 0.28 s) named: broker 1, which
answered NOT_LEADER_OR_FOLLOWER. aiokafka 0.14's offset reset retries the same broker without
asking for new metadata (its metadata ages out after 5 minutes), so until the run's end (20 s)
partition 0 was never read: 54 input records, none copied (eos-missing), the cluster right.
Kafka's Java consumer (KAFKA-9535) and librdkafka refresh the metadata on that answer; the
simulated clients now do too (workloads/clients/aiokafka_stale_leader.py), and the run is
valid (the first stale answers, for partitions 2 and 3, now refresh the metadata, so
the run takes another course from there: two failed resets in all, every partition copied).

Seed 2, run 6 (the final phase shorter than the group's handover): by 1.55 s all four copiers
were in stalled copies (9 s); a pause of every broker from 6.7 s to the main phase's end held
their offset sends and aborts until they timed out (30.3-30.6 s, abort-failed, the processes
ended), and the heal came after them (30.58 s). The group coordinator had moved from broker 0
to broker 2, which loaded the group (generation 2) with the four dead members: their
LeaveGroup went to broker 0 (COORDINATOR_NOT_AVAILABLE, not retried), so they stayed members
until their sessions (session.timeout.ms 6 s) expired 6 s after the load, at 36.59 s, when
the final phase's copiers, joined since 31.69 s, got the partitions. The copy window was half
the 6-s final phase (31.58-34.58 s): nothing was copied and the verifier (35.03 s) found 269
input records missing, which Kafka's group protocol had not yet handed to any live copier.
The window is now at least session.timeout.ms + 1 s where the phase has room for it
(`workloads.eos.copy_window_s`: 5.5 s here), and the same schedule is valid: the copiers get
the partitions at 36.59 s and copy everything before the verifier reads. (Replayed with the
full form's 10-s final phase before the change, it was invalid too: 189 records missing.)

Seed 1, run 9 of the full form (12 + 10 s; a client bug): `pause[primaries] 10.1+7.1s`, every
broker paused from 10.3 s; the stop fell past the main phase, so the heal waited for the
in-flight copies, which ended at their client timeouts (36.1-37.0 s, abort-failed, the
processes ended), and came at 37.01 s. Broker 0 had coordinated the group (generation 4:
copiers 6, 7, 8); broker 2 took over __consumer_offsets-2 and loaded it with those three
members at 37.014 (their sessions counted from the load, as in Kafka). Process 8's consumer
was being closed from 37.012 while it looked its coordinator up; aiokafka 0.14's background
task then found broker 2 and sent a JoinGroup anyway (37.020), which the coordinator parked
until the rebalance completed; the close waited for it, the client's 5-s close timeout ended
it, and no LeaveGroup was sent. When 6 and 7 expired (43.014, load + session.timeout.ms) the
new generation's leader was that member 8, whose process was gone: it never sent SyncGroup,
and the final phase's four copiers waited in SyncGroup past the copy window (38.0-45.0 s) and
the phase (48 s): 145 input records judged eos-missing. A closing consumer now starts no join
(workloads/clients/aiokafka_closing_rejoin.py: the Java consumer joins only from poll() and
leaves on close), so member 8 leaves at 37.020, generation 5 is the four live copiers at
43.014, and everything is copied by 43.3 s: valid (invalid, eos-missing 145, without it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.hunt_switches import SWITCH_HUNTS, without_switch
from harness.testcmd import main
from workloads.eos import copy_window_s

SCHEDULE = {"faults": [{"kind": "pause", "targets": "primaries", "start_s": 0.2, "duration_s": 4.4}],
            "ops": [{"at_s": 0.2, "f": "start-pause", "value": {"nodes": None, "targets": "primaries"}},
                    {"at_s": 4.6, "f": "stop-pause", "value": None}]}
# Seed 2's minimal schedule: every broker paused from 6.7 s until the heal.
SCHEDULE_SEED_2 = {"faults": [{"kind": "pause", "targets": "primaries", "start_s": 6.7, "duration_s": 3.3}],
                   "ops": [{"at_s": 6.7, "f": "start-pause", "value": {"nodes": None, "targets": "primaries"}}]}


# Seed 1, run 9 of the full form: every broker paused from 10.1 s until the heal.
SCHEDULE_FULL_SEED_1 = {"faults": [{"kind": "pause", "targets": "primaries", "start_s": 10.1, "duration_s": 7.1}],
                        "ops": [{"at_s": 10.1, "f": "start-pause", "value": {"nodes": None, "targets": "primaries"}}]}


def _safe_argv() -> list[str]:
    """The safe hunt's run arguments (the generation check on), without the hunt's own options."""
    argv = without_switch(SWITCH_HUNTS["transaction.offset.commit.skip.generation.check"])
    argv = [a for i, a in enumerate(argv) if a != "--max-faults" and (i == 0 or argv[i - 1] != "--max-faults")]
    assert not any(a.startswith("transaction.offset.commit.skip.generation.check") for a in argv)
    return argv


def _short_safe_argv() -> list[str]:
    """The safe hunt's run arguments with the short phases the failing hunt used."""
    argv = _safe_argv()
    argv[argv.index("--time-limit") + 1] = "10"
    argv[argv.index("--final-time-limit") + 1] = "6"
    return argv


def _replay(tmp_path: Path, schedule: dict, seed: int, argv: list[str] | None = None) -> tuple[Path, list[dict]]:
    path = tmp_path / "fault-schedule.json"
    path.write_text(json.dumps(schedule))
    argv = _short_safe_argv() if argv is None else argv
    code = main(["--sim", *argv, "--nemesis-interval", "10", "--seed", str(seed),
                 "--name", "eos-safe", "--fault-schedule", str(path), "--results-dir", str(tmp_path)])
    (run_dir,) = sorted(p for p in tmp_path.glob("eos-safe/2*") if p.is_dir())
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [(a["name"], a["count"]) for a in results["anomalies"]]
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    return run_dir, ops


def _copied_keys(ops: list[dict], after_s: float = 0.0) -> set[int]:
    return {int(k) for op in ops if op["f"] == "copy" and op["type"] == "ok" and op["time_ns"] >= after_s * 1e9
            for m in op["value"] or [] if m[0] == "poll" for k, pairs in m[1].items() if pairs}


def test_the_copy_window_covers_the_groups_handover_where_the_final_phase_has_room() -> None:
    assert copy_window_s(6, 6000) == 5.5  # the short form: all but the verifier's reserve
    assert copy_window_s(10, 6000) == 7.0  # session timeout and the margin
    assert copy_window_s(30, 6000) == 15.0  # half the phase, as before, when that is longer
    assert copy_window_s(1, 6000) == 0.5
    assert copy_window_s(20, 45000) == 19.5  # librdkafka's default session timeout


@pytest.mark.slow  # one simulated run (20 simulated s, ~1 wall s) and its Spark check
def test_a_copier_whose_offset_reset_meets_a_moved_leader_refreshes_its_metadata_and_copies(tmp_path: Path) -> None:
    run_dir, ops = _replay(tmp_path, SCHEDULE, seed=1)
    # Offset resets still meet stale leaders (the pause moved them), and leave them at once:
    # without the refresh partition 0's reset asked broker 1 for the rest of the run (154 times).
    stale = (run_dir / "harness.log").read_text().count("Failed fetch offsets from")
    assert 1 <= stale <= 5, stale
    assert _copied_keys(ops) == {0, 1, 2, 3}


@pytest.mark.slow  # one simulated run (37 simulated s, ~1 wall s) and its Spark check
def test_the_final_phase_copies_once_the_dead_copiers_sessions_expire(tmp_path: Path) -> None:
    _, ops = _replay(tmp_path, SCHEDULE_SEED_2, seed=2)
    dead = [op for op in ops if op["f"] == "copy" and op["type"] == "fail" and op.get("end_process")]
    assert len(dead) == 4 and all(op["error"][0] == "abort-failed" for op in dead), "every copier died in the pause"
    (heal,) = [op for op in ops if op["f"] == "stop-pause" and op["type"] == "info" and op["value"] == "heal"]
    # Everything copied after the heal, by the final phase's copiers, once the group handed
    # them the partitions (session.timeout.ms after the new coordinator loaded the group).
    assert _copied_keys(ops, after_s=heal["time_ns"] / 1e9 + 6) == {0, 1, 2, 3}


@pytest.mark.slow  # one simulated run (44 simulated s, ~1 wall s) and its Spark check
def test_a_copier_closed_while_its_coordinator_was_unknown_leaves_instead_of_rejoining(tmp_path: Path) -> None:
    _, ops = _replay(tmp_path, SCHEDULE_FULL_SEED_1, seed=1, argv=_safe_argv())
    (heal,) = [op for op in ops if op["f"] == "stop-pause" and op["type"] == "info" and op["value"] == "heal"]
    heal_s = heal["time_ns"] / 1e9
    dead = [op for op in ops if op["f"] == "copy" and op["type"] == "fail" and op.get("end_process")
            and 10.1 < op["time_ns"] / 1e9 <= heal_s]
    assert len(dead) == 3 and all(op["error"][0] == "abort-failed" for op in dead), "three copiers died in the pause"
    # The group is handed to the final phase's copiers when the dead members' sessions
    # (session.timeout.ms 6 s) expire after the new coordinator loaded it at the heal; a
    # closing copier that had rejoined led that generation and held it another 6 s.
    first = min(op["time_ns"] / 1e9 for op in ops if op["f"] == "copy" and op["type"] == "ok"
                and op["time_ns"] / 1e9 > heal_s and _copied_keys([op]))
    assert heal_s + 6 <= first < heal_s + 7, (heal_s, first)
    assert _copied_keys(ops, after_s=heal_s) == {0, 1, 2, 3}
