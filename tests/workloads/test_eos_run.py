"""`logquake test --workload eos` end to end on three brokers without faults: the run is
valid with committed copies, and the plain-Python oracle agrees that its real history is clean."""

import json

from harness.history import read_history
from tests.checkers.eos_oracle import eos_counts
from tests.run_logquake import run_logquake


def test_a_short_eos_run_is_valid_with_committed_copies(tmp_path):
    results = tmp_path / "results"
    argv = ["--workload", "eos", "--brokers", "3", "--time-limit", "6",
            "--quiet-period", "0", "--final-time-limit", "60", "--seed", "11", "--workload-option", "crash_p=0.1",
            "--results-dir", str(results)]
    # About 25-60 s, under make test's load too.
    out = run_logquake(argv, timeout_s=300)
    run_dirs = [p.parent for p in results.rglob("results.json")]
    assert len(run_dirs) == 1, out.stderr[-3000:]
    run_dir = run_dirs[0]
    verdict = json.loads((run_dir / "results.json").read_text())
    assert verdict["valid"] is True, (verdict["anomalies"], verdict["errors"], out.stdout[-2000:])
    assert out.returncode == 0
    claims = {c["name"]: c["holds"] for c in verdict["claims"]}
    assert claims["exactly-once"] and claims["at-least-once"]
    ops = read_history(run_dir / "history.jsonl")
    committed = [op for op in ops if op.f == "copy" and op.type == "ok" and op.value]
    assert committed, "no copy committed"
    verifier = [op for op in ops if op.f == "poll" and op.type == "ok"]
    assert len(verifier) == 1
    assert eos_counts(ops) == {}
    # Every acknowledged input value was copied (decoded from the output the verifier read).
    acked = {op.value[0][2][1] for op in ops if op.f == "send" and op.type == "ok"}
    spec = json.loads((run_dir / "spec.json").read_text())
    partitions = int(spec["workload_options"].get("partitions", 4))
    output = [v >> 20 for k, pairs in verifier[0].value[0][1].items() if int(k) >= partitions for _, v in pairs]
    assert acked and sorted(output) == sorted(acked)
