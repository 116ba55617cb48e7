"""The two transaction switches that need the kio transactional producer, each shown by one
seeded simulated run with a fixed fault schedule, and the same run valid on the safe cluster:

- `transaction.partition.verification.enable=false`: loss on the link from the client to
  broker 0 (TCP retransmits a lost Produce 200 ms later, after its 150-ms message timed out
  and the producer aborted and bumped its epoch): the late Produce opens a transaction the
  coordinator does not know, which hangs the partition's LSO (acknowledged writes after it
  `unseen`) or is committed by the producer's next transaction there (`G1a`);
  The same with the live target client>primary (the client's link to the busiest leader,
  resolved when the fault starts), on the hunt's 4-s runs with 100-ms timeouts;
- `transaction.offset.commit.skip.generation.check=true`: eos copies stalled past
  max.poll.interval.ms commit their offsets with their old generation (`eos-duplicate`).

And a run the safe cluster got wrong before the verification guard (found by the verification
hunt's safe form, seed 1 of its two-fault 6-s form): broker 2's messages to broker 1 lost from
2.4 s for 2.5 s. Broker 1 leads t0-0 and asked broker 2, the coordinator of logquake-txn-t-0,
at 4.744 s to verify producer 0's epoch-1 batch (value 91); the answer (none: the partition was
in the ongoing transaction) was lost and retransmitted, and arrived at 5.346 s, after the
producer had timed out, aborted and its abort marker was written to t0-0 (5.310 s). The leader
appended the batch anyway, opening a transaction there that the producer's next transaction
(epoch 2) committed: G1a. Kafka's VerificationGuard refuses that append (INVALID_TXN_STATE), as
the broker now does (cluster/broker/producer_state.py, cluster/broker/produce.py).

Minutes each on the shared machine: soak. The hunts for them: tests/harness/test_hunt_txn.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

LOSS_SCHEDULE = [
    {"at_s": 1.0, "f": "start-link-loss", "value": {"target": "link", "links": [["client", 0]], "fault": {"loss": 0.5}}},
    {"at_s": 4.0, "f": "stop-link-loss", "value": None},
]
VERIFICATION = ["--workload-option", "txn=true", "--nemesis", "link-loss", "--time-limit", "6", "--final-time-limit", "5",
                "--quiet-period", "1", "--rate", "100", "--concurrency", "5", "--seed", "1",
                "--client-config", "request.timeout.ms=100", "--client-config", "message.timeout.ms=150"]
LIVE_SCHEDULE = [
    {"at_s": 1.0, "f": "start-link-loss", "value": {"target": "client>primary", "fault": {"loss": 0.5}}},
    {"at_s": 2.0, "f": "stop-link-loss", "value": None},
]
LIVE = [*VERIFICATION[:VERIFICATION.index("--time-limit")], "--time-limit", "4", "--final-time-limit", "3",
        "--quiet-period", "1", "--rate", "100", "--concurrency", "5", "--seed", "1",
        "--client-config", "request.timeout.ms=100", "--client-config", "message.timeout.ms=100"]
MARKER_RACE_SCHEDULE = [
    {"at_s": 2.4, "f": "start-link-loss", "value": {"target": "link", "links": [[2, 1]], "fault": {"loss": 1.0}}},
    {"at_s": 4.9, "f": "stop-link-loss", "value": None},
]
MARKER_RACE = [*VERIFICATION[:VERIFICATION.index("--client-config")],
               "--client-config", "request.timeout.ms=100", "--client-config", "message.timeout.ms=100"]
GENERATION = ["--workload", "eos", "--workload-option", "stall_p=0.2", "--time-limit", "20", "--seed", "5"]


def _run(tmp_path: Path, argv: list[str]) -> dict:
    main(["test", "--sim", *argv, "--results-dir", str(tmp_path)])
    found = sorted(tmp_path.glob("*/2*/results.json"))
    assert found, f"no results under {tmp_path}"
    return json.loads(found[-1].read_text())


def _bad(results: dict) -> set[str]:
    return {a["name"] for a in results["anomalies"] if not a["allowed"]}


@pytest.mark.soak
def test_a_late_produce_after_an_epoch_bump_hangs_or_joins_a_transaction_without_verification(tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(LOSS_SCHEDULE))
    argv = [*VERIFICATION, "--fault-schedule", str(schedule)]
    safe = _run(tmp_path / "safe", argv)
    unsafe = _run(tmp_path / "unsafe", [*argv, "--cluster-config", "transaction.partition.verification.enable=false"])
    assert safe["valid"] is True and not _bad(safe), safe["anomalies"]
    assert unsafe["valid"] is False and _bad(unsafe) & {"unseen", "G1a"}, unsafe["anomalies"]


@pytest.mark.soak
def test_the_live_target_client_primary_shows_it_on_the_hunts_shape(tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(LIVE_SCHEDULE))
    argv = [*LIVE, "--fault-schedule", str(schedule)]
    safe = _run(tmp_path / "safe", argv)
    unsafe = _run(tmp_path / "unsafe", [*argv, "--cluster-config", "transaction.partition.verification.enable=false"])
    assert safe["valid"] is True and not _bad(safe), safe["anomalies"]
    assert unsafe["valid"] is False and _bad(unsafe) & {"unseen", "G1a"}, unsafe["anomalies"]


@pytest.mark.soak
def test_with_verification_an_abort_marker_before_the_verified_append_refuses_it(tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps(MARKER_RACE_SCHEDULE))
    safe = _run(tmp_path, [*MARKER_RACE, "--fault-schedule", str(schedule)])
    assert safe["valid"] is True and not _bad(safe), safe["anomalies"]


@pytest.mark.soak
def test_a_stalled_copier_commits_with_its_old_generation_without_the_check(tmp_path: Path) -> None:
    safe = _run(tmp_path / "safe", GENERATION)
    unsafe = _run(tmp_path / "unsafe", [*GENERATION, "--cluster-config", "transaction.offset.commit.skip.generation.check=true"])
    assert safe["valid"] is True and not _bad(safe), safe["anomalies"]
    assert unsafe["valid"] is False and "eos-duplicate" in _bad(unsafe), unsafe["anomalies"]
