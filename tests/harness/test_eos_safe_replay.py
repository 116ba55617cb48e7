"""The generation-check hunt's safe form (the check on, `without_switch`) in its short shape
(`--time-limit 10 --final-time-limit 6`), seed 1: its fourth run was judged eos-missing on
the safe cluster. The replay of that run's schedule, deterministic in the simulation:

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
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.hunt_switches import SWITCH_HUNTS, without_switch
from harness.testcmd import main

SCHEDULE = {"faults": [{"kind": "pause", "targets": "primaries", "start_s": 0.2, "duration_s": 4.4}],
            "ops": [{"at_s": 0.2, "f": "start-pause", "value": {"nodes": None, "targets": "primaries"}},
                    {"at_s": 4.6, "f": "stop-pause", "value": None}]}


def _short_safe_argv() -> list[str]:
    """The safe hunt's run arguments with the short phases the failing hunt used."""
    argv = without_switch(SWITCH_HUNTS["transaction.offset.commit.skip.generation.check"])
    argv = [a for i, a in enumerate(argv) if a != "--max-faults" and (i == 0 or argv[i - 1] != "--max-faults")]
    argv[argv.index("--time-limit") + 1] = "10"
    argv[argv.index("--final-time-limit") + 1] = "6"
    assert not any(a.startswith("transaction.offset.commit.skip.generation.check") for a in argv)
    return argv


@pytest.mark.slow  # one simulated run (20 simulated s, ~1 wall s) and its Spark check
def test_a_copier_whose_offset_reset_meets_a_moved_leader_refreshes_its_metadata_and_copies(tmp_path: Path) -> None:
    schedule = tmp_path / "fault-schedule.json"
    schedule.write_text(json.dumps(SCHEDULE))
    code = main(["--sim", *_short_safe_argv(), "--nemesis-interval", "10", "--concurrency", "5", "--seed", "1",
                 "--name", "eos-safe", "--fault-schedule", str(schedule), "--results-dir", str(tmp_path)])
    (run_dir,) = sorted(p for p in tmp_path.glob("eos-safe/2*") if p.is_dir())
    results = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and results["valid"] is True, [(a["name"], a["count"]) for a in results["anomalies"]]
    # Offset resets still meet stale leaders (the pause moved them), and leave them at once:
    # without the refresh partition 0's reset asked broker 1 for the rest of the run (154 times).
    stale = (run_dir / "harness.log").read_text().count("Failed fetch offsets from")
    assert 1 <= stale <= 5, stale
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    copied = {int(k) for op in ops if op["f"] == "copy" and op["type"] == "ok"
              for m in op["value"] or [] if m[0] == "poll" for k, pairs in m[1].items() if pairs}
    assert copied == {0, 1, 2, 3}, copied
